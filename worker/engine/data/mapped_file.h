// A whole file mapped read-only into memory. The corpus is read this way rather than
// copied: a file of a few hundred MB costs no heap, pages load on first touch, and the
// ranks of one machine share a single copy in the page cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace fp8::engine::data {

class MappedFile {
 public:
  // Errors name `path`: NotFound for a missing file, InvalidArgument for something that
  // is not a regular file, the errno's code otherwise. An empty file maps to no bytes.
  static absl::StatusOr<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Valid while this object lives; moving the object keeps the address.
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  void unmap();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fp8::engine::data
