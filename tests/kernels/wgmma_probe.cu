// The wgmma probes of wgmma_probe.h: one warpgroup (128 threads) per probe, a 64 x 64
// product in K / 16 m64n64k16 steps. Compiled for sm_90a (wgmma is an sm_90a feature).
#include "tests/kernels/wgmma_probe.h"

#include "cuda/ops/wgmma_primitives.cuh"  // the instructions the kernels use, probed as they are

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fp8::testing::wgmma_probe {
namespace {

namespace wgmma = fp8::cuda::wgmma;
using wgmma::descriptor;

#if defined(FP8_HAVE_WGMMA)
// d (+)= A · B, both from shared memory, K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#endif

__device__ bool transposed_b(Probe p) {
  return p == Probe::kMnMajorLboAlongN || p == Probe::kMnMajorLboAlongK || p == Probe::kMnMajorSwizzle128 ||
         p == Probe::kMnMajorSwizzle128Exchanged;
}

// Byte offset of B[k][n] in shared memory under probe p (K rows of 64).
__device__ int b_offset(Probe p, int k, int n, int kdim) {
  switch (p) {
    case Probe::kSharedAKMajor:
    case Probe::kRegisterAKMajor:  // 8 x 16-byte core matrices: n-groups of kdim / 8 along k
      return ((n / 8) * (kdim / 8) + k / 8) * 128 + (n % 8) * 16 + (k % 8) * 2;
    case Probe::kMnMajorLboAlongN:
    case Probe::kMnMajorLboAlongK:  // core matrices of 8 k-rows x 8 n: 8 n-groups a k-group
      return ((k / 8) * 8 + n / 8) * 128 + (k % 8) * 16 + (n % 8) * 2;
    case Probe::kKMajorSwizzle128:  // 128-byte n-rows; 16-byte chunk c of row r at c ^ (r % 8)
      return (n / 8) * 1024 + (n % 8) * 128 + (((k / 8) ^ (n % 8)) * 16) + (k % 8) * 2;
    case Probe::kMnMajorSwizzle128:
    case Probe::kMnMajorSwizzle128Exchanged:  // 128-byte k-rows, swizzled alike
      return (k / 8) * 1024 + (k % 8) * 128 + (((n / 8) ^ (k % 8)) * 16) + (n % 8) * 2;
  }
  return 0;
}

// The descriptor of B's k-step s under probe p.
__device__ wgmma::Descriptor b_descriptor(Probe p, const unsigned char* b_s, int s) {
  switch (p) {
    case Probe::kSharedAKMajor:
    case Probe::kRegisterAKMajor: return descriptor(b_s + 256 * s, 128, 256, 0);
    case Probe::kMnMajorLboAlongN: return descriptor(b_s + 2048 * s, 128, 1024, 0);
    case Probe::kMnMajorLboAlongK: return descriptor(b_s + 2048 * s, 1024, 128, 0);
    case Probe::kKMajorSwizzle128: return descriptor(b_s + 32 * s, 16, 1024, 1);
    case Probe::kMnMajorSwizzle128: return descriptor(b_s + 2048 * s, 16, 1024, 1);
    case Probe::kMnMajorSwizzle128Exchanged: return descriptor(b_s + 2048 * s, 1024, 16, 1);
  }
  return 0;
}

// a [64][kdim], b [kdim][64] bf16 bits; d [64][64].
__global__ void __launch_bounds__(128) probe_kernel(Probe p, int kdim, const uint16_t* __restrict__ a,
                                                    const uint16_t* __restrict__ b, float* __restrict__ d_out) {
#if defined(FP8_HAVE_WGMMA)
  __shared__ __align__(1024) unsigned char a_s[64 * 64 * 2];
  __shared__ __align__(1024) unsigned char b_s[64 * 64 * 2];
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < 64 * kdim; i += 128) {
    const int m = i / kdim, k = i % kdim;  // A K-major, no swizzle (the shared-A probe)
    *reinterpret_cast<uint16_t*>(a_s + ((m / 8) * (kdim / 8) + k / 8) * 128 + (m % 8) * 16 + (k % 8) * 2) = a[i];
  }
  for (int i = tid; i < kdim * 64; i += 128) {
    const int k = i / 64, n = i % 64;
    *reinterpret_cast<uint16_t*>(b_s + b_offset(p, k, n, kdim)) = b[i];
  }
  wgmma::proxy_fence();
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // mma.sync's A fragment, per warp its 16 rows: every k-step's, loaded before the fence.
  uint32_t af[4][4];
  for (int s = 0; s < kdim / 16; ++s) {
    auto pair = [&](int row, int col) {
      const uint16_t* src = a + (16 * warp + row) * kdim + 16 * s + col;
      return static_cast<uint32_t>(src[0]) | static_cast<uint32_t>(src[1]) << 16;
    };
    af[s][0] = pair(g, 2 * t);
    af[s][1] = pair(g + 8, 2 * t);
    af[s][2] = pair(g, 2 * t + 8);
    af[s][3] = pair(g + 8, 2 * t + 8);
  }
  float d[32];
  for (float& v : d) v = 0.0f;
  wgmma::fence();
  for (int s = 0; s < kdim / 16; ++s) {
    const uint64_t desc_b = b_descriptor(p, b_s, s);
    if (p == Probe::kSharedAKMajor) {
      wgmma_ss(d, descriptor(a_s + 256 * s, 128, 256, 0), desc_b, s > 0);
    } else if (transposed_b(p)) {
      wgmma::mma_m64n64k16<1>(d, af[s], desc_b, s > 0);
    } else {
      wgmma::mma_m64n64k16<0>(d, af[s], desc_b, s > 0);
    }
  }
  wgmma::commit();
  wgmma::wait<0>();
  for (float& v : d) wgmma::fence_operand(v);
  // The accumulators as this project reads them: d[4j + e] is row g (e < 2) or g + 8, column
  // 8j + 2t + e % 2, of the warp's 16 rows.
  for (int j = 0; j < 8; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
      d_out[row * 64 + col] = d[4 * j + e];
    }
  }
#else
  __trap();  // not an sm_90a device image: run() refuses such devices first
#endif
}

}  // namespace

