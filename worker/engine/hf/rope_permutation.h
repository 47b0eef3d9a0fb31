// RoPE pairs features differently here and in Hugging Face's Llama. This project rotates
// adjacent pairs (2i, 2i + 1) of each head by angle pos · theta^(-2i / head_dim)
// (kernels/ops/rope.cc); Hugging Face rotates halves (i, i + head_dim / 2) by the same
// angle (rotate_half). Reordering the rows of wq and wk within each head, row 2i to i and
// row 2i + 1 to head_dim / 2 + i, makes the exported model compute the same function:
// attention scores are dot products over a head's features, which a common permutation of
// q and k leaves unchanged.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8::hf {

// `weight` is [heads * head_dim, cols] row-major; returns it with each head's rows in
// Hugging Face's order.
std::vector<float> interleaved_to_half_rows(std::span<const float> weight, int64_t heads, int64_t head_dim,
                                            int64_t cols);
// The inverse: Hugging Face's order back to this project's.
std::vector<float> half_to_interleaved_rows(std::span<const float> weight, int64_t heads, int64_t head_dim,
                                            int64_t cols);

}  // namespace fp8::hf
