#include "worker/engine/collectives/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/engine/collectives/nccl/nccl_library.h"

namespace fp8::engine::collectives {
namespace {

// ---- messages --------------------------------------------------------------------------

std::string duration_text(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "an unlimited time";
  return absl::StrFormat("%g s", absl::ToDoubleSeconds(d));
}

// "cudaMalloc: out of memory (cudaErrorMemoryAllocation)". Out of memory becomes
// ResourceExhausted so that callers can tell it from a broken device.
absl::Status cuda_error(cudaError_t e, absl::string_view context) {
  std::string message = absl::StrCat(context, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

const char* nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    case ncclNumResults:
      break;
  }
  return "unknown ncclResult_t";
}

// A failed peer process or network shows up as a remote or system error: the peer is gone
// (Unavailable). The rest are local: misuse, or a CUDA or NCCL failure on this rank.
absl::StatusCode code_for(ncclResult_t r) {
  switch (r) {
    case ncclRemoteError:
    case ncclSystemError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what>: ncclRemoteError (remote process exited or there was a network error): <NCCL's
// last error text>", plus what it means for the group where that is known. `comm` may be
// null; it must not have been aborted yet.
absl::Status nccl_error(absl::string_view what, ncclResult_t r, ncclComm_t comm) {
  std::string message = absl::StrCat(what, ": ", nccl_result_name(r), " (", nccl::api().ncclGetErrorString(r), ")");
  const char* last = nccl::api().ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, ": ", last);
  if (r == ncclRemoteError || r == ncclSystemError) {
    absl::StrAppend(&message, "; a peer rank died or the network between ranks failed (NCCL does not say which rank)");
  }
  return absl::Status(code_for(r), std::move(message));
}

// The same code with `context: ` in front of the message.
absl::Status with_context(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

// ---- the unique id on the wire -----------------------------------------------------------

std::string to_hex(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(id.internal));
  for (const char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool from_hex(absl::string_view hex, ncclUniqueId& id) {
  if (hex.size() != 2 * sizeof(id.internal)) return false;
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    id.internal[i] = static_cast<char>(static_cast<unsigned char>(hi * 16 + lo));
  }
  return true;
}

// ---- waiting -----------------------------------------------------------------------------

// A deadline and the pause between two polls: yield for the first 2 ms (short collectives
// finish within that, and a blocking wait on the communication thread is cheap), then sleep
// 50 us, and 1 ms once the wait has lasted 200 ms.
class Poll {
 public:
  explicit Poll(absl::Duration timeout) : start_(absl::Now()), deadline_(start_ + timeout) {}
  bool expired() const { return absl::Now() >= deadline_; }
  absl::Duration remaining() const { return deadline_ - absl::Now(); }
  void pause() const {
    const absl::Duration waited = absl::Now() - start_;
    if (waited < absl::Milliseconds(2)) {
      std::this_thread::yield();
    } else if (waited < absl::Milliseconds(200)) {
      absl::SleepFor(absl::Microseconds(50));
    } else {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

 private:
  absl::Time start_;
  absl::Time deadline_;
};

// Polls a non-blocking communicator until its state leaves ncclInProgress: the state then
// (ncclSuccess or an error), or ncclInProgress when the deadline passed first.
ncclResult_t wait_until_ready(ncclComm_t comm, const Poll& poll) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (const ncclResult_t r = nccl::api().ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (poll.expired()) return ncclInProgress;
    poll.pause();
  }
}

// Makes `device` current for the scope's lifetime and restores the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (const cudaError_t e = cudaGetDevice(&previous_); e != cudaSuccess) {
      status_ = cuda_error(e, "cudaGetDevice");
      return;
    }
    if (previous_ == device) return;
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      status_ = cuda_error(e, absl::StrCat("cudaSetDevice(", device, ")"));
      return;
    }
    switched_ = true;
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  absl::Status status_;
};

bool valid_op(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kMax; }
ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

// ---- the group ---------------------------------------------------------------------------

class NcclProcessGroup final : public ProcessGroup, public QueuedCollectives {
 public:
  NcclProcessGroup(int rank, int size, int device, absl::Duration timeout)
      : rank_(rank), size_(size), device_(device) {
    set_timeout(timeout);
  }
  ~NcclProcessGroup() override;
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  // Creates the stream (unless given one), the completion event and the communicator,
  // waiting until `poll`'s deadline for every rank to join. With `compute_stream`, also
  // the queued mode's event and watchdog.
  absl::Status init(const ncclUniqueId& id, void* stream, void* compute_stream, const Poll& poll);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  absl::Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  absl::Status reduce_scatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op) override;
  absl::Status all_gather_parts(std::span<const AllGatherPart> parts) override;
  absl::Status reduce_scatter_parts(std::span<const ReduceScatterPart> parts, ReduceOp op) override;
  absl::Status reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> parts) override;
  absl::Status all_reduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status all_reduce(double* data, int64_t count, ReduceOp op) override;
  absl::Status broadcast(void* data, size_t bytes, int root) override;
  absl::Status barrier() override;
  QueuedCollectives* queued() override { return compute_ != nullptr ? this : nullptr; }

