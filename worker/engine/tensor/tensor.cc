#include "worker/engine/tensor/tensor.h"

#include "absl/strings/str_join.h"

namespace fp8::engine {

size_t element_size(ElementType t) {
  switch (t) {
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
    case ElementType::kBFloat16:
      return 2;
    case ElementType::kE4M3:
    case ElementType::kE5M2:
      return 1;
  }
  return 0;
}

const char* element_type_name(ElementType t) {
  switch (t) {
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kBFloat16:
      return "bfloat16";
    case ElementType::kE4M3:
      return "float8_e4m3";
    case ElementType::kE5M2:
      return "float8_e5m2";
    case ElementType::kInt32:
      return "int32";
  }
  return "?";
}

std::string shape_string(const TensorShape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

namespace {

std::vector<int64_t> contiguous_strides(const TensorShape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

absl::Status check_dimensions(const TensorShape& shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape ", shape_string(shape), " has a negative dimension"));
    }
  }
  return absl::OkStatus();
}

int64_t element_count(const TensorShape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::StatusOr<Tensor> Tensor::empty(const Device& device, ElementType type, TensorShape shape) {
  if (absl::Status s = check_dimensions(shape); !s.ok()) return s;
  Tensor t;
  t.device_ = &device;
  t.type_ = type;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  Backend* backend = &device.backend();
  absl::StatusOr<void*> memory = backend->allocate(t.nbytes());
  if (!memory.ok()) return memory.status();
  t.storage_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(*memory),
                                          [backend](std::byte* p) { backend->deallocate(p); });
  return t;
}

absl::StatusOr<Tensor> Tensor::zeros(const Device& device, ElementType type, TensorShape shape) {
  absl::StatusOr<Tensor> t = empty(device, type, std::move(shape));
  if (!t.ok()) return t.status();
  if (absl::Status s = t->zero(); !s.ok()) return s;
  return t;
}

int64_t Tensor::numel() const { return element_count(shape_); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

std::string Tensor::describe() const {
  if (!defined()) return "an undefined tensor";
  return absl::StrCat(element_type_name(type_), shape_string(shape_), " on ", device_->name());
}

absl::StatusOr<Tensor> Tensor::view(TensorShape shape) const {
  if (!is_contiguous()) return absl::InvalidArgumentError(absl::StrCat("view of non-contiguous ", describe()));
  if (absl::Status s = check_dimensions(shape); !s.ok()) return s;
  if (element_count(shape) != numel()) {
    return absl::InvalidArgumentError(absl::StrCat("view of ", describe(), " as ", shape_string(shape),
                                                   ": element counts differ"));
  }
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

absl::StatusOr<Tensor> Tensor::rows(int64_t begin, int64_t count) const {
  if (rank() == 0 || begin < 0 || count < 0 || begin > shape_[0] || count > shape_[0] - begin) {
    return absl::InvalidArgumentError(absl::StrCat(count, " rows from row ", begin, " of ", describe()));
  }
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(begin * strides_[0]) * element_size(type_);
  t.shape_[0] = count;
  return t;
}

absl::StatusOr<Tensor> Tensor::reinterpret(ElementType type, int64_t byte_offset, TensorShape shape) const {
  if (!defined()) return absl::FailedPreconditionError("reinterpret() of an undefined tensor");
  if (!is_contiguous()) return absl::InvalidArgumentError(absl::StrCat("reinterpret of non-contiguous ", describe()));
  if (absl::Status s = check_dimensions(shape); !s.ok()) return s;
  const auto size = static_cast<int64_t>(element_size(type));
  const int64_t bytes = element_count(shape) * size;
  const bool aligned = (reinterpret_cast<uintptr_t>(raw()) + static_cast<uintptr_t>(byte_offset)) % size == 0;
  if (byte_offset < 0 || !aligned || byte_offset > static_cast<int64_t>(nbytes()) ||
      bytes > static_cast<int64_t>(nbytes()) - byte_offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", byte_offset, ", ", byte_offset + bytes, ") of ",
                                                   describe(), " as ", element_type_name(type), shape_string(shape),
                                                   ": out of bounds or misaligned"));
  }
  Tensor t = *this;
  t.type_ = type;
  t.offset_ += static_cast<size_t>(byte_offset);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

absl::Status Tensor::zero() {
  if (!defined()) return absl::FailedPreconditionError("zero() of an undefined tensor");
  if (!is_contiguous()) return absl::InvalidArgumentError(absl::StrCat("zero() of non-contiguous ", describe()));
  return device_->backend().fill_zero(raw(), nbytes());
}

absl::Status Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined() || device_ != src.device_ || type_ != src.type_ || numel() != src.numel() ||
      !is_contiguous() || !src.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("copy of ", src.describe(), " into ", describe()));
  }
  return device_->backend().copy(raw(), src.raw(), nbytes());
}

absl::Status Tensor::upload_bytes(std::span<const std::byte> bytes) { return checked_upload(bytes, /*wait=*/true); }

absl::Status Tensor::checked_upload(std::span<const std::byte> bytes, bool wait) {
  if (!defined() || bytes.size() != nbytes() || !is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("upload of ", bytes.size(), " bytes into ", describe()));
  }
  Backend& backend = device_->backend();
  return wait ? backend.copy_from_host(raw(), bytes.data(), bytes.size())
              : backend.queue_copy_from_host(raw(), bytes.data(), bytes.size());
}

absl::Status Tensor::download_bytes(std::span<std::byte> bytes) const {
  if (!defined() || bytes.size() != nbytes() || !is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("download of ", describe(), " into ", bytes.size(), " bytes"));
  }
  return device_->backend().copy_to_host(bytes.data(), raw(), bytes.size());
}

}  // namespace fp8::engine
