// Tensor and Device (worker/engine/tensor): shapes and strides, host transfers, views and
// row slices sharing memory, and the errors every misuse must return rather than crash on.
#include "worker/engine/tensor/tensor.h"

#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "worker/engine/tensor/device.h"

namespace fp8::engine {
namespace {

using ::testing::HasSubstr;

Device& cpu() { return Device::cpu(); }

// 0, 1, 2, ... as floats.
std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

Tensor from_floats(const std::vector<float>& values, TensorShape shape) {
  absl::StatusOr<Tensor> t = Tensor::from_host<float>(cpu(), std::span<const float>(values), std::move(shape));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

std::vector<float> download_floats(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.download<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

TEST(Tensor, DefaultConstructedIsUndefined) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.describe(), "an undefined tensor");
  EXPECT_EQ(t.zero().code(), absl::StatusCode::kFailedPrecondition);
  Tensor other = from_floats({1.0f}, {1});
  EXPECT_EQ(t.copy_from(other).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.copy_from(t).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, ShapeStridesNumelAndDescribe) {
  absl::StatusOr<Tensor> t = Tensor::empty(cpu(), ElementType::kFloat32, {2, 3, 4});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(&t->device(), &cpu());
  EXPECT_EQ(t->type(), ElementType::kFloat32);
  EXPECT_EQ(t->shape(), (TensorShape{2, 3, 4}));
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t->rank(), 3);
  EXPECT_EQ(t->dim(0), 2);
  EXPECT_EQ(t->dim(2), 4);
  EXPECT_EQ(t->numel(), 24);
  EXPECT_EQ(t->nbytes(), 96u);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_EQ(t->describe(), "float32[2, 3, 4] on cpu");
  EXPECT_NE(t->data<float>(), nullptr);
  EXPECT_EQ(static_cast<void*>(t->data<float>()), t->raw());
  // The backend's 256-byte alignment.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % 256, 0u);
}

TEST(Tensor, ElementSizesAndNames) {
  EXPECT_EQ(element_size(ElementType::kFloat32), 4u);
  EXPECT_EQ(element_size(ElementType::kInt32), 4u);
  EXPECT_EQ(element_size(ElementType::kBFloat16), 2u);
  EXPECT_EQ(element_size(ElementType::kE4M3), 1u);
  EXPECT_EQ(element_size(ElementType::kE5M2), 1u);
  EXPECT_STREQ(element_type_name(ElementType::kBFloat16), "bfloat16");
  EXPECT_STREQ(element_type_name(ElementType::kE4M3), "float8_e4m3");
  EXPECT_STREQ(element_type_name(ElementType::kE5M2), "float8_e5m2");
  EXPECT_STREQ(element_type_name(ElementType::kInt32), "int32");
  EXPECT_EQ(shape_string({8, 64, 256}), "[8, 64, 256]");
  EXPECT_EQ(shape_string({}), "[]");

  absl::StatusOr<Tensor> t = Tensor::empty(cpu(), ElementType::kBFloat16, {3, 5});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nbytes(), 30u);
  EXPECT_EQ(t->describe(), "bfloat16[3, 5] on cpu");
}

TEST(Tensor, ScalarAndEmptyShapes) {
  // Rank 0: one element.
  absl::StatusOr<Tensor> scalar = Tensor::zeros(cpu(), ElementType::kFloat32, {});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(download_floats(*scalar), std::vector<float>{0.0f});
  // A zero dimension: no elements, but a valid tensor.
  absl::StatusOr<Tensor> empty = Tensor::zeros(cpu(), ElementType::kFloat32, {0, 7});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->nbytes(), 0u);
  EXPECT_TRUE(download_floats(*empty).empty());
}

TEST(Tensor, NegativeDimensionRejected) {
  absl::StatusOr<Tensor> t = Tensor::empty(cpu(), ElementType::kFloat32, {4, -1});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("[4, -1]"));
  EXPECT_FALSE(Tensor::zeros(cpu(), ElementType::kInt32, {-3}).ok());
  const std::vector<float> values = {1.0f};
  EXPECT_FALSE(Tensor::from_host<float>(cpu(), std::span<const float>(values), {-1}).ok());
}