  // QueuedCollectives.
  absl::Status open() override;
  absl::StatusOr<int64_t> close(const char* what) override;
  absl::Status order_after(int64_t ticket) override;
  absl::Status health() override;
  Times take_times() override;

 private:
  // A queued batch of collectives, from close() until the watchdog saw it complete and the
  // compute stream was ordered after it.
  struct Batch {
    int64_t ticket = 0;
    std::string what;
    cudaEvent_t start = nullptr;   // on stream_, once the batch's inputs were ready
    cudaEvent_t done = nullptr;    // on stream_, after its collectives
    cudaEvent_t waited = nullptr;  // on compute_, where it waits for `done` (order_after)
    absl::Duration waits_for;      // the group's timeout when the batch was queued
    absl::Time deadline;           // waits_for after `start` passed
    bool completed = false;        // `done` passed (its comm time counted)
    bool ordered = false;          // order_after() ran
  };

  // Where "nccl <op>" stands in messages: "nccl all_gather (rank 1 of 4)".
  std::string where(const char* op) const { return absl::StrCat("nccl ", op, " (rank ", rank_, " of ", size_, ")"); }

  // The error every call after the first failure returns at once; OK while not broken.
  absl::Status broken(const char* op) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (broken_.ok()) return absl::OkStatus();
    return absl::Status(broken_.code(),
                        absl::StrCat(where(op), ": the group is broken by an earlier failure: ", broken_.message()));
  }

  // Aborts the communicator, remembers `status` as the group's first failure, returns it.
  absl::Status fail(absl::Status status);
  void abort();

  absl::Status invalid(const char* op, absl::string_view why) {
    return fail(absl::InvalidArgumentError(absl::StrCat(where(op), ": ", why)));
  }

  // `p` must be device memory of this group's device (or managed memory).
  absl::Status check_buffer(const char* op, const char* name, const void* p);

  // Enqueues a collective (`enqueue` returns the NCCL call's result) and waits on the host
  // until it completed on the device, NCCL reported an error, or the timeout passed;
  // inside a queued batch (open() .. close()) it returns once the collective is queued.
  template <typename Enqueue>
  absl::Status run(const char* op, Enqueue&& enqueue);

  // The queued mode's watchdog: checks each batch against its deadline and NCCL's
  // asynchronous error state, counts the batches' device times, frees their events.
  void watch();
  // One pass over the batches (mu_ held); false once the group broke.
  bool check_batches();
  void destroy(Batch& b);

  absl::Status all_reduce_impl(const char* op, void* data, int64_t count, ncclDataType_t type, ReduceOp reduce);
  // Each part's reduce-scatter of `type` elements (ReduceScatterPart: fp32, Bf16ReduceScatterPart:
  // bf16), one NCCL group for the call.
  template <typename Part>
  absl::Status reduce_scatter_parts_of(std::span<const Part> parts, ncclDataType_t type, ncclRedOp_t reduce);

  const int rank_;
  const int size_;
  const int device_;

  // Guards comm_, broken_ and the queued mode's state: the watchdog aborts the
  // communicator from its own thread. Recursive: fail() is called with it held and not.
  std::recursive_mutex mu_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  cudaEvent_t done_ = nullptr;  // recorded after each collective, polled until complete
  float* scratch_ = nullptr;    // the barrier's one-element all-reduce
  absl::Status broken_;

  // Queued mode (compute_ set).
  cudaStream_t compute_ = nullptr;
  cudaEvent_t ready_ = nullptr;       // on compute_ at open(): what the batch waits for
  cudaEvent_t batch_start_ = nullptr; // the open batch's start event
  bool batching_ = false;
  int64_t next_ticket_ = 0;
  std::deque<Batch> batches_;
  Times times_;
  bool stopping_ = false;
  std::condition_variable_any wake_;
  std::thread watchdog_;
};

