// Where a corpus file divides into training and validation text. The validation split is
// the file's tail, so the division depends on the file and data.val_fraction alone:
// never on the seed or the number of ranks, and evaluations stay comparable across runs.
#pragma once

#include <cstdint>
#include <span>

#include "worker/engine/data/token_stream.h"

namespace fp8::engine::data {

// How far from the exact fraction the split may move to land on a line start.
inline constexpr int64_t kSplitSnapBytes = 1024;

// The byte offset at which validation begins: the last `val_fraction` of the bytes
// (rounded to whole bytes), moved to just after the nearest '\n' within kSplitSnapBytes
// so that no line is cut in two. With several equally near, the earlier one wins.
// val_fraction 0 gives bytes.size() (no validation); val_fraction must be in [0, 1].
int64_t validation_split_offset(std::span<const uint8_t> bytes, double val_fraction);

// The same over tokens: the index at which validation begins, moved to just after the
// nearest `boundary` token (a token shard's end-of-text id) within kSplitSnapBytes tokens.
int64_t validation_split_index(const TokenStream& tokens, double val_fraction, int32_t boundary);

}  // namespace fp8::engine::data
