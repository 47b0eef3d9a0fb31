#include "worker/fp8_worker/log_forwarder.h"

#include <vector>

#include "common/log/log.h"

namespace fp8::worker {

LogForwarder::LogForwarder(Sender sender, Options options) : sender_(std::move(sender)), options_(options) {
  if (options_.background) thread_ = std::thread([this] { run(); });
}

LogForwarder::~LogForwarder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LogForwarder::open(const RankKey& key, const std::string& coordinator_address, const std::string& trainer_token) {
  std::lock_guard<std::mutex> lock(mu_);
  Stream& s = streams_[key];
  s.address = coordinator_address;
  s.token = trainer_token;
  s.closed = false;
}

namespace {

v1::LogLine::Level to_proto(std::optional<log::Level> level) {
  if (!level) return v1::LogLine::LEVEL_UNSPECIFIED;
  switch (*level) {
    case log::Level::kDebug: return v1::LogLine::LEVEL_DEBUG;
    case log::Level::kInfo: return v1::LogLine::LEVEL_INFO;
    case log::Level::kWarning: return v1::LogLine::LEVEL_WARNING;
    case log::Level::kError: return v1::LogLine::LEVEL_ERROR;
  }
  return v1::LogLine::LEVEL_UNSPECIFIED;
}

}  // namespace

void LogForwarder::append(const RankKey& key, absl::string_view line, int64_t time_unix_ms,
                          std::optional<log::Level> level) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(key);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  if (s.lines.size() >= options_.max_buffered_lines) {
    s.lines.pop_front();
    if (!s.warned) {
      s.warned = true;
      log::warn(key.to_string() + ": output faster than the coordinator takes it; dropping old lines "
                "from its log stream (output.log on this worker has them all)");
    }
  }
  v1::LogLine& l = s.lines.emplace_back();
  l.set_time_unix_ms(time_unix_ms);
  l.set_text(std::string(line));
  l.set_level(to_proto(level));
}

void LogForwarder::close(const RankKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(key);
    if (it != streams_.end()) it->second.closed = true;
    flush_now_ = true;
  }
  wake_.notify_all();
}

bool LogForwarder::delivered(const RankKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(key);
  return it == streams_.end() || (it->second.lines.empty() && it->second.sending == 0);
}

void LogForwarder::flush_once() {
  std::lock_guard<std::mutex> pass(flush_mu_);
  struct Batch {
    RankKey key;
    std::string address;
    std::string token;
    v1::AppendLogsRequest request;
  };
  std::vector<Batch> batches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = streams_.begin(); it != streams_.end();) {
      Stream& s = it->second;
      if (s.lines.empty()) {
        it = s.closed ? streams_.erase(it) : std::next(it);
        continue;
      }
      Batch& b = batches.emplace_back();
      b.key = it->first;
      b.address = s.address;
      b.token = s.token;
      b.request.mutable_caller()->set_job_id(it->first.job_id);
      b.request.mutable_caller()->set_attempt(it->first.attempt);
      b.request.mutable_caller()->set_rank(it->first.rank);
      for (int n = 0; n < kMaxLinesPerAppend && !s.lines.empty(); ++n) {
        *b.request.add_lines() = std::move(s.lines.front());
        s.lines.pop_front();
      }
      ++s.sending;
      ++it;
    }
  }
  // The calls go out without the lock: readers keep appending meanwhile.
  for (Batch& b : batches) {
    absl::Status st = sender_(b.address, b.token, b.request);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(b.key);
    if (it != streams_.end()) --it->second.sending;
    if (st.ok()) continue;
    if (it != streams_.end() && !it->second.warned) {
      it->second.warned = true;
      log::warn(b.key.to_string() + ": AppendLogs to " + b.address + " failed (" + st.ToString() +
                "); its log lines are dropped while this lasts (output.log on this worker has them all)");
    }
  }
}

void LogForwarder::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait_for(lock, absl::ToChronoMilliseconds(options_.interval), [this] { return stopping_ || flush_now_; });
    flush_now_ = false;
    const bool last = stopping_;
    lock.unlock();
    flush_once();
    lock.lock();
    if (last) return;
    // A closed rank with more than a call's worth of lines left: the next pass at once.
    for (const auto& [key, stream] : streams_) flush_now_ = flush_now_ || (stream.closed && !stream.lines.empty());
  }
}

}  // namespace fp8::worker