TEST(Tensor, ZerosAreZero) {
  // Dirty the allocator first, so that fresh memory is unlikely to be zero by chance.
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Tensor> dirty = Tensor::empty(cpu(), ElementType::kFloat32, {1000});
    ASSERT_TRUE(dirty.ok());
    std::vector<float> junk(1000, -7.5f);
    ASSERT_TRUE(dirty->upload<float>(junk).ok());
  }
  absl::StatusOr<Tensor> f = Tensor::zeros(cpu(), ElementType::kFloat32, {10, 100});
  ASSERT_TRUE(f.ok()) << f.status();
  for (float x : download_floats(*f)) ASSERT_EQ(x, 0.0f);
  absl::StatusOr<Tensor> i = Tensor::zeros(cpu(), ElementType::kInt32, {33});
  ASSERT_TRUE(i.ok()) << i.status();
  absl::StatusOr<std::vector<int32_t>> iv = i->download<int32_t>();
  ASSERT_TRUE(iv.ok()) << iv.status();
  for (int32_t x : *iv) ASSERT_EQ(x, 0);

  // zero() clears a tensor that holds data.
  Tensor t = from_floats(iota_floats(12), {3, 4});
  ASSERT_TRUE(t.zero().ok());
  EXPECT_EQ(download_floats(t), std::vector<float>(12, 0.0f));
}

TEST(Tensor, UploadDownloadRoundTrip) {
  const std::vector<float> values = {1.5f, -2.25f, 0.0f, 3e-8f, -1e30f, 7.0f};
  Tensor t = from_floats(values, {2, 3});
  EXPECT_EQ(t.data<float>()[4], -1e30f);
  EXPECT_EQ(download_floats(t), values);

  // A second upload overwrites.
  const std::vector<float> other = {6, 5, 4, 3, 2, 1};
  ASSERT_TRUE(t.upload<float>(other).ok());
  EXPECT_EQ(download_floats(t), other);

  // int32, through the same path.
  const std::vector<int32_t> ids = {0, -1, 255, 1 << 30};
  absl::StatusOr<Tensor> it = Tensor::from_host<int32_t>(cpu(), std::span<const int32_t>(ids), {4});
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_EQ(it->type(), ElementType::kInt32);
  absl::StatusOr<std::vector<int32_t>> back = it->download<int32_t>();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ids);

  // Raw bytes.
  std::vector<std::byte> bytes(t.nbytes());
  ASSERT_TRUE(t.download_bytes(bytes).ok());
  absl::StatusOr<Tensor> u = Tensor::empty(cpu(), ElementType::kFloat32, {6});
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(u->upload_bytes(bytes).ok());
  EXPECT_EQ(download_floats(*u), other);
}

TEST(Tensor, TransfersOfTheWrongSizeOrTypeAreRejected) {
  Tensor t = from_floats(iota_floats(6), {2, 3});
  const std::vector<float> five(5, 1.0f), seven(7, 1.0f);
  EXPECT_EQ(t.upload<float>(five).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.upload<float>(seven).code(), absl::StatusCode::kInvalidArgument);
  // Nothing was written by the failed uploads.
  EXPECT_EQ(download_floats(t), iota_floats(6));

  // Wrong element type, both ways, even when the byte counts agree.
  const std::vector<int32_t> ints(6, 3);
  absl::Status up = t.upload<int32_t>(ints);
  EXPECT_EQ(up.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(up.message()), HasSubstr("int32"));
  absl::StatusOr<std::vector<int32_t>> down = t.download<int32_t>();
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("float32[2, 3]"));

  // from_host with a value count that does not match the shape.
  EXPECT_FALSE(Tensor::from_host<float>(cpu(), std::span<const float>(five), {2, 3}).ok());

  // Byte transfers of the wrong size.
  std::vector<std::byte> short_bytes(t.nbytes() - 1);
  EXPECT_EQ(t.download_bytes(short_bytes).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.upload_bytes(short_bytes).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, CopiesShareMemory) {
  Tensor a = from_floats(iota_floats(4), {4});
  Tensor b = a;  // like torch: a second handle, not a deep copy
  b.data<float>()[2] = 42.0f;
  EXPECT_EQ(download_floats(a)[2], 42.0f);
  EXPECT_EQ(a.raw(), b.raw());
}