NcclProcessGroup::~NcclProcessGroup() {
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
  }
  DeviceScope scope(device_);
  for (Batch& b : batches_) destroy(b);
  if (batch_start_ != nullptr) (void)cudaEventDestroy(batch_start_);
  if (ready_ != nullptr) (void)cudaEventDestroy(ready_);
  if (comm_ != nullptr) {
    // Finalize flushes what NCCL still owes peers (a proxy thread may still be sending after
    // this rank's kernel finished), then destroy frees the rest. A finalize that cannot
    // finish in time (a peer gone) falls back to abort, which never waits for peers.
    const Poll poll(timeout());
    ncclResult_t r = nccl::api().ncclCommFinalize(comm_);
    if (r == ncclSuccess || r == ncclInProgress) r = wait_until_ready(comm_, poll);
    if (r == ncclSuccess) {
      (void)nccl::api().ncclCommDestroy(comm_);
    } else {
      (void)nccl::api().ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  // Nothing here can report an error; a sticky CUDA error resurfaces at the next
  // synchronising call of whoever uses the device next.
  if (done_ != nullptr) (void)cudaEventDestroy(done_);
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
  if (own_stream_ && stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void NcclProcessGroup::abort() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (comm_ == nullptr) return;
  // Sets NCCL's abort flag (kernels waiting for a peer quit) and frees the communicator;
  // for a non-blocking communicator the freeing may finish on NCCL's own thread, and the
  // handle must not be used again either way.
  (void)nccl::api().ncclCommAbort(comm_);
  comm_ = nullptr;
}

absl::Status NcclProcessGroup::fail(absl::Status status) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  abort();
  if (broken_.ok()) broken_ = status;
  return status;
}

absl::Status NcclProcessGroup::init(const ncclUniqueId& id, void* stream, void* compute_stream, const Poll& poll) {
  const std::string what = absl::StrCat("nccl init (rank ", rank_, " of ", size_, ", CUDA device ", device_, ")");
  DeviceScope scope(device_);
  if (!scope.status().ok()) return with_context(scope.status(), what);

  if (stream != nullptr) {
    stream_ = static_cast<cudaStream_t>(stream);
    int stream_device = -1;
    if (const cudaError_t e = cudaStreamGetDevice(stream_, &stream_device); e != cudaSuccess) {
      return cuda_error(e, absl::StrCat(what, ": cudaStreamGetDevice (the stream given)"));
    }
    if (stream_device != device_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the stream given belongs to CUDA device ", stream_device));
    }
  } else {
    if (const cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
      stream_ = nullptr;
      return cuda_error(e, absl::StrCat(what, ": cudaStreamCreateWithFlags"));
    }
    own_stream_ = true;
  }
  if (const cudaError_t e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming); e != cudaSuccess) {
    done_ = nullptr;
    return cuda_error(e, absl::StrCat(what, ": cudaEventCreateWithFlags"));
  }
  if (compute_stream != nullptr) {
    compute_ = static_cast<cudaStream_t>(compute_stream);
    int compute_device = -1;
    if (const cudaError_t e = cudaStreamGetDevice(compute_, &compute_device); e != cudaSuccess) {
      return cuda_error(e, absl::StrCat(what, ": cudaStreamGetDevice (the compute stream given)"));
    }
    if (compute_device != device_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the compute stream given belongs to CUDA device ", compute_device));
    }
    if (const cudaError_t e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming); e != cudaSuccess) {
      ready_ = nullptr;
      return cuda_error(e, absl::StrCat(what, ": cudaEventCreateWithFlags"));
    }
  }
  void* scratch = nullptr;
  if (const cudaError_t e = cudaMalloc(&scratch, sizeof(float)); e != cudaSuccess) {
    return cuda_error(e, absl::StrCat(what, ": cudaMalloc"));
  }
  scratch_ = static_cast<float*>(scratch);
  if (const cudaError_t e = cudaMemsetAsync(scratch_, 0, sizeof(float), stream_); e != cudaSuccess) {
    return cuda_error(e, absl::StrCat(what, ": cudaMemsetAsync"));
  }

  // Non-blocking: creation runs on NCCL's thread and this one polls, so that a peer that
  // never joins costs a timeout rather than a hang. NCCL uses the current device.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = nccl::api().ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = nccl_error(absl::StrCat(what, ": ncclCommInitRankConfig"), r, comm_);
    abort();
    return s;
  }
  const ncclResult_t state = wait_until_ready(comm_, poll);
  if (state == ncclInProgress) {
    abort();
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": the communicator did not form within ", duration_text(timeout()),
                     "; a peer rank did not join, died or hangs (NCCL cannot tell which)"));
  }
  if (state != ncclSuccess) {
    absl::Status s = nccl_error(what, state, comm_);
    abort();
    return s;
  }
  if (compute_ != nullptr) watchdog_ = std::thread([this] { watch(); });
  return absl::OkStatus();
}

