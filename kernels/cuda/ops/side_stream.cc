#include "cuda/ops/side_stream.h"

#include <cuda_runtime.h>

namespace fp8::cuda {
namespace {

constexpr int kMaxDevices = 64;

LaunchResult result(cudaError_t e, const char* call) { return {e, e == cudaSuccess ? nullptr : call}; }

}  // namespace

LaunchResult SideStream::fork(cudaStream_t from) {
  if (LaunchResult r = result(cudaEventRecord(forked_, from), "cudaEventRecord (side stream fork)"); !r.ok()) {
    return r;
  }
  return result(cudaStreamWaitEvent(stream_, forked_, 0), "cudaStreamWaitEvent (side stream fork)");
}

LaunchResult SideStream::join(cudaStream_t into) {
  if (LaunchResult r = result(cudaEventRecord(joined_, stream_), "cudaEventRecord (side stream join)"); !r.ok()) {
    return r;
  }
  return result(cudaStreamWaitEvent(into, joined_, 0), "cudaStreamWaitEvent (side stream join)");
}

LaunchResult side_stream(SideStream** out) {
  // Never destroyed: the driver reclaims them with the context.
  thread_local SideStream streams[kMaxDevices];
  int device = 0;
  if (LaunchResult r = result(cudaGetDevice(&device), "cudaGetDevice"); !r.ok()) return r;
  if (device < 0 || device >= kMaxDevices) return {cudaErrorInvalidDevice, "side stream (device index over 63)"};
  SideStream& s = streams[device];
  if (s.stream_ == nullptr) {
    cudaStream_t stream = nullptr;
    cudaEvent_t forked = nullptr, joined = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&forked, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (joined != nullptr) cudaEventDestroy(joined);
      if (forked != nullptr) cudaEventDestroy(forked);
      if (stream != nullptr) cudaStreamDestroy(stream);
      return result(e, "creating the side stream");
    }
    s.stream_ = stream;
    s.forked_ = forked;
    s.joined_ = joined;
  }
  *out = &s;
  return {};
}

}  // namespace fp8::cuda