TEST(Tensor, MemoryOutlivesTheFirstHandle) {
  Tensor view;
  {
    Tensor owner = from_floats(iota_floats(8), {2, 4});
    absl::StatusOr<Tensor> r = owner.rows(1, 1);
    ASSERT_TRUE(r.ok());
    view = *r;
  }
  // The block is freed with its last reference, not its first (ASan would flag a read of
  // freed memory here).
  EXPECT_EQ(download_floats(view), (std::vector<float>{4, 5, 6, 7}));
}

TEST(Tensor, ViewReshapesTheSameMemory) {
  Tensor t = from_floats(iota_floats(24), {2, 3, 4});
  absl::StatusOr<Tensor> v = t.view({6, 4});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape(), (TensorShape{6, 4}));
  EXPECT_EQ(v->strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(v->numel(), 24);
  EXPECT_EQ(v->raw(), t.raw());
  EXPECT_EQ(download_floats(*v), iota_floats(24));
  v->data<float>()[5] = -1.0f;
  EXPECT_EQ(download_floats(t)[5], -1.0f);

  absl::StatusOr<Tensor> flat = t.view({24});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->rank(), 1);
  absl::StatusOr<Tensor> scalarish = from_floats({3.0f}, {1, 1}).view({});
  ASSERT_TRUE(scalarish.ok()) << scalarish.status();
  EXPECT_EQ(scalarish->rank(), 0);
}

TEST(Tensor, ViewWithAnotherElementCountRejected) {
  Tensor t = from_floats(iota_floats(24), {2, 3, 4});
  for (const TensorShape& shape : {TensorShape{5, 5}, TensorShape{25}, TensorShape{2, 3}, TensorShape{}}) {
    absl::StatusOr<Tensor> v = t.view(shape);
    ASSERT_FALSE(v.ok()) << shape_string(shape);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("element counts differ"));
  }
  // Negative dimensions whose product happens to match are no shape either.
  for (const TensorShape& shape : {TensorShape{-2, -12}, TensorShape{-1, 4, -6}}) {
    absl::StatusOr<Tensor> v = t.view(shape);
    ASSERT_FALSE(v.ok()) << shape_string(shape);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("negative dimension"));
  }
  // The tensor is unchanged by the failed views.
  EXPECT_EQ(t.shape(), (TensorShape{2, 3, 4}));
}

