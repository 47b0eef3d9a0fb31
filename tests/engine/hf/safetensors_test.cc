// The safetensors writer and reader: round trips in F32 and BF16, the header's layout, and
// files the reader must refuse with a message naming the file.
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fp8/arith.h"
#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/hf/safetensors_reader.h"
#include "worker/engine/hf/safetensors_writer.h"

namespace fp8::hf {
namespace {

using engine::testing::TempDir;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file with a header of our choosing: length prefix, `json`, then `data_bytes` zeros.
std::filesystem::path write_raw(const std::filesystem::path& p, const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json;
  out.append(data_bytes, '\0');
  std::ofstream(p, std::ios::binary) << out;
  return p;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  // Opening must fail with DataLoss, naming the file and saying `why`.
  void expect_refused(const std::filesystem::path& p, const std::string& why) {
    absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find(p.string()), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
  }
  TempDir dir_{"safetensors"};
};

TEST_F(SafetensorsTest, RoundTripsF32AndBF16WithMetadata) {
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 1e-8f, -0.0f, 65504.0f};
  std::vector<uint16_t> b;
  for (float x : {0.1f, -7.0f, 3.0e38f}) b.push_back(float_to_bf16(x));
  const std::vector<float> scalar = {42.0f};
  const std::vector<SafetensorsTensor> tensors = {
      {"layer.a", SafetensorsDType::kF32, {2, 3}, std::as_bytes(std::span(a))},
      {"layer.b", SafetensorsDType::kBF16, {3}, std::as_bytes(std::span(b))},
      {"scalar", SafetensorsDType::kF32, {}, std::as_bytes(std::span(scalar))},
      {"empty", SafetensorsDType::kF32, {0, 4}, {}},
  };
  const std::filesystem::path p = dir_.path() / "t.safetensors";
  ASSERT_TRUE(write_safetensors(p, tensors, {{"format", "pt"}, {"note", "a \"quoted\" value"}}).ok());

  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->metadata().at("note"), "a \"quoted\" value");
  ASSERT_EQ(r->tensors().size(), 4u);
  EXPECT_EQ(r->tensors()[0].name, "layer.a");  // in the order of their bytes
  EXPECT_EQ(r->tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->tensors()[1].dtype, SafetensorsDType::kBF16);
  EXPECT_EQ(r->find("scalar")->numel(), 1);

  absl::StatusOr<std::vector<float>> got_a = r->read_f32("layer.a");
  ASSERT_TRUE(got_a.ok()) << got_a.status();
  ASSERT_EQ(got_a->size(), a.size());
  EXPECT_EQ(std::memcmp(got_a->data(), a.data(), a.size() * sizeof(float)), 0);  // bit for bit, -0 included
  absl::StatusOr<std::vector<std::byte>> raw_b = r->read_bytes("layer.b");
  ASSERT_TRUE(raw_b.ok());
  EXPECT_EQ(std::memcmp(raw_b->data(), b.data(), b.size() * 2), 0);
  absl::StatusOr<std::vector<float>> got_b = r->read_f32("layer.b");
  ASSERT_TRUE(got_b.ok());
  EXPECT_EQ((*got_b)[1], -7.0f);
  EXPECT_EQ(r->read_f32("empty")->size(), 0u);
  EXPECT_EQ(r->read_f32("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, HeaderIsPaddedWithSpacesToEightBytes) {
  for (const std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    const std::vector<float> v = {1.0f};
    const std::vector<SafetensorsTensor> tensors = {{name, SafetensorsDType::kF32, {1}, std::as_bytes(std::span(v))}};
    const std::filesystem::path p = dir_.path() / (name + ".safetensors");
    ASSERT_TRUE(write_safetensors(p, tensors, {}).ok());
    const std::string bytes = read_file(p);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    EXPECT_EQ(n % 8, 0u) << name;
    EXPECT_EQ(bytes.size(), 8 + n + 4) << name;
    const std::string json = bytes.substr(8, n);
    EXPECT_EQ(json.front(), '{');
    EXPECT_EQ(json.substr(json.find_last_not_of(' ') + 1), std::string(n - 1 - json.find_last_not_of(' '), ' '));
    EXPECT_NE(json.find(R"("data_offsets":[0,4])"), std::string::npos) << json;
    EXPECT_EQ(json.find("__metadata__"), std::string::npos);  // none given, none written
    absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open(p);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->data_start() % 8, 0u);
  }
}

TEST_F(SafetensorsTest, WriterRefusesInconsistentTensors) {
  const std::vector<float> v = {1.0f, 2.0f};
  const auto bytes = std::as_bytes(std::span(v));
  const std::filesystem::path p = dir_.path() / "bad.safetensors";
  std::vector<SafetensorsTensor> wrong_size = {{"w", SafetensorsDType::kF32, {3}, bytes}};
  EXPECT_EQ(write_safetensors(p, wrong_size, {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SafetensorsTensor> repeated = {{"w", SafetensorsDType::kF32, {1}, bytes.first(4)},
                                             {"w", SafetensorsDType::kF32, {1}, bytes.first(4)}};
  EXPECT_EQ(write_safetensors(p, repeated, {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SafetensorsTensor> reserved = {{"__metadata__", SafetensorsDType::kF32, {2}, bytes}};
  EXPECT_EQ(write_safetensors(p, reserved, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(p));
}

TEST_F(SafetensorsTest, RefusesBadFilesNamingThem) {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const auto& d = dir_.path();
  // Shorter than the length prefix; a length past the end of the file.
  {
    std::ofstream(d / "short.safetensors", std::ios::binary) << "abc";
    expect_refused(d / "short.safetensors", "fewer than the 8");
  }
  {
    std::string f(8, '\0');
    f[0] = static_cast<char>(200);
    f += "{}";
    std::ofstream(d / "long_header.safetensors", std::ios::binary) << f;
    expect_refused(d / "long_header.safetensors", "does not fit");
  }
  expect_refused(write_raw(d / "not_json.safetensors", "{\"w\": [", 0), "not a JSON object");
  // Truncated data, and data longer than the header says.
  expect_refused(write_raw(d / "truncated.safetensors", "{" + ok_entry + "}", 5), "truncated");
  expect_refused(write_raw(d / "extra.safetensors", "{" + ok_entry + "}", 12), "the file holds 12");
  // Offsets that run past the data, do not match the shape, overlap or are reversed.
  expect_refused(write_raw(d / "past_end.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8),
                "starts at data offset 8");
  expect_refused(write_raw(d / "wrong_size.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                "dtype and shape need 12");
  expect_refused(write_raw(d / "overlap.safetensors",
                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
                "overlap");
  expect_refused(write_raw(d / "reversed.safetensors", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                "begin <= end");
  expect_refused(write_raw(d / "dtype.safetensors", R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
                "not F32 or BF16");
  expect_refused(write_raw(d / "neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                "bad dim");
  expect_refused(write_raw(d / "missing.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", 4),
                "needs dtype, shape and data_offsets");
  // A written file cut short.
  const std::vector<float> v(16, 1.0f);
  const std::vector<SafetensorsTensor> tensors = {{"w", SafetensorsDType::kF32, {16}, std::as_bytes(std::span(v))}};
  const std::filesystem::path cut = d / "cut.safetensors";
  ASSERT_TRUE(write_safetensors(cut, tensors, {}).ok());
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 3);
  expect_refused(cut, "truncated");
}

}  // namespace
}  // namespace fp8::hf
