#include "worker/engine/train/tensor_parallel_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::Status TensorParallelGroup::named(const absl::Status& s) const {
  return absl::Status(s.code(), absl::StrCat("tensor-parallel group of the job's ranks ", first_world_rank_, "..",
                                             first_world_rank_ + size() - 1, " (its rank r is the job's ",
                                             first_world_rank_, " + r): ", s.message()));
}

absl::Status TensorParallelGroup::sum(void* data, DType dtype, int64_t count) {
  if (dtype == DType::kFloat32) return sum(static_cast<float*>(data), count);
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (bytes > widened_bytes_) {
    if (widened_ != nullptr) backend_.deallocate(widened_);
    widened_ = nullptr;
    widened_bytes_ = 0;
    FP8_ASSIGN_OR_RETURN(widened_, backend_.allocate(bytes));
    widened_bytes_ = bytes;
  }
  FP8_RETURN_IF_ERROR(backend_.convert(data, dtype, widened_, DType::kFloat32, count));
  FP8_RETURN_IF_ERROR(sum(static_cast<float*>(widened_), count));
  return backend_.convert(widened_, DType::kFloat32, data, dtype, count);
}

absl::Status TensorParallelGroup::all_gather(const void* send, void* recv, size_t bytes_per_rank, bool fp8) {
  const auto bytes = static_cast<int64_t>(bytes_per_rank);
  (fp8 ? counters_.gather_fp8_bytes : counters_.gather_bytes) += bytes * size();
  return timed(bytes * size(), [&] { return group_.all_gather(send, recv, bytes_per_rank); }, false);
}

absl::Status TensorParallelGroup::reduce_scatter(const void* send, void* recv, int64_t count_per_rank,
                                                 DType dtype) {
  const int64_t bytes = count_per_rank * size() * (dtype == DType::kBFloat16 ? 2 : 4);
  counters_.reduce_scatter_bytes += bytes;
  if (dtype == DType::kFloat32) {
    return timed(bytes, [&] {
      return group_.reduce_scatter(static_cast<const float*>(send), static_cast<float*>(recv), count_per_rank,
                                   collectives::ReduceOp::kSum);
    }, false);
  }
  const collectives::Bf16ReduceScatterPart part{static_cast<const uint16_t*>(send), static_cast<uint16_t*>(recv),
                                                count_per_rank};
  return timed(bytes, [&] { return group_.reduce_scatter_bf16_parts(std::span(&part, 1)); }, false);
}

absl::Status TensorParallelGroup::all_reduce(std::span<double> values, collectives::ReduceOp op) {
  Backend& backend = backend_;
  if (values.empty()) return absl::OkStatus();
  const size_t n = values.size_bytes();
  FP8_ASSIGN_OR_RETURN(void* staging, backend.allocate(n));
  absl::Status st = backend.copy_from_host(staging, values.data(), n);
  if (st.ok()) {
    auto* data = static_cast<double*>(staging);
    const auto count = static_cast<int64_t>(values.size());
    st = timed(static_cast<int64_t>(n), [&] { return group_.all_reduce(data, count, op); });
  }
  if (st.ok()) st = backend.copy_to_host(values.data(), staging, n);
  backend.deallocate(staging);
  return st;
}

absl::StatusOr<std::vector<float>> TensorParallelGroup::whole(const Tensor& part, const ParameterSplit& split) {
  if (!split.split()) return part.download<float>();
  return whole_of_device_part(part, part.shape(), split);
}

absl::StatusOr<std::vector<float>> TensorParallelGroup::whole(std::vector<float> part, const TensorShape& shape,
                                                              const ParameterSplit& split, const Device& device) {
  if (!split.split()) return part;
  // Through the device's memory: NCCL gathers device buffers.
  FP8_ASSIGN_OR_RETURN(Tensor mine, Tensor::empty(device, ElementType::kFloat32, {static_cast<int64_t>(part.size())}));
  FP8_RETURN_IF_ERROR(mine.upload<float>(part));
  return whole_of_device_part(mine, shape, split);
}

absl::StatusOr<std::vector<float>> TensorParallelGroup::whole_of_device_part(const Tensor& part,
                                                                             const TensorShape& shape,
                                                                             const ParameterSplit& split) {
  const int64_t elements = part.numel();
  const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
  FP8_ASSIGN_OR_RETURN(Tensor gathered, Tensor::empty(part.device(), ElementType::kFloat32, {size() * elements}));
  FP8_RETURN_IF_ERROR(timed(static_cast<int64_t>(bytes) * size(),
                            [&] { return group_.all_gather(part.raw(), gathered.raw(), bytes); }, false));
  FP8_ASSIGN_OR_RETURN(std::vector<float> parts, gathered.download<float>());
  if (split.axis == 0) return parts;  // rank r's rows follow rank r - 1's
  // Rank r holds columns [r · cols, (r + 1) · cols) of every row.
  const int64_t rows = shape.at(0), cols = shape.at(1), whole_cols = cols * size();
  std::vector<float> out(parts.size());
  for (int r = 0; r < size(); ++r) {
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(parts.begin() + r * elements + row * cols, cols, out.begin() + row * whole_cols + r * cols);
    }
  }
  return out;
}

}  // namespace fp8::engine
