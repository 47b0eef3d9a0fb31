// bench_cuda.h in a build without CUDA: every call says so. Callers reach these only after
// a CUDA device opened, which cannot happen in such a build.
#include "bench/bench_cuda.h"

namespace fp8::bench {
namespace {
absl::Status no_cuda() { return absl::UnimplementedError("this build has no CUDA (FP8_HAVE_CUDA is off)"); }
}  // namespace

absl::Status cuda_sigmoid_forward(const float*, int64_t, float*, void*) { return no_cuda(); }
absl::Status cuda_sigmoid_forward(const uint16_t*, int64_t, uint16_t*, void*) { return no_cuda(); }
absl::Status cuda_sigmoid_backward_of_sum(const float*, int64_t, float*, void*) { return no_cuda(); }
absl::Status cuda_sigmoid_backward_of_sum(const uint16_t*, int64_t, uint16_t*, void*) { return no_cuda(); }
absl::Status cuda_release_cached_memory(int) { return no_cuda(); }
absl::Status cuda_memory_info(int, int64_t*, int64_t*) { return no_cuda(); }
absl::StatusOr<std::unique_ptr<OpTimer>> cuda_op_timer(int, void*) { return no_cuda(); }

}  // namespace fp8::bench
