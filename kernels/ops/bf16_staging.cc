#include "ops/bf16_staging.h"

#include "cpu/parallel.h"
#include "fp8/arith.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {

void widen_bf16(const uint16_t* in, int64_t n, float* out) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = bf16_to_float(in[i]);
  });
}

void round_to_bf16(const float* in, int64_t n, uint16_t* out) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = float_to_bf16(in[i]);
  });
}

float* ActivationStaging::buffer(int64_t n) {
  // Uninitialised: every staged buffer is filled by a widening or by the kernel.
  buffers_.emplace_back(new float[static_cast<size_t>(n)]);
  return buffers_.back().get();
}

float* ActivationStaging::widened(const void* p, int64_t n) {
  float* staged = buffer(n);
  widen_bf16(static_cast<const uint16_t*>(p), n, staged);
  return staged;
}

const float* ActivationStaging::in(const void* p, int64_t n) {
  return bf16_ ? widened(p, n) : static_cast<const float*>(p);
}

float* ActivationStaging::out(void* p, int64_t n) {
  if (!bf16_) return static_cast<float*>(p);
  float* staged = buffer(n);
  outputs_.push_back({staged, static_cast<uint16_t*>(p), n});
  return staged;
}

float* ActivationStaging::in_out(void* p, int64_t n) {
  if (!bf16_) return static_cast<float*>(p);
  float* staged = widened(p, n);
  outputs_.push_back({staged, static_cast<uint16_t*>(p), n});
  return staged;
}

void ActivationStaging::finish() {
  for (const Output& o : outputs_) round_to_bf16(o.staged, o.n, o.destination);
  outputs_.clear();
}

}  // namespace fp8::ops::cpu