TEST(Tensor, RowsShareMemory) {
  Tensor t = from_floats(iota_floats(12), {4, 3});
  absl::StatusOr<Tensor> r = t.rows(1, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape(), (TensorShape{2, 3}));
  EXPECT_EQ(r->strides(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(r->is_contiguous());
  EXPECT_EQ(r->raw(), static_cast<void*>(t.data<float>() + 3));
  EXPECT_EQ(download_floats(*r), (std::vector<float>{3, 4, 5, 6, 7, 8}));

  // Writes through the slice land in the parent, and only in its rows.
  ASSERT_TRUE(r->zero().ok());
  EXPECT_EQ(download_floats(t), (std::vector<float>{0, 1, 2, 0, 0, 0, 0, 0, 0, 9, 10, 11}));
  const std::vector<float> row = {-1, -2, -3};
  absl::StatusOr<Tensor> last = t.rows(3, 1);
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(last->upload<float>(row).ok());
  EXPECT_EQ(download_floats(t)[10], -2.0f);

  // Rows of rows: offsets add up.
  absl::StatusOr<Tensor> rr = t.rows(1, 3);
  ASSERT_TRUE(rr.ok());
  absl::StatusOr<Tensor> rrr = rr->rows(2, 1);
  ASSERT_TRUE(rrr.ok());
  EXPECT_EQ(download_floats(*rrr), row);

  // A view of a slice keeps the slice's offset.
  absl::StatusOr<Tensor> v = rr->view({9});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(download_floats(*v)[8], -3.0f);

  // Rows of a 3-D tensor slice whole [3, 4] planes.
  Tensor cube = from_floats(iota_floats(24), {2, 3, 4});
  absl::StatusOr<Tensor> plane = cube.rows(1, 1);
  ASSERT_TRUE(plane.ok());
  EXPECT_EQ(plane->shape(), (TensorShape{1, 3, 4}));
  EXPECT_EQ(download_floats(*plane)[0], 12.0f);

  // The whole range and an empty range at the end are fine.
  EXPECT_TRUE(t.rows(0, 4).ok());
  absl::StatusOr<Tensor> none = t.rows(4, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->numel(), 0);
}

TEST(Tensor, ReinterpretSharesTheBytesAsAnotherType) {
  absl::StatusOr<Tensor> bytes = Tensor::zeros(Device::cpu(), ElementType::kE4M3, {24});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<Tensor> floats = bytes->reinterpret(ElementType::kFloat32, 8, {2, 2});
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_EQ(floats->type(), ElementType::kFloat32);
  EXPECT_EQ(floats->shape(), (TensorShape{2, 2}));
  EXPECT_EQ(floats->strides(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(floats->raw(), static_cast<void*>(static_cast<std::byte*>(bytes->raw()) + 8));
  const std::vector<float> values = {1, 2, 3, 4};
  ASSERT_TRUE(floats->upload<float>(values).ok());
  // The parent's bytes changed, and only bytes [8, 24).
  float third = 0;
  std::memcpy(&third, static_cast<const std::byte*>(bytes->raw()) + 16, sizeof third);
  EXPECT_EQ(third, 3.0f);
  EXPECT_EQ(static_cast<const uint8_t*>(bytes->raw())[7], 0);
}

TEST(Tensor, ReinterpretOutOfBoundsOrMisalignedRejected) {
  absl::StatusOr<Tensor> bytes = Tensor::zeros(Device::cpu(), ElementType::kE4M3, {24});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_FALSE(bytes->reinterpret(ElementType::kFloat32, 12, {4}).ok());  // past the end
  EXPECT_FALSE(bytes->reinterpret(ElementType::kFloat32, 2, {2}).ok());   // misaligned
  EXPECT_FALSE(bytes->reinterpret(ElementType::kFloat32, -4, {1}).ok());
  EXPECT_FALSE(Tensor().reinterpret(ElementType::kFloat32, 0, {1}).ok());
  absl::StatusOr<Tensor> last = bytes->reinterpret(ElementType::kFloat32, 20, {1});
  EXPECT_TRUE(last.ok()) << last.status();
}

TEST(Tensor, RowsOutOfBoundsRejected) {
  Tensor t = from_floats(iota_floats(12), {4, 3});
  for (auto [begin, count] : std::vector<std::pair<int64_t, int64_t>>{{-1, 1}, {0, 5}, {3, 2}, {5, 0}, {0, -1}}) {
    absl::StatusOr<Tensor> r = t.rows(begin, count);
    ASSERT_FALSE(r.ok()) << begin << " " << count;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("float32[4, 3]"));
  }
  // Sizes whose sum overflows int64 are out of bounds too (not undefined behaviour).
  EXPECT_FALSE(t.rows(2, std::numeric_limits<int64_t>::max()).ok());
  EXPECT_FALSE(t.rows(std::numeric_limits<int64_t>::max(), 2).ok());
  // A rank-0 tensor has no rows.
  absl::StatusOr<Tensor> scalar = Tensor::zeros(cpu(), ElementType::kFloat32, {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_FALSE(scalar->rows(0, 0).ok());
}

TEST(Tensor, CopyFrom) {
  Tensor src = from_floats(iota_floats(6), {2, 3});
  absl::StatusOr<Tensor> dst = Tensor::zeros(cpu(), ElementType::kFloat32, {2, 3});
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(dst->copy_from(src).ok());
  EXPECT_EQ(download_floats(*dst), iota_floats(6));
  EXPECT_NE(dst->raw(), src.raw());  // a real copy: changing src leaves dst alone
  src.data<float>()[0] = 100.0f;
  EXPECT_EQ(download_floats(*dst)[0], 0.0f);

  // Same element count, other shape: allowed (the bytes are the same).
  absl::StatusOr<Tensor> flat = Tensor::zeros(cpu(), ElementType::kFloat32, {6});
  ASSERT_TRUE(flat.ok());
  EXPECT_TRUE(flat->copy_from(src).ok());

  // Into a row slice.
  absl::StatusOr<Tensor> big = Tensor::zeros(cpu(), ElementType::kFloat32, {4, 3});
  ASSERT_TRUE(big.ok());
  absl::StatusOr<Tensor> middle = big->rows(1, 2);
  ASSERT_TRUE(middle.ok());
  ASSERT_TRUE(middle->copy_from(src).ok());
  EXPECT_EQ(download_floats(*big), (std::vector<float>{0, 0, 0, 100, 1, 2, 3, 4, 5, 0, 0, 0}));
}

TEST(Tensor, CopyFromMismatchRejected) {
  Tensor src = from_floats(iota_floats(6), {2, 3});
  const std::vector<float> before(6, 9.0f);
  Tensor dst = from_floats(before, {2, 3});

  // Element count.
  absl::StatusOr<Tensor> bigger = Tensor::zeros(cpu(), ElementType::kFloat32, {7});
  ASSERT_TRUE(bigger.ok());
  absl::Status s = bigger->copy_from(src);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("float32[2, 3]"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("float32[7]"));
  EXPECT_EQ(src.copy_from(*bigger).code(), absl::StatusCode::kInvalidArgument);

  // Element type (same byte count: int32 and float32 are both four bytes).
  absl::StatusOr<Tensor> ints = Tensor::zeros(cpu(), ElementType::kInt32, {2, 3});
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(ints->copy_from(src).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dst.copy_from(*ints).code(), absl::StatusCode::kInvalidArgument);

  // Device: another Device object, even over the same backend.
  Device other("other-cpu", &cpu_backend(), &cpu_model_ops());
  absl::StatusOr<Tensor> elsewhere = Tensor::zeros(other, ElementType::kFloat32, {2, 3});
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->describe(), "float32[2, 3] on other-cpu");
  EXPECT_EQ(dst.copy_from(*elsewhere).code(), absl::StatusCode::kInvalidArgument);

  // None of the failed copies wrote anything.
  EXPECT_EQ(download_floats(dst), before);
  EXPECT_EQ(download_floats(src), iota_floats(6));
}

TEST(Device, CpuHasBackendAndModelOps) {
  Device& d = Device::cpu();
  EXPECT_EQ(&d, &Device::cpu());  // one process-wide device
  EXPECT_EQ(d.name(), "cpu");
  EXPECT_FALSE(d.is_cuda());
  EXPECT_EQ(&d.backend(), &cpu_backend());
  EXPECT_TRUE(d.has_model_ops());
  absl::StatusOr<ModelOps*> ops = d.model_ops();
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(*ops, &cpu_model_ops());
}

TEST(Device, WithoutModelOpsSaysSo) {
  Device d("bare", &cpu_backend(), nullptr);
  EXPECT_FALSE(d.has_model_ops());
  absl::StatusOr<ModelOps*> ops = d.model_ops();
  ASSERT_FALSE(ops.ok());
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ops.status().message()), HasSubstr("bare"));
  // Its tensors still work: the Backend is all they need.
  absl::StatusOr<Tensor> t = Tensor::zeros(d, ElementType::kFloat32, {3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(download_floats(*t), std::vector<float>(3, 0.0f));
}

TEST(Device, CudaIsAnErrorWithoutAGpu) {
  absl::StatusOr<std::unique_ptr<Device>> d = Device::cuda(0);
  if (d.ok()) {
    // A machine with a GPU: the device, its model kernels and its own stream.
    EXPECT_EQ((*d)->name(), "cuda:0");
    EXPECT_TRUE((*d)->is_cuda());
    EXPECT_EQ((*d)->ordinal(), 0);
    EXPECT_NE((*d)->stream(), nullptr);
    EXPECT_TRUE((*d)->model_ops().ok()) << (*d)->model_ops().status();
    return;
  }
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  EXPECT_FALSE(d.status().message().empty());
  EXPECT_NE(d.status().code(), absl::StatusCode::kOk);
  // A bad ordinal is an error too, never a crash.
  EXPECT_FALSE(Device::cuda(1000).ok());
}

}  // namespace
}  // namespace fp8::engine
