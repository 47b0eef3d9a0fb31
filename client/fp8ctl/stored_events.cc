#include "client/fp8ctl/stored_events.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace fp8::ctl {

StoredEventsResult read_stored_events(Session& session, const std::string& job_id, bool include_progress,
                                    std::chrono::milliseconds first_event_wait, std::chrono::milliseconds quiet_gap) {
  using Clock = std::chrono::steady_clock;
  StoredEventsResult result;
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_include_progress(include_progress);
  std::unique_ptr<grpc::ClientContext> ctx = session.context();  // the 10 s deadline bounds it all
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = session.stub().WatchJob(ctx.get(), req);

  // A watchdog cancels the call once the stream has been quiet for the gap.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool cancelled = false;
  Clock::time_point quiet_until = Clock::now() + first_event_wait;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      if (cv.wait_until(lock, quiet_until, [&] { return done || Clock::now() >= quiet_until; }) && !done) {
        cancelled = true;
        ctx->TryCancel();
        return;
      }
    }
  });

  v1::JobEvent event;
  while (reader->Read(&event)) {
    result.events.push_back(event);
    std::lock_guard<std::mutex> lock(mu);
    quiet_until = Clock::now() + quiet_gap;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  result.status = reader->Finish();
  if (cancelled && result.status.error_code() == grpc::StatusCode::CANCELLED) result.status = grpc::Status::OK;
  return result;
}

}  // namespace fp8::ctl
