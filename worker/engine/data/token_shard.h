// Token shards: pre-tokenized training data, written by `fp8-data prepare` and read by
// memory map.
//
// Format (little-endian), version 1:
//   offset  0  8 bytes  magic "FP8TOKNS"
//           8  u32      version (1)
//          12  u32      token width in bytes: 2 (uint16 tokens) or 4 (uint32)
//          16  u64      token count
//          24  u32      vocabulary size of the tokenizer (every token is below it)
//          28  u32      end-of-text id: the token that separates documents
//          32  u64      tokenizer fingerprint (TokenizerFingerprint)
//          40  24 bytes zero
//          64           the tokens, count x width bytes; the file ends there.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/data/mapped_file.h"
#include "worker/engine/data/token_stream.h"

namespace fp8::engine::data {

inline constexpr char kTokenShardMagic[8] = {'F', 'P', '8', 'T', 'O', 'K', 'N', 'S'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderBytes = 64;

struct TokenShardHeader {
  int width = 2;
  int64_t tokens = 0;
  uint32_t vocab_size = 0;
  uint32_t end_of_text = 0;
  uint64_t tokenizer = 0;  // TokenizerFingerprint of the tokenizer that made the tokens
};

// FNV-1a (64 bits) of what identifies a tokenizer: "bytes" for the bytes tokenizer.
uint64_t tokenizer_fingerprint(std::string_view identity);

// Whether `bytes` begin with the shard magic (a text file that does is not one).
bool looks_like_token_shard(std::span<const uint8_t> bytes);

class TokenShard {
 public:
  // Maps and checks the shard at `path`. Errors name the file and what is wrong (magic,
  // version, width, a size that disagrees with the count: truncated or padded).
  static absl::StatusOr<TokenShard> open(const std::string& path);
  // The same over `file`, already mapped from `path`.
  static absl::StatusOr<TokenShard> from_mapped(const std::string& path, MappedFile file);

  const std::string& path() const { return path_; }
  const TokenShardHeader& header() const { return header_; }
  TokenRun tokens() const;

 private:
  TokenShard(std::string path, MappedFile file, TokenShardHeader header)
      : path_(std::move(path)), file_(std::move(file)), header_(header) {}

  std::string path_;
  MappedFile file_;
  TokenShardHeader header_;
};

// Writes a shard token by token: into `path`.tmp, renamed to `path` (after an fsync) by
// finish(); a writer destroyed before finish() removes the temporary file, so a failed
// run leaves no shard behind.
class TokenShardWriter {
 public:
  // `header.tokens` is ignored: finish() writes the count appended.
  static absl::StatusOr<TokenShardWriter> create(const std::string& path, const TokenShardHeader& header);
  TokenShardWriter(TokenShardWriter&& other) noexcept;
  TokenShardWriter& operator=(TokenShardWriter&&) = delete;
  ~TokenShardWriter();

  // InvalidArgument for a token not below the vocabulary size.
  absl::Status append(std::span<const uint32_t> tokens);
  int64_t tokens() const { return header_.tokens; }
  absl::Status finish();

 private:
  TokenShardWriter(std::string path, int fd, TokenShardHeader header)
      : path_(std::move(path)), fd_(fd), header_(header) {}
  absl::Status write_all(const void* data, size_t size);

  std::string path_;
  int fd_ = -1;
  TokenShardHeader header_;
  std::string buffer_;  // encoded tokens not yet written
};

}  // namespace fp8::engine::data
