// fp8-model generate --device cuda: the decoder on the engine's kernels with its KV cache
// in GPU memory (RoPE at each position, attention over the cache), against the same
// decoder on the CPU (tested there against the training engine's forward), at every
// position up to a full context (the cache grows on the way) and for the whole sequence
// fed together, tied and untied. fp32; the GPU's GEMMs accumulate in another order, so
// the logits agree within a bound, not bit for bit.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/hf/logits_error.h"
#include "tests/engine/hf/random_checkpoint_model.h"
#include "worker/engine/hf/device_decoder.h"
#include "worker/engine/hf/generate.h"
#include "worker/engine/hf/sampler.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {
namespace {

CheckpointModel random_model(bool tied) {
  engine::LlamaConfig c;
  c.vocab_size = 260;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 128;
  c.max_seq_len = 80;  // more than DeviceDecoder::kChunk
  c.tie_embeddings = tied;
  return random_checkpoint_model(c, 13);
}

TEST(DeviceDecoderCudaTest, LogitsOnTheGpuAreTheCpusAtEveryPosition) {
  absl::StatusOr<std::unique_ptr<engine::Device>> gpu = engine::Device::cuda(0);
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA device: " << gpu.status().message();
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const CheckpointModel m = random_model(tied);
    absl::StatusOr<std::unique_ptr<DeviceDecoder>> device = DeviceDecoder::create(m, **gpu);
    ASSERT_TRUE(device.ok()) << device.status();
    absl::StatusOr<std::unique_ptr<DeviceDecoder>> cpu = DeviceDecoder::create(m, engine::Device::cpu());
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    for (int64_t pos = 0; pos < m.config.max_seq_len; ++pos) {
      const auto t = static_cast<int32_t>((pos * 53 + 7) % m.config.vocab_size);
      absl::StatusOr<std::span<const float>> got = (*device)->feed(t);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::vector<float> on_gpu(got->begin(), got->end());
      absl::StatusOr<std::span<const float>> want = (*cpu)->feed(t);
      ASSERT_TRUE(want.ok());
      EXPECT_LT(relative_max_error(on_gpu, *want), 1e-3) << "position " << pos;
    }
    EXPECT_EQ((*device)->feed(1).status().code(), absl::StatusCode::kInvalidArgument) << "the context is full";

    // The same sequence fed together (a chunk of 64 tokens and its rest on the GPU).
    std::vector<int32_t> all;
    for (int64_t pos = 0; pos < m.config.max_seq_len; ++pos) {
      all.push_back(static_cast<int32_t>((pos * 53 + 7) % m.config.vocab_size));
    }
    (*device)->reset();
    (*cpu)->reset();
    absl::StatusOr<std::span<const float>> together = (*device)->feed(all);
    ASSERT_TRUE(together.ok()) << together.status();
    const std::vector<float> on_gpu(together->begin(), together->end());
    absl::StatusOr<std::span<const float>> want = (*cpu)->feed(all);
    ASSERT_TRUE(want.ok());
    EXPECT_LT(relative_max_error(on_gpu, *want), 1e-3) << "the sequence fed together";
  }
}

}  // namespace
}  // namespace fp8::hf
