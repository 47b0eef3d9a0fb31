#include "tests/ops/activation_calls.h"

namespace fp8::ops_test {

std::vector<ActivationCall> every_activation_call() {
  const AttentionShape attn{1, 4, 4, 2, 8};
  const RopeShape rope{1, 4, 2, 8};
  auto f32 = [](void* p) { return static_cast<float*>(p); };
  return {
      {"embedding_forward", [=](ModelOps& o, DType t, void* in, void* out, float*,
                                const int32_t* ids) { return o.embedding_forward(ids, 4, f32(in), 8, 8, out, t); }},
      {"embedding_backward", [](ModelOps& o, DType t, void* in, void*, float* f32_out,
                                const int32_t* ids) { return o.embedding_backward(ids, 4, in, 8, 8, f32_out, t); }},
      {"rmsnorm_forward", [=](ModelOps& o, DType t, void* in, void* out, float* f32_out,
                              const int32_t*) { return o.rmsnorm_forward(in, f32(in), 2, 8, 1e-5f, out, f32_out, t); }},
      {"rmsnorm_backward",
       [=](ModelOps& o, DType t, void* in, void* out, float* f32_out, const int32_t*) {
         return o.rmsnorm_backward(in, f32(in), f32(in), in, 2, 8, out, f32_out, t);
       }},
      {"rope_forward", [=](ModelOps& o, DType t, void* in, void* out, float*,
                           const int32_t*) { return o.rope_forward(rope, 10000.0, in, out, t); }},
      {"rope_backward", [=](ModelOps& o, DType t, void* in, void* out, float*,
                            const int32_t*) { return o.rope_backward(rope, 10000.0, in, out, t); }},
      {"attention_forward", [=](ModelOps& o, DType t, void* in, void* out, float* f32_out,
                                const int32_t*) { return o.attention_forward(attn, in, in, in, out, f32_out, t); }},
      {"attention_backward",
       [=](ModelOps& o, DType t, void* in, void* out, float*, const int32_t*) {
         return o.attention_backward(attn, in, in, in, in, f32(in), in, out, out, out, t);
       }},
      {"swiglu_forward", [](ModelOps& o, DType t, void* in, void* out, float*,
                            const int32_t*) { return o.swiglu_forward(in, in, 8, out, t); }},
      {"swiglu_backward", [](ModelOps& o, DType t, void* in, void* out, float*,
                             const int32_t*) { return o.swiglu_backward(in, in, in, 8, out, out, t); }},
      {"add",
       [](ModelOps& o, DType t, void* in, void* out, float*, const int32_t*) { return o.add(in, in, 8, out, t); }},
      {"accumulate",
       [](ModelOps& o, DType t, void* in, void* out, float*, const int32_t*) { return o.accumulate(in, 8, out, t); }},
      {"cross_entropy_forward",
       [](ModelOps& o, DType t, void* in, void*, float* f32_out, const int32_t* ids) {
         return o.cross_entropy_forward(in, ids, 4, 8, f32_out, f32_out + 1, t);
       }},
      {"cross_entropy_backward",
       [=](ModelOps& o, DType t, void* in, void* out, float*, const int32_t* ids) {
         return o.cross_entropy_backward(in, ids, f32(in), 4, 8, 1.0f, out, t);
       }},
  };
}

}  // namespace fp8::ops_test
