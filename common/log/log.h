// The product's log, through spdlog: one line per event, with its time (UTC, milliseconds),
// level and component, in one of two formats:
//
//   text  YYYY-MM-DDThh:mm:ss.sssZ INFO fp8-worker: registered with ...
//   json  {"time":"YYYY-MM-DDThh:mm:ss.sssZ","level":"info","component":"fp8-worker","message":"registered with ..."}
//
// A trainer's lines carry its rank as well ("fp8-train[rank 1]", "rank":1), so the worker
// that runs it can forward each line with its level and rank (read_json_line).
//
// Every binary's main installs the log once (install) from its flags; libraries only write
// to it. Until install, lines go to stderr in the text format with the component "fp8".
//
// spdlog rather than glog: a formatter of our own writes both formats through one sink
// (glog's line prefix is its own, and JSON would need a sink beside it), and a logger is
// a value a main configures, not process flags and InitGoogleLogging.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fp8::log {

enum class Format { kText, kJson };
enum class Level { kDebug, kInfo, kWarning, kError };

struct Options {
  std::string component = "fp8";  // the binary: fp8-coordinator, fp8-worker, fp8-train
  Format format = Format::kText;
  Level min_level = Level::kInfo;  // lines below it are dropped
  std::optional<int> rank;         // a trainer's rank
  bool to_stdout = false;          // stderr unless set
  std::ostream* sink = nullptr;    // when set, lines go here instead (tests)
};

// Replaces the process's log. Thread-safe to write to before, during and after.
void install(const Options& options);

void write(Level level, absl::string_view message);
inline void debug(absl::string_view message) { write(Level::kDebug, message); }
inline void info(absl::string_view message) { write(Level::kInfo, message); }
inline void warn(absl::string_view message) { write(Level::kWarning, message); }
inline void error(absl::string_view message) { write(Level::kError, message); }

// "text" | "json", and "debug" | "info" | "warning" | "error"; anything else is an error
// naming what is accepted.
absl::StatusOr<Format> parse_format(absl::string_view name);
absl::StatusOr<Level> parse_level(absl::string_view name);
absl::string_view level_name(Level level);  // "debug", "info", "warning", "error"

// One line of the json format, read back; nullopt for any other line (a library's own
// output, a crash message), which a reader keeps as plain text.
struct Record {
  int64_t time_unix_ms = 0;
  Level level = Level::kInfo;
  std::string component;
  std::optional<int> rank;
  std::string message;
};
std::optional<Record> read_json_line(absl::string_view line);

}  // namespace fp8::log
