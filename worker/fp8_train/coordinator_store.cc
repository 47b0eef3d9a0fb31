#include "worker/fp8_train/coordinator_store.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fp8::train_cli {
namespace {

// The largest timeout_ms the service accepts; longer waits are made of several calls.
constexpr absl::Duration kMaxCallTimeout = absl::Milliseconds(600'000);
// Added to each call's gRPC deadline beyond its timeout_ms: the server answers a timeout
// itself, naming the missing keys, which is a better message than the client's own.
constexpr absl::Duration kDeadlineMargin = absl::Seconds(5);
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

}  // namespace

CoordinatorStore::CoordinatorStore(std::shared_ptr<grpc::Channel> channel, CoordinatorStoreOptions options)
    : stub_(fp8::v1::RendezvousService::NewStub(std::move(channel))), options_(std::move(options)) {}

std::string CoordinatorStore::describe() const {
  return absl::StrCat("coordinator rendezvous at ", options_.address, ", namespace ", options_.rendezvous_namespace);
}

absl::Status CoordinatorStore::named(const grpc::Status& s) const {
  // absl and gRPC share the canonical status codes, number for number.
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(describe(), ": ", s.error_message()));
}

template <typename Call>
absl::Status CoordinatorStore::call_with_retries(absl::Duration timeout, Call call) {
  const absl::Time deadline = absl::Now() + std::max(timeout, absl::ZeroDuration());
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    const absl::Duration this_call = std::min(left, kMaxCallTimeout);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + options_.token);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + this_call + kDeadlineMargin));
    const grpc::Status s = call(ctx, absl::ToInt64Milliseconds(this_call));
    if (s.ok()) return absl::OkStatus();
    const bool more_time = absl::Now() < deadline;
    // A wait longer than one call allows continues in the next call.
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && this_call < left && more_time) continue;
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || !more_time) {
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
        return named(grpc::Status(s.error_code(), absl::StrCat("unreachable for ", absl::FormatDuration(timeout),
                                                                " (last error: ", s.error_message(), ")")));
      }
      return named(s);
    }
    absl::SleepFor(std::min(backoff, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::Status CoordinatorStore::set(std::string_view key, std::string_view value) {
  fp8::v1::RendezvousSetRequest req;
  req.set_rendezvous_namespace(options_.rendezvous_namespace);
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  return call_with_retries(options_.retry_window, [&](grpc::ClientContext& ctx, int64_t) {
    fp8::v1::RendezvousSetResponse resp;
    return stub_->Set(&ctx, req, &resp);
  });
}

absl::StatusOr<std::string> CoordinatorStore::get(std::string_view key, absl::Duration timeout) {
  fp8::v1::RendezvousGetRequest req;
  req.set_rendezvous_namespace(options_.rendezvous_namespace);
  req.set_key(std::string(key));
  fp8::v1::RendezvousGetResponse resp;
  absl::Status s = call_with_retries(timeout, [&](grpc::ClientContext& ctx, int64_t timeout_ms) {
    req.set_timeout_ms(timeout_ms);
    return stub_->Get(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return std::move(*resp.mutable_value());
}

absl::Status CoordinatorStore::wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  fp8::v1::RendezvousWaitRequest req;
  req.set_rendezvous_namespace(options_.rendezvous_namespace);
  for (const std::string& k : keys) req.add_keys(k);
  return call_with_retries(timeout, [&](grpc::ClientContext& ctx, int64_t timeout_ms) {
    req.set_timeout_ms(timeout_ms);
    fp8::v1::RendezvousWaitResponse resp;
    return stub_->Wait(&ctx, req, &resp);
  });
}

absl::StatusOr<bool> CoordinatorStore::contains(std::string_view key) {
  // A Get with timeout_ms 0 checks once; DEADLINE_EXCEEDED means "not set". The retry
  // window covers a coordinator that is restarting, not the key's absence.
  fp8::v1::RendezvousGetRequest req;
  req.set_rendezvous_namespace(options_.rendezvous_namespace);
  req.set_key(std::string(key));
  bool missing = false;
  absl::Status s = call_with_retries(options_.retry_window, [&](grpc::ClientContext& ctx, int64_t) {
    req.set_timeout_ms(0);
    fp8::v1::RendezvousGetResponse resp;
    grpc::Status got = stub_->Get(&ctx, req, &resp);
    if (got.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      missing = true;
      return grpc::Status::OK;
    }
    return got;
  });
  if (!s.ok()) return s;
  return !missing;
}

}  // namespace fp8::train_cli
