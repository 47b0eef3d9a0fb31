// bench_cuda.h on a build with CUDA: the kernels are in bench_cuda_kernels.cu.
#include "bench/bench_cuda.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace fp8::bench {
namespace kernels {
cudaError_t sigmoid_forward(const float* y, int64_t n, float* s, cudaStream_t stream);
cudaError_t sigmoid_forward(const uint16_t* y, int64_t n, uint16_t* s, cudaStream_t stream);
cudaError_t sigmoid_backward_of_sum(const float* s, int64_t n, float* grad_y, cudaStream_t stream);
cudaError_t sigmoid_backward_of_sum(const uint16_t* s, int64_t n, uint16_t* grad_y, cudaStream_t stream);
}  // namespace kernels

namespace {
absl::Status status_of(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

absl::Status cuda_sigmoid_forward(const float* y, int64_t n, float* s, void* stream) {
  return status_of(kernels::sigmoid_forward(y, n, s, static_cast<cudaStream_t>(stream)), "sigmoid forward kernel");
}

absl::Status cuda_sigmoid_forward(const uint16_t* y, int64_t n, uint16_t* s, void* stream) {
  return status_of(kernels::sigmoid_forward(y, n, s, static_cast<cudaStream_t>(stream)),
                   "sigmoid forward kernel (bf16)");
}

absl::Status cuda_sigmoid_backward_of_sum(const float* s, int64_t n, float* grad_y, void* stream) {
  return status_of(kernels::sigmoid_backward_of_sum(s, n, grad_y, static_cast<cudaStream_t>(stream)),
                   "sigmoid backward kernel");
}

absl::Status cuda_sigmoid_backward_of_sum(const uint16_t* s, int64_t n, uint16_t* grad_y, void* stream) {
  return status_of(kernels::sigmoid_backward_of_sum(s, n, grad_y, static_cast<cudaStream_t>(stream)),
                   "sigmoid backward kernel (bf16)");
}

absl::Status cuda_release_cached_memory(int device) {
  if (auto s = status_of(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  if (auto s = status_of(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); !s.ok()) return s;
  cudaMemPool_t pool = nullptr;
  if (auto s = status_of(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool"); !s.ok()) return s;
  return status_of(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
}

absl::Status cuda_memory_info(int device, int64_t* free_bytes, int64_t* total_bytes) {
  if (auto s = status_of(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  size_t f = 0, t = 0;
  if (auto s = status_of(cudaMemGetInfo(&f, &t), "cudaMemGetInfo"); !s.ok()) return s;
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return absl::OkStatus();
}

namespace {

class CudaOpTimer final : public OpTimer {
 public:
  CudaOpTimer(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaOpTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaOpTimer(const CudaOpTimer&) = delete;
  CudaOpTimer& operator=(const CudaOpTimer&) = delete;

  absl::Status mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      if (auto s = status_of(cudaSetDevice(device_), "cudaSetDevice (op timer)"); !s.ok()) return s;
      if (auto s = status_of(cudaEventCreate(&e), "cudaEventCreate (op timer)"); !s.ok()) return s;
      events_.push_back(e);
    }
    return status_of(cudaEventRecord(events_[used_++], stream_), "cudaEventRecord (op timer)");
  }

  bool passed_last_mark() override { return used_ > 0 && cudaEventQuery(events_[used_ - 1]) == cudaSuccess; }

  absl::StatusOr<std::vector<double>> take() override {
    std::vector<double> seconds;
    const size_t used = used_;
    used_ = 0;
    if (used == 0) return seconds;
    if (auto s = status_of(cudaEventSynchronize(events_[used - 1]), "cudaEventSynchronize (op timer)"); !s.ok()) {
      return s;
    }
    seconds.reserve(used);
    for (size_t i = 0; i < used; ++i) {
      float ms = 0;
      if (auto s = status_of(cudaEventElapsedTime(&ms, events_[0], events_[i]), "cudaEventElapsedTime (op timer)");
          !s.ok()) {
        return s;
      }
      seconds.push_back(ms / 1e3);
    }
    return seconds;
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<OpTimer>> cuda_op_timer(int device, void* stream) {
  return std::make_unique<CudaOpTimer>(device, static_cast<cudaStream_t>(stream));
}

}  // namespace fp8::bench