absl::Status NcclProcessGroup::check_buffer(const char* op, const char* name, const void* p) {
  if (p == nullptr) return invalid(op, absl::StrCat(name, " is null"));
  cudaPointerAttributes attributes{};
  if (const cudaError_t e = cudaPointerGetAttributes(&attributes, p); e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; keep it from surfacing in an unrelated call
    return invalid(op, absl::StrCat("cannot tell where ", name, " lives: ", cudaGetErrorString(e), " (",
                                    cudaGetErrorName(e), ")"));
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
      if (attributes.device != device_) {
        return invalid(op, absl::StrCat(name, " is memory of CUDA device ", attributes.device,
                                        "; this group runs on CUDA device ", device_));
      }
      return absl::OkStatus();
    case cudaMemoryTypeManaged:
      return absl::OkStatus();
    case cudaMemoryTypeHost:
    case cudaMemoryTypeUnregistered:
      break;
  }
  return invalid(op, absl::StrCat(name, " is host memory; the NCCL process group takes device memory (CUDA device ",
                                  device_, ")"));
}

template <typename Enqueue>
absl::Status NcclProcessGroup::run(const char* op, Enqueue&& enqueue) {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  if (comm_ == nullptr) return broken(op);  // the watchdog aborted it since the caller checked
  const absl::Duration waits_for = timeout();
  const Poll poll(waits_for);
  const auto timed_out = [&] {
    return absl::DeadlineExceededError(absl::StrCat(where(op), ": no progress within ", duration_text(waits_for),
                                                    "; a peer rank died or hangs (NCCL cannot tell which)"));
  };

  if (const ncclResult_t r = enqueue(); r != ncclSuccess && r != ncclInProgress) {
    return fail(nccl_error(where(op), r, comm_));
  }
  // On a non-blocking communicator the collective is on the stream only once NCCL's state
  // has left ncclInProgress (the first collective also connects peers here).
  const ncclResult_t state = wait_until_ready(comm_, poll);
  if (state == ncclInProgress) return fail(timed_out());
  if (state != ncclSuccess) return fail(nccl_error(where(op), state, comm_));
  if (batching_) return absl::OkStatus();  // the watchdog times the batch

  if (const cudaError_t e = cudaEventRecord(done_, stream_); e != cudaSuccess) {
    return fail(cuda_error(e, absl::StrCat(where(op), ": cudaEventRecord")));
  }
  for (;;) {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return fail(cuda_error(e, absl::StrCat(where(op), ": waiting for the collective")));
    ncclResult_t async = ncclSuccess;
    if (const ncclResult_t r = nccl::api().ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
    if (async != ncclSuccess && async != ncclInProgress) return fail(nccl_error(where(op), async, comm_));
    if (poll.expired()) return fail(timed_out());
    lock.unlock();
    poll.pause();
    lock.lock();
    if (comm_ == nullptr) return broken(op);
  }
}

// ---- queued mode -------------------------------------------------------------------------

absl::Status NcclProcessGroup::open() {
  constexpr const char* op = "queued batch";
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (absl::Status b = broken(op); !b.ok()) return b;
  if (batching_) return fail(absl::FailedPreconditionError(absl::StrCat(where(op), ": open() twice without close()")));
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  // The batch's collectives start once the compute stream reached this point.
  if (const cudaError_t e = cudaEventRecord(ready_, compute_); e != cudaSuccess) {
    return fail(cuda_error(e, absl::StrCat(where(op), ": cudaEventRecord on the compute stream")));
  }
  if (const cudaError_t e = cudaStreamWaitEvent(stream_, ready_, 0); e != cudaSuccess) {
    return fail(cuda_error(e, absl::StrCat(where(op), ": cudaStreamWaitEvent")));
  }
  if (const cudaError_t e = cudaEventCreate(&batch_start_); e != cudaSuccess) {
    batch_start_ = nullptr;
    return fail(cuda_error(e, absl::StrCat(where(op), ": cudaEventCreate")));
  }
  if (const cudaError_t e = cudaEventRecord(batch_start_, stream_); e != cudaSuccess) {
    return fail(cuda_error(e, absl::StrCat(where(op), ": cudaEventRecord")));
  }
  batching_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NcclProcessGroup::close(const char* what) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  batching_ = false;
  Batch b;
  b.what = what;
  b.start = batch_start_;
  batch_start_ = nullptr;
  if (absl::Status s = broken(what); !s.ok()) {
    destroy(b);
    return s;
  }
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(what)));
  cudaError_t e = cudaEventCreate(&b.done);
  if (e == cudaSuccess) e = cudaEventRecord(b.done, stream_);
  if (e != cudaSuccess) {
    destroy(b);
    return fail(cuda_error(e, absl::StrCat(where(what), ": the batch's completion event")));
  }
  b.ticket = next_ticket_++;
  b.waits_for = timeout();
  b.deadline = absl::Now() + b.waits_for;
  batches_.push_back(std::move(b));
  wake_.notify_all();
  return batches_.back().ticket;
}

