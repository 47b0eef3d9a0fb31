// What Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) makes of this project's reading of
// the PTX ISA: shared-memory matrix descriptors (no swizzle and 128-byte swizzle, operand B
// K-major and MN-major, that is transposed), A from registers or from shared memory, and
// the register layouts of A fragments and accumulators. Nothing in the product uses wgmma
// yet; the attention kernels would (mma.sync cannot reach Hopper's tensor-core peak).
// Such kernels cannot be checked on a CPU against anything but that same reading, so
// each reading is first put to the hardware here, one 64 x 64 product per probe, and the
// gpu test says which readings hold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8::testing::wgmma_probe {

// One way of feeding D[64, 64] = A[64, K] · B[K, 64] through m64n64k16 bf16 wgmmas (fp32
// accumulators), K / 16 of them.
enum class Probe : int {
  kSharedAKMajor,               // A and B from shared memory, both K-major, no swizzle; K = 16
  kRegisterAKMajor,             // A from registers (mma.sync's A fragment per warp), B as above
  kMnMajorLboAlongN,            // B MN-major (transposed), no swizzle: LBO steps 8 columns (n), SBO 8 rows (k)
  kMnMajorLboAlongK,            // the same with LBO and SBO exchanged
  kKMajorSwizzle128,            // B K-major with the 128-byte swizzle, K = 64: four k-steps, 32 bytes apart
  kMnMajorSwizzle128,           // B MN-major with the 128-byte swizzle, K = 64: LBO 16 (unused), SBO 1024
  kMnMajorSwizzle128Exchanged,  // the same with LBO and SBO exchanged
};
constexpr int kProbes = 7;
const char* probe_name(Probe p);
int probe_k(Probe p);  // 16 or 64

enum class Outcome : int { kRan, kNoDevice, kNotHopper, kCudaError };

struct Result {
  Outcome outcome = Outcome::kCudaError;
  std::string message;  // why it did not run
  std::vector<float> d;  // [64, 64], row-major, as each thread's accumulators say
};

// a: [64, K] and b: [K, 64] bf16 bits, row-major (K = probe_k(p)).
Result run(Probe p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);

}  // namespace fp8::testing::wgmma_probe
