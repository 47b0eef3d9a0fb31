#include "worker/engine/train/step_stats.h"

#include <cmath>
#include <cstring>

#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::StatusOr<StepStats> StepStats::create(const Device& device, int64_t micro_batches, int64_t ranks) {
  FP8_ASSIGN_OR_RETURN(Tensor values,
                       Tensor::zeros(device, ElementType::kFloat32, {2 * kCapacity + kCapacity * (micro_batches + 1)}));
  FP8_ASSIGN_OR_RETURN(Tensor clip, Tensor::zeros(device, ElementType::kFloat32, {1}));
  return StepStats(micro_batches, ranks, std::move(values), std::move(clip));
}

StepStats::Slot StepStats::begin(int64_t step) {
  const auto i = static_cast<int64_t>(steps_.size());
  steps_.push_back(step);
  float* words = values_.data<float>();
  float* losses = words + 2 * kCapacity + i * (micro_batches_ + 1);
  return Slot{losses, losses + micro_batches_, reinterpret_cast<double*>(words) + i, clip_.data<float>()};
}

absl::StatusOr<std::vector<StepStats::StepValues>> StepStats::read() {
  std::vector<StepValues> values;
  if (steps_.empty()) return values;
  FP8_ASSIGN_OR_RETURN(std::vector<float> words, values_.download<float>());
  const float* losses = words.data() + 2 * kCapacity;
  const auto row = static_cast<size_t>(micro_batches_ + 1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    double loss_sum = 0;  // in order, as the loss of one step always was
    for (int64_t b = 0; b < micro_batches_; ++b) loss_sum += losses[i * row + static_cast<size_t>(b)];
    double sum_of_squares;
    std::memcpy(&sum_of_squares, words.data() + 2 * i, sizeof sum_of_squares);
    values.push_back({steps_[i], loss_sum / static_cast<double>(micro_batches_ * ranks_), std::sqrt(sum_of_squares)});
  }
  steps_.clear();
  return values;
}

}  // namespace fp8::engine
