#include "common/log/log.h"

#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/formatter.h"
#include "spdlog/logger.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace fp8::log {
namespace {

constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%E3SZ";

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarning: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

Level from_spdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return Level::kDebug;
    case spdlog::level::info: return Level::kInfo;
    case spdlog::level::warn: return Level::kWarning;
    default: return Level::kError;
  }
}

// Both formats in one formatter, so the text and the json lines of one event always agree.
class LineFormatter final : public spdlog::formatter {
 public:
  LineFormatter(Format format, std::string component, std::optional<int> rank)
      : format_(format), component_(std::move(component)), rank_(rank) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string time = absl::FormatTime(kTimeFormat, absl::FromChrono(msg.time), absl::UTCTimeZone());
    const Level level = from_spdlog(msg.level);
    const absl::string_view message(msg.payload.data(), msg.payload.size());
    std::string line;
    if (format_ == Format::kJson) {
      nlohmann::ordered_json j;
      j["time"] = time;
      j["level"] = std::string(level_name(level));
      j["component"] = component_;
      if (rank_) j["rank"] = *rank_;
      j["message"] = std::string(message);
      // A message that is not UTF-8 (a path, a peer's bytes) still makes one valid line.
      line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      std::string upper(level_name(level));
      for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
      const std::string who = rank_ ? absl::StrCat(component_, "[rank ", *rank_, "]") : component_;
      line = absl::StrCat(time, " ", upper, " ", who, ": ", message);
    }
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_, component_, rank_);
  }

 private:
  Format format_;
  std::string component_;
  std::optional<int> rank_;
};

std::shared_ptr<spdlog::logger> make_logger(const Options& o) {
  spdlog::sink_ptr sink;
  if (o.sink != nullptr) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*o.sink, /*force_flush=*/true);
  } else if (o.to_stdout) {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  sink->set_formatter(std::make_unique<LineFormatter>(o.format, o.component, o.rank));
  auto logger = std::make_shared<spdlog::logger>(o.component, std::move(sink));
  logger->set_level(to_spdlog(o.min_level));
  logger->flush_on(spdlog::level::trace);
  return logger;
}

struct Current {
  std::mutex mu;
  std::shared_ptr<spdlog::logger> logger = make_logger(Options{});
};

Current& current() {
  static Current* c = new Current();  // never destroyed: threads may log during exit
  return *c;
}

}  // namespace

void install(const Options& options) {
  std::shared_ptr<spdlog::logger> logger = make_logger(options);
  Current& c = current();
  std::lock_guard<std::mutex> lock(c.mu);
  c.logger = std::move(logger);
}

void write(Level level, absl::string_view message) {
  std::shared_ptr<spdlog::logger> logger;
  {
    Current& c = current();
    std::lock_guard<std::mutex> lock(c.mu);
    logger = c.logger;
  }
  logger->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

absl::StatusOr<Format> parse_format(absl::string_view name) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return absl::InvalidArgumentError(absl::StrCat("log format \"", name, "\": expected text or json"));
}

absl::StatusOr<Level> parse_level(absl::string_view name) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarning, Level::kError}) {
    if (name == level_name(l)) return l;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level \"", name, "\": expected debug, info, warning or error"));
}

absl::string_view level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarning: return "warning";
    case Level::kError: return "error";
  }
  return "info";
}

std::optional<Record> read_json_line(absl::string_view line) {
  if (line.empty() || line.front() != '{') return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto time = j.find("time");
  const auto level = j.find("level");
  const auto component = j.find("component");
  const auto message = j.find("message");
  if (time == j.end() || level == j.end() || component == j.end() || message == j.end() || !time->is_string() ||
      !level->is_string() || !component->is_string() || !message->is_string()) {
    return std::nullopt;
  }
  Record r;
  absl::Time t;
  std::string ignored;
  if (!absl::ParseTime(kTimeFormat, time->get<std::string>(), absl::UTCTimeZone(), &t, &ignored)) return std::nullopt;
  r.time_unix_ms = absl::ToUnixMillis(t);
  absl::StatusOr<Level> l = parse_level(level->get<std::string>());
  if (!l.ok()) return std::nullopt;
  r.level = *l;
  r.component = component->get<std::string>();
  const auto rank = j.find("rank");
  if (rank != j.end()) {
    if (!rank->is_number_integer()) return std::nullopt;
    r.rank = rank->get<int>();
  }
  r.message = message->get<std::string>();
  return r;
}

}  // namespace fp8::log