absl::Status NcclProcessGroup::order_after(int64_t ticket) {
  constexpr const char* op = "order_after";
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto it = std::find_if(batches_.begin(), batches_.end(), [&](const Batch& b) { return b.ticket == ticket; });
  if (it == batches_.end() || it->ordered) return broken(op);  // waited for already
  it->ordered = true;
  if (it->completed) {  // the host saw it done: nothing to wait for
    destroy(*it);
    batches_.erase(it);
    return broken(op);
  }
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  // `waited` marks where the compute stream stands when it starts waiting: the exposed time
  // is how much later `done` passed.
  cudaError_t e = cudaEventCreate(&it->waited);
  if (e == cudaSuccess) e = cudaEventRecord(it->waited, compute_);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(compute_, it->done, 0);
  if (e != cudaSuccess) return fail(cuda_error(e, absl::StrCat(where(op), ": ordering the compute stream")));
  return broken(op);
}

absl::Status NcclProcessGroup::health() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return broken_;
}

QueuedCollectives::Times NcclProcessGroup::take_times() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const Times t = times_;
  times_ = Times{};
  return t;
}

void NcclProcessGroup::destroy(Batch& b) {
  for (cudaEvent_t* e : {&b.start, &b.done, &b.waited}) {
    if (*e != nullptr) (void)cudaEventDestroy(*e);
    *e = nullptr;
  }
}

