// Shared pieces of the checkpoint tests: a scratch directory per test, byte-level damage
// to files, and small sample checkpoints whose contents are known.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint::test_util {

// Each test gets an empty directory, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "fp8-ckpt-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    scratch_ = pattern;
    root_ = scratch_ / "checkpoints";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(scratch_, ec);
  }

  std::filesystem::path scratch_;
  std::filesystem::path root_;  // not created: the code under test creates it
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void flip_byte(const std::filesystem::path& path, uint64_t offset) {
  std::string bytes = read_file(path);
  ASSERT_LT(offset, bytes.size()) << path;
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5A);
  write_file(path, bytes);
}

inline void truncate_to(const std::filesystem::path& path, uint64_t size) { std::filesystem::resize_file(path, size); }

// Values that differ per element, step and rank, so a load from the wrong place shows.
inline std::vector<float> sample_values(size_t n, int64_t step, int32_t rank) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(step) * 1000.0f + static_cast<float>(rank) * 100.0f + static_cast<float>(i) * 0.25f;
  return values;
}

// The records a sample shard holds: a small "model", its optimizer moment, fp8 scaling
// state, data position and RNG state.
inline constexpr int64_t kSampleRows = 4;
inline constexpr int64_t kSampleCols = 8;

inline absl::Status write_sample_records(ShardWriter& writer, int64_t step, int32_t rank) {
  const std::vector<float> weights = sample_values(kSampleRows * kSampleCols, step, rank);
  const std::vector<float> moment = sample_values(kSampleRows * kSampleCols, step + 1, rank);
  const std::vector<float> amax_history = {1.5f, 2.5f, 3.5f};
  // Every call runs; the writer's errors are sticky, so the first failure is the one seen.
  for (absl::Status s :
       {writer.set_metadata("job", "sample"), writer.write_tensor<float>("params/w", weights, {kSampleRows, kSampleCols}),
        writer.write_tensor<float>("adam/m/w", moment, {kSampleRows, kSampleCols}),
        writer.write_tensor<float>("fp8/amax_history/w", amax_history, {3}),
        writer.write_scalar<int64_t>("data/position", step * 10 + rank),
        writer.write_bytes("rng/state", "rng-" + std::to_string(step) + "-" + std::to_string(rank))}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Writes every rank's sample shard for `step` and commits it, as a distributed job would.
inline absl::StatusOr<CommittedCheckpoint> save_sample(const std::filesystem::path& root, int64_t step,
                                                      int32_t world_size = 1) {
  std::vector<ShardInfo> shards;
  for (int32_t rank = 0; rank < world_size; ++rank) {
    absl::StatusOr<ShardInfo> info =
        write_rank_shard(root, step, rank, world_size, [&](ShardWriter& w) { return write_sample_records(w, step, rank); });
    if (!info.ok()) return info.status();
    shards.push_back(*info);
  }
  const std::filesystem::path dir = step_directory(root, step);
  if (absl::Status s = write_commit_marker(dir, step, world_size, shards); !s.ok()) return s;
  return CommittedCheckpoint{.dir = dir, .marker = {.step = step, .world_size = world_size, .shards = shards}};
}

// Loads `rank`'s sample weights and checks they are those of `step`.
inline void expect_sample_weights(const ShardReader& shard, int64_t step, int32_t rank) {
  std::vector<float> weights(kSampleRows * kSampleCols);
  ASSERT_TRUE(shard.read_tensor<float>("params/w", std::span(weights), {kSampleRows, kSampleCols}).ok());
  EXPECT_EQ(weights, sample_values(weights.size(), step, rank));
}

}  // namespace fp8::checkpoint::test_util
