#include "cuda/ops/rope_device_tables.h"

#include "cuda/cuda_status.h"
#include "ops/rope_table.h"

namespace fp8::cuda {

DeviceRopeTables::~DeviceRopeTables() { release(); }

void DeviceRopeTables::release() {
  // An error here has no one to report to; a sticky one resurfaces at the next sync.
  for (auto& [key, data] : tables_) cudaFree(data);
  tables_.clear();
}

absl::StatusOr<DeviceRopeTable> DeviceRopeTables::get(int64_t seq, int64_t head_dim, double theta,
                                                      cudaStream_t stream) {
  const size_t count = static_cast<size_t>(seq * (head_dim / 2));
  const auto key = std::make_tuple(seq, head_dim, theta);
  if (auto it = tables_.find(key); it != tables_.end()) return DeviceRopeTable{it->second, it->second + count};
  if (tables_.size() >= kMaxEntries) {
    // Kernels queued earlier may still read the tables about to go.
    if (auto s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !s.ok()) return s;
    release();
  }
  const ops::RopeTable host(seq, head_dim, theta);
  void* allocation = nullptr;
  if (auto s = cuda_status(cudaMalloc(&allocation, 2 * count * sizeof(float)), "cudaMalloc (rope tables)"); !s.ok()) {
    return s;
  }
  auto* data = static_cast<float*>(allocation);
  absl::Status s = cuda_status(
      cudaMemcpyAsync(data, host.cos_row(0), count * sizeof(float), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  if (s.ok()) {
    s = cuda_status(
        cudaMemcpyAsync(data + count, host.sin_row(0), count * sizeof(float), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync");
  }
  // The host tables go out of scope on return: wait for the copies to finish with them.
  if (s.ok()) s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (!s.ok()) {
    cudaFree(data);
    return s;
  }
  tables_.emplace(key, data);
  return DeviceRopeTable{data, data + count};
}

}  // namespace fp8::cuda
