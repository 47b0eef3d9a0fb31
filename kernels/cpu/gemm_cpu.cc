#include "cpu/gemm_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "cpu/cast_cpu.h"
#include "cpu/parallel.h"

namespace fp8::cpu {
namespace {

// Block sizes of the scaled GEMM: an [kTileRows, kDepth] block of A and a
// [kTileCols, kDepth] panel of B are widened to fp32 and multiplied into an fp32
// accumulator tile, depth block after depth block. Whatever the shape, the widened
// operands and the tile take at most 48 MiB. Large blocks matter: splitting a 2048^3
// product into two sgemm calls measured slower in OpenBLAS (bench/RESULTS.md).
constexpr int64_t kTileRows = 2048;
constexpr int64_t kTileCols = 2048;
constexpr int64_t kDepth = 2048;

// Thread-local so repeated GEMMs reuse pages instead of faulting fresh ones each call.
std::vector<float>& scratch(int which) {
  thread_local std::vector<float> buffers[3];
  return buffers[which];
}

float* sized(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Widens a [rows, cols] block of a row-major fp8 matrix with row stride `ld` into a
// dense fp32 block.
void widen_block(const uint8_t* src, int64_t ld, Format f, int64_t rows, int64_t cols, float* dst) {
  parallel_for(rows, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(cols, 1)), [&](int64_t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) widen_fp8(src + r * ld, f, cols, dst + r * cols);
  });
}

// out tile = acc · inv_a · inv_b (+ bias) (+ out or addend), rounded once.
void write_tile(const ScaledGemmArgs& a, const float* acc, int64_t m0, int64_t mb, int64_t n0, int64_t nb) {
  const void* added = a.accumulate ? a.out : a.addend;  // null: nothing added
  parallel_for(mb, std::max<int64_t>(1, 4096 / std::max<int64_t>(nb, 1)), [&](int64_t, int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(nb));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t m = m0 + r;
      // Block-scaled sums carry their factors already (accumulate_blocks).
      const bool blocks = is_block_granularity(a.a.granularity);
      const float ia = blocks ? 1.0f : a.a.inv_scale[a.a.granularity == Granularity::kRowwise ? m : 0];
      const float* src = acc + r * nb;
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t n = n0 + j;
        float v = src[j];
        if (!blocks) v = v * ia * a.b.inv_scale[a.b.granularity == Granularity::kRowwise ? n : 0];
        if (a.bias != nullptr) v += a.bias[n];
        row[j] = v;
      }
      const int64_t at = m * a.n + n0;
      if (a.out_dtype == DType::kFloat32) {
        float* dst = static_cast<float*>(a.out) + at;
        const float* add = added != nullptr ? static_cast<const float*>(added) + at : nullptr;
        for (int64_t j = 0; j < nb; ++j) dst[j] = add != nullptr ? add[j] + row[j] : row[j];
      } else {
        uint16_t* dst = static_cast<uint16_t*>(a.out) + at;
        const uint16_t* add = added != nullptr ? static_cast<const uint16_t*>(added) + at : nullptr;
        for (int64_t j = 0; j < nb; ++j) {
          dst[j] = float_to_bf16(add != nullptr ? bf16_to_float(add[j]) + row[j] : row[j]);
        }
      }
    }
  });
}

// acc[mb, nb] += (Σ over one 128-wide K block, in fp32) · sa · sb, block by block: Hopper's
// promoted accumulation, which the block scales require (they change along K). a_block and
// b_panel hold the widened [mb, kb] and [nb, kb] operands from depth k0; prod is scratch.
void accumulate_blocks(const ScaledGemmArgs& a, const float* a_block, const float* b_panel, int64_t m0, int64_t mb,
                       int64_t n0, int64_t nb, int64_t k0, int64_t kb, float* prod, float* acc) {
  for (int64_t j0 = 0; j0 < kb; j0 += kScaleBlock) {
    const int64_t k = k0 + j0;  // kb is a multiple of 128, as k is
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(mb), static_cast<int>(nb),
                static_cast<int>(kScaleBlock), 1.0f, a_block + j0, static_cast<int>(kb), b_panel + j0,
                static_cast<int>(kb), 0.0f, prod, static_cast<int>(nb));
    parallel_for(mb, std::max<int64_t>(1, 4096 / std::max<int64_t>(nb, 1)), [&](int64_t, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float sa = a.a.inv_scale[scale_index(a.a.granularity, a.m, a.k, m0 + r, k)];
        const float* p = prod + r * nb;
        float* out = acc + r * nb;
        for (int64_t j = 0; j < nb; ++j) {
          const float sb = a.b.inv_scale[scale_index(a.b.granularity, a.n, a.k, n0 + j, k)];
          out[j] += p[j] * sa * sb;
        }
      }
    });
  }
}

}  // namespace