const char* probe_name(Probe p) {
  switch (p) {
    case Probe::kSharedAKMajor: return "A and B in shared memory, K-major, no swizzle";
    case Probe::kRegisterAKMajor: return "A in registers, B K-major, no swizzle";
    case Probe::kMnMajorLboAlongN: return "A in registers, B MN-major, no swizzle, LBO along n";
    case Probe::kMnMajorLboAlongK: return "A in registers, B MN-major, no swizzle, LBO along k";
    case Probe::kKMajorSwizzle128: return "A in registers, B K-major, 128-byte swizzle, K = 64";
    case Probe::kMnMajorSwizzle128: return "A in registers, B MN-major, 128-byte swizzle, K = 64, SBO 1024";
    case Probe::kMnMajorSwizzle128Exchanged: return "A in registers, B MN-major, 128-byte swizzle, K = 64, LBO 1024";
  }
  return "?";
}

int probe_k(Probe p) {
  return p == Probe::kKMajorSwizzle128 || p == Probe::kMnMajorSwizzle128 || p == Probe::kMnMajorSwizzle128Exchanged
             ? 64
             : 16;
}

Result run(Probe p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  Result r;
  const int kdim = probe_k(p);
  auto failed = [&](cudaError_t e, const char* call) {
    r.outcome = Outcome::kCudaError;
    r.message = std::string(call) + ": " + cudaGetErrorString(e);
    return r;
  };
  if (a.size() != static_cast<size_t>(64 * kdim) || b.size() != static_cast<size_t>(kdim * 64)) {
    r.message = "a must be 64 x K and b K x 64";
    return r;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    r.outcome = Outcome::kNoDevice;
    r.message = "no CUDA device";
    return r;
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) return failed(e, "cudaGetDeviceProperties");
  if (prop.major != 9 || prop.minor != 0) {
    r.outcome = Outcome::kNotHopper;
    r.message = std::string(prop.name) + " is sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                "; wgmma is sm_90a's";
    return r;
  }
  uint16_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  if (cudaError_t e = cudaMalloc(&da, a.size() * 2); e != cudaSuccess) return failed(e, "cudaMalloc");
  if (cudaError_t e = cudaMalloc(&db, b.size() * 2); e != cudaSuccess) return failed(e, "cudaMalloc");
  if (cudaError_t e = cudaMalloc(&dd, 64 * 64 * sizeof(float)); e != cudaSuccess) return failed(e, "cudaMalloc");
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dd, 0xff, 64 * 64 * sizeof(float));  // NaN wherever nothing is written
  probe_kernel<<<1, 128>>>(p, kdim, da, db, dd);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) {
    r.d.resize(64 * 64);
    e = cudaMemcpy(r.d.data(), dd, r.d.size() * sizeof(float), cudaMemcpyDeviceToHost);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  if (e != cudaSuccess) return failed(e, "probe kernel");
  r.outcome = Outcome::kRan;
  return r;
}

}  // namespace fp8::testing::wgmma_probe
