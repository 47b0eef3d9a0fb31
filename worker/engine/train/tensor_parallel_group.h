// The model's TensorParallelComm (model/tensor_parallel.h) over a process group whose every
// rank holds a part of the model. Counts what it moves, for the step's comm report: the
// calls run on the compute thread, so all of their time is exposed.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/parameters.h"

#include "worker/engine/collectives/process_group.h"
#include "worker/engine/model/tensor_parallel.h"

namespace fp8::engine {

class TensorParallelGroup final : public TensorParallelComm {
 public:
  struct Counters {
    int64_t all_reduces = 0;
    int64_t bytes = 0;  // every collective's, this rank's share of the traffic
    double seconds = 0;
    // Sequence parallelism's: the all-gathers in front of the column-parallel layers (fp8
    // codes, or activations in high precision, and gradients), and the reduce-scatters.
    int64_t gather_fp8_bytes = 0;
    int64_t gather_bytes = 0;
    int64_t reduce_scatter_bytes = 0;
  };

  // `first_world_rank`: the job's rank of this group's rank 0 (its ranks are adjacent),
  // which errors name so that "lost rank 1" can be told from the job's rank 1.
  // `backend`: where bf16 sums are widened to fp32 (scratch of its memory).
  TensorParallelGroup(collectives::ProcessGroup& group, int first_world_rank, Backend& backend)
      : group_(group), first_world_rank_(first_world_rank), backend_(backend) {}

  collectives::ProcessGroup& group() { return group_; }
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  absl::Status sum(float* data, int64_t count) override {
    return timed(count * 4, [&] { return group_.all_reduce(data, count, collectives::ReduceOp::kSum); });
  }
  absl::Status sum(void* data, DType dtype, int64_t count) override;
  absl::Status sum(double* data, int64_t count) override {
    return timed(count * 8, [&] { return group_.all_reduce(data, count, collectives::ReduceOp::kSum); });
  }
  absl::Status all_gather(const void* send, void* recv, size_t bytes_per_rank, bool fp8) override;
  absl::Status reduce_scatter(const void* send, void* recv, int64_t count_per_rank, DType dtype) override;
  absl::Status max(float* data, int64_t count) override {
    return timed(count * 4, [&] { return group_.all_reduce(data, count, collectives::ReduceOp::kMax); });
  }

  // For the trainer: host values reduced across the ranks (staged through the backend's
  // memory, as NCCL reduces device buffers).
  absl::Status all_reduce(std::span<double> values, collectives::ReduceOp op);
  // The whole of a tensor split across the ranks (`split`, a Parameter's: this rank's part
  // is `part`), row-major on the host, from every rank's part; collective. A tensor that is
  // not split comes back as this rank holds it.
  absl::StatusOr<std::vector<float>> whole(const Tensor& part, const ParameterSplit& split);
  // The same from this rank's part on the host, of `shape`.
  absl::StatusOr<std::vector<float>> whole(std::vector<float> part, const TensorShape& shape,
                                           const ParameterSplit& split, const Device& device);

  const Counters& counters() const { return counters_; }

  ~TensorParallelGroup() override {
    if (widened_ != nullptr) backend_.deallocate(widened_);
  }
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

 private:
  template <typename Call>
  absl::Status timed(int64_t bytes, Call call, bool all_reduce = true) {
    const auto start = std::chrono::steady_clock::now();
    // A group's own collectives (NCCL's, on its stream) are not ordered after the work the
    // device has queued: the host waits for that work first, and the collective returns
    // once done. (Queuing them behind the compute instead is left to do.)
    absl::Status s = backend_.is_cuda() ? backend_.synchronize() : absl::OkStatus();
    if (s.ok()) s = call();
    counters_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (all_reduce) ++counters_.all_reduces;
    counters_.bytes += bytes;
    return s.ok() ? s : named(s);
  }
  absl::Status named(const absl::Status& s) const;
  // whole() of a part in the device's memory, gathered from there (`shape`: the part's).
  absl::StatusOr<std::vector<float>> whole_of_device_part(const Tensor& part, const TensorShape& shape,
                                                          const ParameterSplit& split);

  collectives::ProcessGroup& group_;
  int first_world_rank_ = 0;
  Backend& backend_;
  void* widened_ = nullptr;  // bf16 sums' fp32 scratch, grown as needed
  size_t widened_bytes_ = 0;
  Counters counters_;
};

}  // namespace fp8::engine
