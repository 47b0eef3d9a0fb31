// A dense tensor on a Device: element type, shape and strides over a reference-counted
// block of that device's memory. Copies of a Tensor share the block (like torch.Tensor);
// the block is freed with its last reference.
//
// Deliberately small: what the model, optimizer and checkpoints need and no more. Every
// kernel takes row-major contiguous memory, so strides exist to describe and check
// layouts (a view of rows, a reshape), not to drive strided kernels.
//
// Element types are the fp8 formats and their high-precision peers, plus int32 for token
// ids and targets. Data pointers point into device memory: dereference them on the host
// only for a CPU device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/tensor/device.h"

namespace fp8::engine {

enum class ElementType : uint8_t { kFloat32, kBFloat16, kE4M3, kE5M2, kInt32 };

size_t element_size(ElementType t);
const char* element_type_name(ElementType t);

template <typename T>
constexpr ElementType element_type_of();
template <>
constexpr ElementType element_type_of<float>() { return ElementType::kFloat32; }
template <>
constexpr ElementType element_type_of<int32_t>() { return ElementType::kInt32; }

using TensorShape = std::vector<int64_t>;

// "[8, 64, 256]".
std::string shape_string(const TensorShape& shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: no device, no memory

  // Uninitialised memory. Every dimension must be >= 0.
  static absl::StatusOr<Tensor> empty(const Device& device, ElementType type, TensorShape shape);
  static absl::StatusOr<Tensor> zeros(const Device& device, ElementType type, TensorShape shape);
  // A copy of host values; values.size() must equal the shape's element count.
  template <typename T>
  static absl::StatusOr<Tensor> from_host(const Device& device, std::span<const T> values, TensorShape shape);

  bool defined() const { return device_ != nullptr; }
  const Device& device() const { return *device_; }
  ElementType type() const { return type_; }
  const TensorShape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(type_); }
  bool is_contiguous() const;
  // "float32[8, 64] on cpu".
  std::string describe() const;

  void* raw() const { return storage_.get() + offset_; }
  // The element pointer; T must match type() (checked in debug builds).
  template <typename T>
  T* data() const;

  // The same memory under another shape with the same element count; needs a contiguous
  // tensor.
  absl::StatusOr<Tensor> view(TensorShape shape) const;
  // Rows [begin, begin + count) of dimension 0, sharing memory.
  absl::StatusOr<Tensor> rows(int64_t begin, int64_t count) const;
  // The bytes from `byte_offset` on, sharing memory, as a contiguous tensor of `type` and
  // `shape`: e.g. fp32 values kept inside a buffer of bytes. Needs a contiguous tensor
  // holding them all, and an address aligned to `type`'s size.
  absl::StatusOr<Tensor> reinterpret(ElementType type, int64_t byte_offset, TensorShape shape) const;

  // Sets every element to zero (queued on the device).
  absl::Status zero();
  // Copies `src` (same device, type and element count) into this tensor.
  absl::Status copy_from(const Tensor& src);

  // Host transfers of the whole tensor (they wait for the device).
  template <typename T>
  absl::Status upload(std::span<const T> values);
  template <typename T>
  absl::StatusOr<std::vector<T>> download() const;
  absl::Status upload_bytes(std::span<const std::byte> bytes);
  absl::Status download_bytes(std::span<std::byte> bytes) const;
  // An upload queued like a kernel (Backend::queue_copy_from_host): the host does not wait,
  // `values` may be reused on return, work queued after reads them. A training step's
  // token ids go this way.
  template <typename T>
  absl::Status queue_upload(std::span<const T> values);

 private:
  absl::Status checked_upload(std::span<const std::byte> bytes, bool wait);
  const Device* device_ = nullptr;
  ElementType type_ = ElementType::kFloat32;
  TensorShape shape_;
  std::vector<int64_t> strides_;
  std::shared_ptr<std::byte> storage_;
  size_t offset_ = 0;  // bytes from the block's start
};

// ---- templates ------------------------------------------------------------------------------

template <typename T>
T* Tensor::data() const {
#ifndef NDEBUG
  if (element_type_of<T>() != type_) return nullptr;
#endif
  return reinterpret_cast<T*>(raw());
}

template <typename T>
absl::StatusOr<Tensor> Tensor::from_host(const Device& device, std::span<const T> values, TensorShape shape) {
  absl::StatusOr<Tensor> t = empty(device, element_type_of<T>(), std::move(shape));
  if (!t.ok()) return t.status();
  if (absl::Status s = t->upload(values); !s.ok()) return s;
  return t;
}

template <typename T>
absl::Status Tensor::upload(std::span<const T> values) {
  if (element_type_of<T>() != type_) {
    return absl::InvalidArgumentError(absl::StrCat("upload: ", element_type_name(element_type_of<T>()),
                                                   " values into ", describe()));
  }
  return upload_bytes(std::as_bytes(values));
}

template <typename T>
absl::Status Tensor::queue_upload(std::span<const T> values) {
  if (element_type_of<T>() != type_) {
    return absl::InvalidArgumentError(absl::StrCat("upload: ", element_type_name(element_type_of<T>()),
                                                   " values into ", describe()));
  }
  return checked_upload(std::as_bytes(values), /*wait=*/false);
}

template <typename T>
absl::StatusOr<std::vector<T>> Tensor::download() const {
  if (element_type_of<T>() != type_) {
    return absl::InvalidArgumentError(absl::StrCat("download: ", describe(), " as ",
                                                   element_type_name(element_type_of<T>())));
  }
  std::vector<T> out(static_cast<size_t>(numel()));
  if (absl::Status s = download_bytes(std::as_writable_bytes(std::span<T>(out))); !s.ok()) return s;
  return out;
}

}  // namespace fp8::engine
