// Device copies of the RoPE cos/sin tables, uploaded once per (seq, head_dim, theta).
//
// The tables are built on the host by ops::RopeTable (angles in double, rounded once to
// float), so the GPU rotates by exactly the CPU's cosines and sines. Like
// ops::RopeTableCache, the cache is bounded: a new key beyond kMaxEntries frees every
// table first (after the stream has finished with them) rather than growing without
// bound when shapes change call to call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "absl/status/statusor.h"

namespace fp8::cuda {

// cos and sin, each [seq, head_dim / 2], in device memory.
struct DeviceRopeTable {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

class DeviceRopeTables {
 public:
  DeviceRopeTables() = default;
  ~DeviceRopeTables();
  DeviceRopeTables(const DeviceRopeTables&) = delete;
  DeviceRopeTables& operator=(const DeviceRopeTables&) = delete;

  // The tables of this key, uploading them on first use (which waits for `stream`, the
  // one stream every kernel reading these tables runs on). Not thread-safe: the owner
  // serialises calls. The current device must be the tables' device.
  absl::StatusOr<DeviceRopeTable> get(int64_t seq, int64_t head_dim, double theta, cudaStream_t stream);

  // Frees every table (cudaFree waits for work still using them), with the owner's
  // device current.
  void release();

 private:
  static constexpr size_t kMaxEntries = 16;

  // One allocation per key: cos, then sin.
  std::map<std::tuple<int64_t, int64_t, double>, float*> tables_;
};

}  // namespace fp8::cuda
