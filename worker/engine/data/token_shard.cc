#include "worker/engine/data/token_shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::engine::data {
namespace {

constexpr size_t kWriteChunk = 1 << 20;

uint64_t load(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

void store(std::string& out, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

std::string encode_header(const TokenShardHeader& h) {
  std::string out(kTokenShardMagic, sizeof kTokenShardMagic);
  store(out, kTokenShardVersion, 4);
  store(out, static_cast<uint64_t>(h.width), 4);
  store(out, static_cast<uint64_t>(h.tokens), 8);
  store(out, h.vocab_size, 4);
  store(out, h.end_of_text, 4);
  store(out, h.tokenizer, 8);
  out.resize(kTokenShardHeaderBytes, '\0');
  return out;
}

absl::Status errno_status(const std::string& what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(errno), absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

uint64_t tokenizer_fingerprint(std::string_view identity) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : identity) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool looks_like_token_shard(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof kTokenShardMagic && std::memcmp(bytes.data(), kTokenShardMagic, 8) == 0;
}

absl::StatusOr<TokenShard> TokenShard::open(const std::string& path) {
  absl::StatusOr<MappedFile> file = MappedFile::open(path);
  if (!file.ok()) return file.status();
  return from_mapped(path, *std::move(file));
}

absl::StatusOr<TokenShard> TokenShard::from_mapped(const std::string& path, MappedFile file) {
  const std::span<const uint8_t> bytes = file.bytes();
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("token shard ", path, ": ", what...));
  };
  if (!looks_like_token_shard(bytes)) return bad("does not begin with the magic \"FP8TOKNS\"");
  if (bytes.size() < static_cast<size_t>(kTokenShardHeaderBytes)) {
    return bad("truncated: ", bytes.size(), " bytes, shorter than its ", kTokenShardHeaderBytes, "-byte header");
  }
  const uint8_t* p = bytes.data();
  if (const uint64_t version = load(p + 8, 4); version != kTokenShardVersion) {
    return bad("version ", version, " at offset 8; this build reads version ", kTokenShardVersion);
  }
  TokenShardHeader h;
  const uint64_t width = load(p + 12, 4);
  if (width != 2 && width != 4) return bad("token width ", width, " at offset 12 is neither 2 nor 4");
  h.width = static_cast<int>(width);
  const uint64_t count = load(p + 16, 8);
  h.vocab_size = static_cast<uint32_t>(load(p + 24, 4));
  h.end_of_text = static_cast<uint32_t>(load(p + 28, 4));
  h.tokenizer = load(p + 32, 8);
  const uint64_t payload = bytes.size() - kTokenShardHeaderBytes;
  if (count > payload / width || count * width != payload) {
    return bad("the header at offset 16 counts ", count, " tokens of ", width, " bytes, but ", payload,
               " bytes follow it (truncated or padded)");
  }
  if (h.vocab_size == 0) return bad("vocabulary size 0 at offset 24");
  h.tokens = static_cast<int64_t>(count);
  return TokenShard(path, std::move(file), h);
}

TokenRun TokenShard::tokens() const {
  return {file_.bytes().data() + kTokenShardHeaderBytes, header_.tokens, header_.width};
}

absl::StatusOr<TokenShardWriter> TokenShardWriter::create(const std::string& path, const TokenShardHeader& header) {
  if (header.width != 2 && header.width != 4) {
    return absl::InvalidArgumentError(absl::StrCat("token shard ", path, ": width ", header.width, " is neither 2 nor 4"));
  }
  if (header.width == 2 && header.vocab_size > (1u << 16)) {
    return absl::InvalidArgumentError(absl::StrCat("token shard ", path, ": a vocabulary of ", header.vocab_size,
                                                   " does not fit 2-byte tokens"));
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp);
  TokenShardHeader h = header;
  h.tokens = 0;
  TokenShardWriter writer(path, fd, h);
  // The count is not known yet: the header is written again by finish().
  if (absl::Status s = writer.write_all(encode_header(h).data(), kTokenShardHeaderBytes); !s.ok()) return s;
  return writer;
}

TokenShardWriter::TokenShardWriter(TokenShardWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), header_(other.header_), buffer_(std::move(other.buffer_)) {
  other.fd_ = -1;
}

TokenShardWriter::~TokenShardWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink((path_ + ".tmp").c_str());
}

absl::Status TokenShardWriter::write_all(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status("cannot write", path_ + ".tmp");
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::append(std::span<const uint32_t> tokens) {
  for (uint32_t t : tokens) {
    if (t >= header_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token shard ", path_, ": token ", t, " at position ",
                                                     header_.tokens, " is not below the vocabulary size ",
                                                     header_.vocab_size));
    }
    store(buffer_, t, header_.width);
    ++header_.tokens;
  }
  if (buffer_.size() >= kWriteChunk) {
    if (absl::Status s = write_all(buffer_.data(), buffer_.size()); !s.ok()) return s;
    buffer_.clear();
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::finish() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("token shard ", path_, ": already finished"));
  if (absl::Status s = write_all(buffer_.data(), buffer_.size()); !s.ok()) return s;
  buffer_.clear();
  const std::string header = encode_header(header_);
  if (::pwrite(fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
    return errno_status("cannot write the header of", path_ + ".tmp");
  }
  if (::fsync(fd_) != 0) return errno_status("cannot fsync", path_ + ".tmp");
  ::close(fd_);
  fd_ = -1;
  if (::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    const absl::Status s = errno_status("cannot rename to", path_);
    ::unlink((path_ + ".tmp").c_str());
    return s;
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine::data