void scaled_gemm(const ScaledGemmArgs& a) {
  if (a.m == 0 || a.n == 0) return;
  if (is_block_granularity(a.a.granularity)) {
    scaled_gemm_blocks(a);
    return;
  }
  const int64_t mb_max = std::min(a.m, kTileRows), nb_max = std::min(a.n, kTileCols);
  const int64_t kb_max = std::min(a.k, kDepth);
  float* b_panel = sized(scratch(0), nb_max * kb_max);
  float* a_block = sized(scratch(1), mb_max * kb_max);
  float* acc = sized(scratch(2), mb_max * nb_max);

  // Which B block the panel holds: with a single depth block (k <= kDepth) every row
  // block of A reuses it instead of widening it again.
  int64_t panel_n0 = -1, panel_k0 = -1;
  for (int64_t n0 = 0; n0 < a.n; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, a.n - n0);
    for (int64_t m0 = 0; m0 < a.m; m0 += mb_max) {
      const int64_t mb = std::min(mb_max, a.m - m0);
      if (a.k == 0) std::fill(acc, acc + mb * nb, 0.0f);
      for (int64_t k0 = 0; k0 < a.k; k0 += kb_max) {
        const int64_t kb = std::min(kb_max, a.k - k0);
        if (panel_n0 != n0 || panel_k0 != k0) {
          widen_block(a.b.data + n0 * a.k + k0, a.k, a.b.format, nb, kb, b_panel);
          panel_n0 = n0;
          panel_k0 = k0;
        }
        widen_block(a.a.data + m0 * a.k + k0, a.k, a.a.format, mb, kb, a_block);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(mb), static_cast<int>(nb),
                    static_cast<int>(kb), 1.0f, a_block, static_cast<int>(kb), b_panel, static_cast<int>(kb),
                    k0 == 0 ? 0.0f : 1.0f, acc, static_cast<int>(nb));
      }
      write_tile(a, acc, m0, mb, n0, nb);
    }
  }
}

void scaled_gemm_blocks(const ScaledGemmArgs& a) {
  // Depth blocks of kDepth (a multiple of 128) hold whole scale blocks.
  static_assert(kDepth % kScaleBlock == 0, "a depth block holds whole scale blocks");
  const int64_t mb_max = std::min(a.m, kTileRows), nb_max = std::min(a.n, kTileCols);
  const int64_t kb_max = std::min(a.k, kDepth);
  float* b_panel = sized(scratch(0), nb_max * kb_max);
  float* a_block = sized(scratch(1), mb_max * kb_max);
  float* acc = sized(scratch(2), mb_max * nb_max);
  thread_local std::vector<float> prod_buffer;
  float* prod = sized(prod_buffer, mb_max * nb_max);
  for (int64_t n0 = 0; n0 < a.n; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, a.n - n0);
    for (int64_t m0 = 0; m0 < a.m; m0 += mb_max) {
      const int64_t mb = std::min(mb_max, a.m - m0);
      std::fill(acc, acc + mb * nb, 0.0f);
      for (int64_t k0 = 0; k0 < a.k; k0 += kb_max) {
        const int64_t kb = std::min(kb_max, a.k - k0);
        widen_block(a.b.data + n0 * a.k + k0, a.k, a.b.format, nb, kb, b_panel);
        widen_block(a.a.data + m0 * a.k + k0, a.k, a.a.format, mb, kb, a_block);
        accumulate_blocks(a, a_block, b_panel, m0, mb, n0, nb, k0, kb, prod, acc);
      }
      write_tile(a, acc, m0, mb, n0, nb);
    }
  }
}

void gemm(const GemmArgs& a) {
  if (a.m == 0 || a.n == 0) return;
  const int64_t a_elems = a.m * a.k, b_elems = a.k * a.n, out_elems = a.m * a.n;
  // bf16 operands are widened exactly; the CPU has no bf16 GEMM worth using.
  const float* A = static_cast<const float*>(a.a);
  const float* B = static_cast<const float*>(a.b);
  if (a.in_dtype == DType::kBFloat16) {
    float* wa = sized(scratch(0), a_elems);
    float* wb = sized(scratch(1), b_elems);
    convert(a.a, DType::kBFloat16, wa, DType::kFloat32, a_elems);
    convert(a.b, DType::kBFloat16, wb, DType::kFloat32, b_elems);
    A = wa;
    B = wb;
  }
  // C enters the sgemm as beta's operand and leaves as the result: out itself for fp32,
  // else a widened copy; an addend is first copied (widened) into it.
  const void* addend = a.addend != nullptr ? a.addend : a.out;
  float* C = static_cast<float*>(a.out);
  if (a.out_dtype == DType::kBFloat16) {
    C = sized(scratch(2), out_elems);
    if (a.beta != 0.0f) convert(addend, DType::kBFloat16, C, DType::kFloat32, out_elems);
  } else if (a.beta != 0.0f && addend != a.out) {
    std::copy_n(static_cast<const float*>(addend), out_elems, C);
  }
  if (a.k == 0) {
    for (int64_t i = 0; i < out_elems; ++i) C[i] = a.beta == 0.0f ? 0.0f : a.beta * C[i];
  } else {
    cblas_sgemm(CblasRowMajor, a.trans_a ? CblasTrans : CblasNoTrans, a.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, A,
                static_cast<int>(a.trans_a ? a.m : a.k), B, static_cast<int>(a.trans_b ? a.k : a.n), a.beta, C,
                static_cast<int>(a.n));
  }
  if (a.bias != nullptr) {
    for (int64_t i = 0; i < a.m; ++i) {
      for (int64_t j = 0; j < a.n; ++j) C[i * a.n + j] += a.bias[j];
    }
  }
  if (a.out_dtype == DType::kBFloat16) convert(C, DType::kFloat32, a.out, DType::kBFloat16, out_elems);
}

}  // namespace fp8::cpu