bool NcclProcessGroup::check_batches() {
  if (!broken_.ok()) return false;
  for (auto it = batches_.begin(); it != batches_.end();) {
    Batch& b = *it;
    if (!b.completed) {
      const cudaError_t e = cudaEventQuery(b.done);
      if (e == cudaErrorNotReady) {
        // The clock runs from the batch's start: until then it waits for compute (the host
        // may be a step ahead of the device), not for a peer.
        if (cudaEventQuery(b.start) == cudaErrorNotReady) b.deadline = absl::Now() + b.waits_for;
        if (absl::Now() < b.deadline) {
          ++it;
          continue;
        }
        (void)fail(absl::DeadlineExceededError(absl::StrCat(where(b.what.c_str()), ": not done within ",
                                                            duration_text(b.waits_for),
                                                            "; a peer rank died or hangs (NCCL cannot tell which)")));
        return false;
      }
      if (e != cudaSuccess) {
        (void)fail(cuda_error(e, absl::StrCat(where(b.what.c_str()), ": waiting for the collectives")));
        return false;
      }
      b.completed = true;
      float ms = 0;
      if (cudaEventElapsedTime(&ms, b.start, b.done) == cudaSuccess) times_.comm_seconds += ms / 1e3;
    }
    if (!b.ordered) {
      ++it;  // order_after() frees it
      continue;
    }
    if (b.waited != nullptr) {
      const cudaError_t e = cudaEventQuery(b.waited);
      if (e == cudaErrorNotReady) {
        ++it;
        continue;
      }
      float ms = 0;
      if (e == cudaSuccess && cudaEventElapsedTime(&ms, b.waited, b.done) == cudaSuccess && ms > 0) {
        times_.exposed_seconds += ms / 1e3;
      }
    }
    destroy(b);
    it = batches_.erase(it);
  }
  ncclResult_t async = ncclSuccess;
  if (comm_ != nullptr) {
    if (const ncclResult_t r = nccl::api().ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    (void)fail(nccl_error(where("queued collectives"), async, comm_));
    return false;
  }
  return true;
}

void NcclProcessGroup::watch() {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  while (!stopping_) {
    // Idle while nothing is queued; a millisecond between looks while something is.
    if (batches_.empty()) {
      wake_.wait(lock, [&] { return stopping_ || !batches_.empty(); });
      continue;
    }
    if (!check_batches()) {
      // Broken: the aborted communicator ended the kernels; nothing is left to time.
      for (Batch& b : batches_) destroy(b);
      batches_.clear();
      continue;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_; });
  }
}

absl::Status NcclProcessGroup::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  const AllGatherPart part{send, recv, bytes_per_rank};
  return all_gather_parts({&part, 1});
}

absl::Status NcclProcessGroup::reduce_scatter(const float* send, float* recv, int64_t count_per_rank,
                                              ReduceOp reduce) {
  const ReduceScatterPart part{send, recv, count_per_rank};
  return reduce_scatter_parts({&part, 1}, reduce);
}

