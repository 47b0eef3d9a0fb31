// bf16 activations on the CPU: every op has one fp32 kernel, and a bf16 call runs that
// kernel on fp32 copies of its activations. That is exactly the contract of model_ops.h
// (bf16 inputs widened exactly, fp32 arithmetic, each stored output rounded once to
// nearest even), so the bf16 path cannot drift from the fp32 one, and an fp32 call goes
// through no copy at all: its kernels see the caller's own pointers, bit for bit and
// alias for alias as before.
//
// The price is the copies (three passes over each bf16 activation instead of one); the
// CPU path is the reference and the test bed, the GPU kernels load and store bf16
// directly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fp8/fp8.h"

namespace fp8::ops::cpu {

// out[i] = the fp32 value of the bf16 bits in[i] (exact). Threaded for large n.
void widen_bf16(const uint16_t* in, int64_t n, float* out);
// out[i] = in[i] rounded to bf16, to nearest even (arith.h's float_to_bf16: NaN stays a
// NaN). Threaded for large n.
void round_to_bf16(const float* in, int64_t n, uint16_t* out);

// The fp32 views of one call's activations. For DType::kFloat32 every view is the
// caller's pointer itself and finish() does nothing. For DType::kBFloat16:
//  * in(p, n) widens the n bf16 values at p into a temporary, once, when called;
//  * out(p, n) is a temporary the kernel writes, rounded into p by finish();
//  * in_out(p, n) is both: widened now, rounded back by finish() (accumulate's y, so
//    that y = bf16(float(y) + float(x))).
// In-place calls need no care: inputs are copied before the kernel runs and outputs land
// in their destinations only in finish(), after it.
class ActivationStaging {
 public:
  explicit ActivationStaging(DType act) : bf16_(act == DType::kBFloat16) {}
  ActivationStaging(const ActivationStaging&) = delete;
  ActivationStaging& operator=(const ActivationStaging&) = delete;

  const float* in(const void* p, int64_t n);
  float* out(void* p, int64_t n);
  float* in_out(void* p, int64_t n);
  // Rounds every staged output into its destination, in the order they were requested.
  void finish();

 private:
  struct Output {
    const float* staged;
    uint16_t* destination;
    int64_t n;
  };
  float* buffer(int64_t n);
  float* widened(const void* p, int64_t n);

  bool bf16_;
  std::vector<std::unique_ptr<float[]>> buffers_;
  std::vector<Output> outputs_;
};

}  // namespace fp8::ops::cpu