namespace {

// A call's parts, issued as one NCCL group (one launch); a call of one part (every plain
// all_gather and reduce_scatter) as that collective alone. Inside a group NCCL only
// records each call, so a failing one still ends the group with ncclGroupEnd.
template <typename Part, typename Issue>
ncclResult_t issue_as_group(std::span<const Part> parts, Issue issue) {
  if (parts.size() == 1) return issue(parts[0]);
  if (const ncclResult_t r = nccl::api().ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t first = ncclSuccess;
  for (const Part& p : parts) {
    if (first != ncclSuccess && first != ncclInProgress) break;
    first = issue(p);
  }
  const ncclResult_t end = nccl::api().ncclGroupEnd();
  return first != ncclSuccess && first != ncclInProgress ? first : end;
}

}  // namespace

absl::Status NcclProcessGroup::all_gather_parts(std::span<const AllGatherPart> parts) {
  constexpr const char* op = "all_gather";
  if (absl::Status b = broken(op); !b.ok()) return b;
  bool any = false;
  for (const AllGatherPart& p : parts) {
    if (p.bytes_per_rank == 0) continue;
    if (p.bytes_per_rank > std::numeric_limits<size_t>::max() / static_cast<size_t>(size_)) {
      return invalid(op, absl::StrCat(p.bytes_per_rank, " bytes per rank times ", size_, " ranks overflows size_t"));
    }
    any = true;
  }
  if (!any) return absl::OkStatus();
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  for (const AllGatherPart& p : parts) {
    if (p.bytes_per_rank == 0) continue;
    if (absl::Status s = check_buffer(op, "send", p.send); !s.ok()) return s;
    if (absl::Status s = check_buffer(op, "recv", p.recv); !s.ok()) return s;
  }
  // Bytes travel as bytes: fp8 payloads cost one byte per element on the wire.
  return run(op, [&] {
    return issue_as_group(parts, [&](const AllGatherPart& p) {
      if (p.bytes_per_rank == 0) return ncclSuccess;
      return nccl::api().ncclAllGather(p.send, p.recv, p.bytes_per_rank, ncclUint8, comm_, stream_);
    });
  });
}

absl::Status NcclProcessGroup::reduce_scatter_parts(std::span<const ReduceScatterPart> parts, ReduceOp reduce) {
  if (!valid_op(reduce)) {
    return invalid("reduce_scatter", absl::StrCat("unknown reduce op ", static_cast<int>(reduce)));
  }
  return reduce_scatter_parts_of(parts, ncclFloat32, to_nccl(reduce));
}

absl::Status NcclProcessGroup::reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> parts) {
  return reduce_scatter_parts_of(parts, ncclBfloat16, ncclSum);
}

template <typename Part>
absl::Status NcclProcessGroup::reduce_scatter_parts_of(std::span<const Part> parts, ncclDataType_t type,
                                                       ncclRedOp_t reduce) {
  constexpr const char* op = "reduce_scatter";
  constexpr size_t kElementBytes = sizeof(std::remove_pointer_t<decltype(Part::send)>);
  if (absl::Status b = broken(op); !b.ok()) return b;
  bool any = false;
  for (const Part& p : parts) {
    if (p.count_per_rank < 0) return invalid(op, absl::StrCat("negative count_per_rank ", p.count_per_rank));
    if (p.count_per_rank == 0) continue;
    if (static_cast<uint64_t>(p.count_per_rank) >
        std::numeric_limits<size_t>::max() / kElementBytes / static_cast<size_t>(size_)) {
      return invalid(op, absl::StrCat(p.count_per_rank, " values per rank times ", size_, " ranks overflows size_t"));
    }
    any = true;
  }
  if (!any) return absl::OkStatus();
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  for (const Part& p : parts) {
    if (p.count_per_rank == 0) continue;
    if (absl::Status s = check_buffer(op, "send", p.send); !s.ok()) return s;
    if (absl::Status s = check_buffer(op, "recv", p.recv); !s.ok()) return s;
  }
  return run(op, [&] {
    return issue_as_group(parts, [&](const Part& p) {
      if (p.count_per_rank == 0) return ncclSuccess;
      return nccl::api().ncclReduceScatter(p.send, p.recv, static_cast<size_t>(p.count_per_rank), type, reduce, comm_,
                                           stream_);
    });
  });
}

absl::Status NcclProcessGroup::all_reduce_impl(const char* op, void* data, int64_t count, ncclDataType_t type,
                                               ReduceOp reduce) {
  if (absl::Status b = broken(op); !b.ok()) return b;
  if (count < 0) return invalid(op, absl::StrCat("negative count ", count));
  if (!valid_op(reduce)) return invalid(op, absl::StrCat("unknown reduce op ", static_cast<int>(reduce)));
  if (count == 0) return absl::OkStatus();
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  if (absl::Status s = check_buffer(op, "data", data); !s.ok()) return s;
  return run(op, [&] {
    return nccl::api().ncclAllReduce(data, data, static_cast<size_t>(count), type, to_nccl(reduce), comm_, stream_);
  });
}

absl::Status NcclProcessGroup::all_reduce(float* data, int64_t count, ReduceOp op) {
  return all_reduce_impl("all_reduce", data, count, ncclFloat32, op);
}

absl::Status NcclProcessGroup::all_reduce(double* data, int64_t count, ReduceOp op) {
  return all_reduce_impl("all_reduce", data, count, ncclFloat64, op);
}

absl::Status NcclProcessGroup::broadcast(void* data, size_t bytes, int root) {
  constexpr const char* op = "broadcast";
  if (absl::Status b = broken(op); !b.ok()) return b;
  if (root < 0 || root >= size_) {
    return invalid(op, absl::StrCat("root ", root, " is not a rank of this ", size_, "-rank group"));
  }
  if (bytes == 0) return absl::OkStatus();
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  if (absl::Status s = check_buffer(op, "data", data); !s.ok()) return s;
  return run(op, [&] { return nccl::api().ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
}

absl::Status NcclProcessGroup::barrier() {
  constexpr const char* op = "barrier";
  if (absl::Status b = broken(op); !b.ok()) return b;
  DeviceScope scope(device_);
  if (!scope.status().ok()) return fail(with_context(scope.status(), where(op)));
  // A one-element all-reduce completes on a rank only after every rank has joined it.
  return run(op, [&] { return nccl::api().ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
}

}  // namespace

std::string nccl_unique_id_key(const std::string& prefix) { return prefix + "nccl/unique_id"; }

absl::StatusOr<std::unique_ptr<ProcessGroup>> make_nccl_process_group(KeyValueStore& store, int rank, int size,
                                                                      const ProcessGroupOptions& options,
                                                                      int cuda_device, void* stream,
                                                                      void* compute_stream) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("nccl: group size ", size, " is not positive"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: rank ", rank, " is not in [0, ", size, ")"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: timeout ", absl::FormatDuration(options.timeout), " is not positive"));
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("nccl: no usable CUDA device: cudaGetDeviceCount: ",
                                                      cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
  }
  if (devices == 0) return absl::FailedPreconditionError("nccl: no usable CUDA device: cudaGetDeviceCount found 0");
  if (cuda_device < 0 || cuda_device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: CUDA device ", cuda_device, " does not exist (this machine has ", devices, ")"));
  }

  if (absl::Status s = nccl::load(); !s.ok()) return s;

  // One deadline for the whole rendezvous: waiting for the id, then for the communicator.
  const Poll poll(options.timeout);
  const std::string key = nccl_unique_id_key(options.prefix);
  ncclUniqueId id{};
  if (rank == 0) {
    if (const ncclResult_t r = nccl::api().ncclGetUniqueId(&id); r != ncclSuccess) {
      return nccl_error("nccl: ncclGetUniqueId (NCCL_SOCKET_IFNAME chooses the network interface)", r, nullptr);
    }
    if (absl::Status s = store.set(key, to_hex(id)); !s.ok()) {
      return with_context(s, absl::StrCat("nccl: publishing the unique id as '", key, "' in ", store.describe()));
    }
  } else {
    absl::StatusOr<std::string> hex = store.get(key, poll.remaining());
    if (!hex.ok()) {
      return with_context(hex.status(), absl::StrCat("nccl: rank ", rank, " of ", size,
                                                     " waiting for rank 0's unique id '", key, "'"));
    }
    if (!from_hex(*hex, id)) {
      return absl::DataLossError(absl::StrCat("nccl: '", key, "' in ", store.describe(), " holds ", hex->size(),
                                              " characters, not the ", 2 * sizeof(id.internal),
                                              " hex digits of an NCCL unique id"));
    }
  }

  auto group = std::make_unique<NcclProcessGroup>(rank, size, cuda_device, options.timeout);
  if (absl::Status s = group->init(id, stream, compute_stream, poll); !s.ok()) return s;
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

}  // namespace fp8::engine::collectives
