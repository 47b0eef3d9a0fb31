// fp8-data end to end, the real binary as a child process: text and JSON Lines into token
// shards, what inspect reports, bad input refused with the file and where (exit 2, nothing
// left behind), and fp8-train training on the shards it made.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"
#include "tests/cli/synthetic_text.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/data/token_stream.h"

#ifndef FP8_DATA_BINARY
#error "FP8_DATA_BINARY must name the fp8-data executable"
#endif
#ifndef FP8_TRAIN_BINARY
#error "FP8_TRAIN_BINARY must name the fp8-train executable"
#endif

namespace fp8::cli_test {
namespace {

namespace fs = std::filesystem;
constexpr std::chrono::milliseconds kLimit{120'000};

class Fp8DataCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fp8-data-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }

  RunResult run_binary(const std::string& binary, std::vector<std::string> args, const std::string& tag) {
    args.insert(args.begin(), binary);
    return cli_test::run(args, {{"FP8_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}}, dir_ / (tag + ".out"),
                         dir_ / (tag + ".err"), kLimit);
  }
  RunResult data(std::vector<std::string> args, const std::string& tag) { return run_binary(FP8_DATA_BINARY, args, tag); }

  // Every token of the shards in `names` (in order), as ints.
  static std::vector<int32_t> tokens(const std::vector<std::string>& paths) {
    std::vector<int32_t> all;
    for (const std::string& p : paths) {
      absl::StatusOr<engine::data::TokenShard> shard = engine::data::TokenShard::open(p);
      EXPECT_TRUE(shard.ok()) << shard.status();
      if (!shard.ok()) return all;
      const engine::data::TokenStream s({shard->tokens()});
      for (int64_t i = 0; i < s.size(); ++i) all.push_back(s.at(i));
    }
    return all;
  }

  // Files in `folder`, hidden ones included.
  static std::vector<std::string> listing(const fs::path& folder) {
    std::vector<std::string> names;
    if (!fs::exists(folder)) return names;
    for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

std::string show(const RunResult& r) { return r.exit.describe() + "\n" + r.out + r.err; }

std::vector<int32_t> byte_tokens(const std::string& text) { return {text.begin(), text.end()}; }

TEST_F(Fp8DataCliTest, TextAndJsonLinesBecomeShardsOfTheirBytesWithEndOfTextBetweenDocuments) {
  const std::string a = "first document\n", b = "second, ünïcode\n";
  write("a.txt", a);
  write("b.txt", b);
  write("docs.jsonl", "{\"text\": \"one\"}\n\n{\"text\": \"two\", \"id\": 2}\n");
  const RunResult r = data({"prepare", "--out", (dir_ / "out").string(), "--shard-tokens", "20",
                            (dir_ / "*.txt").string(), (dir_ / "docs.jsonl").string()},
                           "prepare");
  ASSERT_EQ(r.exit.code, 0) << show(r);
  EXPECT_NE(r.out.find("4 documents"), std::string::npos) << r.out;
  std::vector<int32_t> want = byte_tokens(a);
  want.push_back(3);
  for (const std::string& doc : {b, std::string("one"), std::string("two")}) {
    const std::vector<int32_t> bytes = byte_tokens(doc);
    want.insert(want.end(), bytes.begin(), bytes.end());
    want.push_back(3);
  }
  std::vector<std::string> shards;
  for (size_t i = 0; i * 20 < want.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%05zu.tokens", i);
    shards.push_back((dir_ / "out" / name).string());
  }
  for (int32_t& t : want) t &= 0xff;
  EXPECT_EQ(tokens(shards), want);
  EXPECT_EQ(listing(dir_ / "out").size(), shards.size()) << "staging left behind";

  const RunResult inspected = data({"inspect", shards[0], "--tokens", "14"}, "inspect");
  ASSERT_EQ(inspected.exit.code, 0) << show(inspected);
  EXPECT_NE(inspected.out.find("tokens      20"), std::string::npos) << inspected.out;
  EXPECT_NE(inspected.out.find("tokenizer   bytes"), std::string::npos) << inspected.out;
  EXPECT_NE(inspected.out.find("first document"), std::string::npos) << inspected.out;
}

// Documents are encoded on several threads and written in input order: the shards are the
// same bytes for any thread count, and the first bad document in input order is the error.
TEST_F(Fp8DataCliTest, ThreadsChangeNothingButTheTime) {
  const std::string text = synthetic_text(64 * 1024);
  std::string lines;
  for (size_t at = 0; at + 100 <= text.size(); at += 100) {
    std::string piece = text.substr(at, 100);
    std::replace(piece.begin(), piece.end(), '\n', ' ');
    lines += "{\"text\": \"" + piece + "\"}\n";
  }
  write("docs.jsonl", lines);
  write("a.txt", text.substr(0, 5000));
  write("b.txt", text.substr(5000, 7000));
  std::vector<std::vector<int32_t>> made;
  for (const char* threads : {"1", "3", "0"}) {
    const fs::path out = dir_ / (std::string("out-") + threads);
    const RunResult r = data({"prepare", "--out", out.string(), "--threads", threads, "--shard-tokens", "9000",
                              (dir_ / "*.txt").string(), (dir_ / "docs.jsonl").string()},
                             std::string("prepare-") + threads);
    ASSERT_EQ(r.exit.code, 0) << show(r);
    std::vector<std::string> shards;
    for (const std::string& name : listing(out)) shards.push_back((out / name).string());
    std::sort(shards.begin(), shards.end());
    ASSERT_GT(shards.size(), 1u);
    made.push_back(tokens(shards));
  }
  EXPECT_EQ(made[0], made[1]);
  EXPECT_EQ(made[0], made[2]);

  lines.insert(lines.find('\n', lines.size() / 2) + 1, "{\"body\": 1}\n{\"text\": 2}\n");
  write("bad.jsonl", lines);
  const int first_bad = static_cast<int>(std::count(lines.begin(), lines.begin() + lines.find("{\"body"), '\n')) + 1;
  const RunResult bad = data({"prepare", "--out", (dir_ / "bad").string(), "--threads", "4",
                              (dir_ / "bad.jsonl").string()},
                             "bad");
  EXPECT_EQ(bad.exit.code, 2) << show(bad);
  EXPECT_NE(bad.err.find("bad.jsonl:" + std::to_string(first_bad) + ":"), std::string::npos) << show(bad);
  EXPECT_TRUE(listing(dir_ / "bad").empty());
}

TEST_F(Fp8DataCliTest, BadInputIsRefusedWithTheFileAndWhereAndLeavesNothing) {
  struct Case {
    std::string name;
    std::vector<std::string> inputs;
    std::vector<std::string> stderr_has;
  };
  const std::string bad_utf8 = write("latin1.txt", "caf\xe9 au lait\n");
  const std::string empty = write("empty.txt", "");
  const std::string no_text = write("no-text.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  const std::string not_json = write("not-json.jsonl", "{\"text\": \"ok\"}\n{text\n");
  const std::string etx = write("etx.txt", "ab\x03" "cd");
  const std::vector<Case> cases = {
      {"not UTF-8", {bad_utf8}, {bad_utf8, "byte 3", "not UTF-8"}},
      {"empty", {empty}, {empty, "empty file"}},
      {"no text field", {no_text}, {no_text + ":2", "\"text\""}},
      {"not JSON", {not_json}, {not_json + ":2", "not a JSON value"}},
      {"end-of-text byte", {etx}, {etx, "byte 2", "0x03"}},
      {"missing", {(dir_ / "nope.txt").string()}, {"nope.txt"}},
      {"pattern without match", {(dir_ / "*.md").string()}, {"*.md", "no file matches"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path out = dir_ / ("out-" + std::to_string(&c - cases.data()));
    std::vector<std::string> args = {"prepare", "--out", out.string()};
    args.insert(args.end(), c.inputs.begin(), c.inputs.end());
    const RunResult r = data(args, "case");
    EXPECT_EQ(r.exit.code, 2) << show(r);
    for (const std::string& want : c.stderr_has) EXPECT_NE(r.err.find(want), std::string::npos) << show(r);
    EXPECT_TRUE(listing(out).empty()) << "left behind: " << listing(out).size() << " files";
  }
  // Shards of that name already there: refused, the existing ones untouched.
  const std::string good = write("good.txt", "some text\n");
  ASSERT_EQ(data({"prepare", "--out", (dir_ / "twice").string(), good}, "first").exit.code, 0);
  const RunResult again = data({"prepare", "--out", (dir_ / "twice").string(), good}, "again");
  EXPECT_EQ(again.exit.code, 2) << show(again);
  EXPECT_NE(again.err.find("already holds shards"), std::string::npos) << show(again);
  EXPECT_EQ(listing(dir_ / "twice"), std::vector<std::string>{"shard-00000.tokens"});
  const RunResult damaged = data({"inspect", write("x.tokens", "FP8TOKNS")}, "damaged");
  EXPECT_EQ(damaged.exit.code, 2) << show(damaged);
  EXPECT_NE(damaged.err.find("x.tokens"), std::string::npos) << show(damaged);
}

TEST_F(Fp8DataCliTest, Fp8TrainTrainsOnAPatternOfShardsWithAValidationShardOfItsOwn) {
  write("train.txt", synthetic_text(120 * 1024));
  write("val.txt", synthetic_text(8 * 1024).substr(1000));
  ASSERT_EQ(data({"prepare", "--out", (dir_ / "train").string(), "--shard-tokens", "40000",
                  (dir_ / "train.txt").string()},
                 "p1")
                .exit.code,
            0);
  ASSERT_TRUE(fs::exists(dir_ / "train" / "shard-00003.tokens"));
  ASSERT_EQ(data({"prepare", "--out", (dir_ / "val").string(), (dir_ / "val.txt").string()}, "p2").exit.code, 0);
  write("job.yaml",
        "name: shards\n"
        "model: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n"
        "data: {path: train/shard-*.tokens, val_path: val/shard-00000.tokens, seq_len: 32}\n"
        "train: {steps: 12, batch_size: 4, lr: 3e-3, log_every: 4, eval_every: 6, eval_batches: 2}\n"
        "checkpoint: {dir: ckpt, every: 6}\n"
        "resources: {device: cpu, cpus_per_rank: 1}\n");
  const RunResult r = run_binary(FP8_TRAIN_BINARY, {"--config", (dir_ / "job.yaml").string()}, "train");
  ASSERT_EQ(r.exit.code, 0) << show(r);
  EXPECT_NE(r.out.find("12/12  loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val "), std::string::npos) << "no evaluation on the validation shard\n" << r.out;
}

// A SentencePiece tokenizer from the job's text, shards made with it, what inspect decodes,
// and fp8-train training on them with the vocabulary taken from the model; text, or
// shards of another tokenizer, are refused with what to do.
TEST_F(Fp8DataCliTest, ASentencePieceTokenizerMakesShardsThatFp8TrainTrainsOn) {
  write("train.txt", synthetic_text(120 * 1024));
  write("val.txt", synthetic_text(8 * 1024).substr(2000));
  const RunResult trained =
      data({"train-tokenizer", "--out", (dir_ / "tok").string(), "--vocab-size", "300", (dir_ / "train.txt").string()},
           "train-tokenizer");
  ASSERT_EQ(trained.exit.code, 0) << show(trained);
  ASSERT_TRUE(fs::exists(dir_ / "tok.model") && fs::exists(dir_ / "tok.vocab"));
  EXPECT_EQ(data({"train-tokenizer", "--out", (dir_ / "tok").string(), (dir_ / "train.txt").string()}, "again")
                .exit.code,
            2)
      << "an existing model was overwritten";
  for (const char* part : {"train", "val"}) {
    const RunResult r = data({"prepare", "--out", (dir_ / part).string(), "--tokenizer-model",
                              (dir_ / "tok.model").string(), (dir_ / (std::string(part) + ".txt")).string()},
                             std::string("prepare-") + part);
    ASSERT_EQ(r.exit.code, 0) << show(r);
  }
  const RunResult inspected = data({"inspect", (dir_ / "val" / "shard-00000.tokens").string(), "--tokens", "8",
                                    "--tokenizer-model", (dir_ / "tok.model").string()},
                                   "inspect");
  ASSERT_EQ(inspected.exit.code, 0) << show(inspected);
  EXPECT_NE(inspected.out.find("vocabulary 300"), std::string::npos) << inspected.out;
  EXPECT_NE(inspected.out.find("sentencepiece"), std::string::npos) << inspected.out;

  const std::string job_head = "name: spm\nmodel: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n";
  const std::string job_tail =
      "train: {steps: 8, batch_size: 4, lr: 3e-3, log_every: 4, eval_every: 4, eval_batches: 1}\n"
      "checkpoint: {dir: ckpt, every: 4}\nresources: {device: cpu, cpus_per_rank: 1}\n";
  write("job.yaml", job_head +
                        "data: {path: train/shard-*.tokens, val_path: val/shard-00000.tokens, tokenizer: "
                        "sentencepiece, tokenizer_model: tok.model, seq_len: 32}\n" +
                        job_tail);
  const RunResult r = run_binary(FP8_TRAIN_BINARY, {"--config", (dir_ / "job.yaml").string()}, "train");
  ASSERT_EQ(r.exit.code, 0) << show(r);
  EXPECT_NE(r.out.find("vocab 300"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8/8  loss"), std::string::npos) << r.out;

  auto other_checkpoints = [](std::string job, const std::string& dir) {
    return job.replace(job.find("dir: ckpt"), 9, "dir: " + dir);
  };
  write("text.yaml", job_head +
                         "data: {path: train.txt, tokenizer: sentencepiece, tokenizer_model: tok.model, "
                         "seq_len: 32}\n" +
                         other_checkpoints(job_tail, "ckpt-text"));
  const RunResult text = run_binary(FP8_TRAIN_BINARY, {"--config", (dir_ / "text.yaml").string()}, "text");
  EXPECT_NE(text.exit.code, 0) << show(text);
  EXPECT_NE(text.err.find("fp8-data prepare --tokenizer-model"), std::string::npos) << show(text);
  write("bytes.yaml", job_head + "data: {path: train/shard-00000.tokens, seq_len: 32}\n" +
                         other_checkpoints(job_tail, "ckpt-bytes"));
  const RunResult bytes = run_binary(FP8_TRAIN_BINARY, {"--config", (dir_ / "bytes.yaml").string()}, "bytes");
  EXPECT_NE(bytes.exit.code, 0) << show(bytes);
  EXPECT_NE(bytes.err.find("another tokenizer"), std::string::npos) << show(bytes);

  // The trained model out and on: exported with its tokenizer, a prompt encoded, continued
  // greedily from the export and from the checkpoint alike, and the new ids decoded.
  const std::string model = (dir_ / "tok.model").string();
  const RunResult exported = run_binary(FP8_MODEL_BINARY, {"export", "--checkpoint", (dir_ / "ckpt").string(), "--out",
                                                    (dir_ / "hf").string(), "--tokenizer-model", model},
                                 "export");
  ASSERT_EQ(exported.exit.code, 0) << show(exported);
  const std::string prompt = "the small river in the morning";
  const RunResult encoded = data({"encode", "--tokenizer-model", model, prompt}, "encode");
  ASSERT_EQ(encoded.exit.code, 0) << show(encoded);
  const std::string ids = encoded.out.substr(0, encoded.out.find('\n'));
  EXPECT_EQ(data({"decode", "--tokenizer-model", model, ids}, "decode-prompt").out, prompt + "\n");
  std::vector<std::string> continued;
  for (const char* source : {"--hf", "--checkpoint"}) {
    const fs::path from = dir_ / (std::string(source) == "--hf" ? "hf" : "ckpt");
    const RunResult g = run_binary(FP8_MODEL_BINARY,
                            {"generate", source, from.string(), "--prompt-tokens", ids, "--max-new-tokens", "8",
                             "--temperature", "0"},
                            std::string("generate") + source);
    ASSERT_EQ(g.exit.code, 0) << show(g);
    continued.push_back(g.out.substr(0, g.out.find('\n')));
  }
  EXPECT_EQ(continued[0], continued[1]);
  EXPECT_EQ(std::count(continued[0].begin(), continued[0].end(), ','), 7) << continued[0];
  // --device: a GPU that is not there, or not a device at all, is refused (exit 2).
  for (const auto& [device, why] : {std::pair<std::string, std::string>{"tpu", "expected cpu, cuda or cuda:N"},
                                    {"cuda:99", "--device cuda:99: "}}) {
    const RunResult g = run_binary(FP8_MODEL_BINARY,
                                   {"generate", "--hf", (dir_ / "hf").string(), "--prompt-tokens", ids, "--device", device},
                                   "generate-" + device);
    EXPECT_EQ(g.exit.code, 2) << show(g);
    EXPECT_NE(g.err.find(why), std::string::npos) << show(g);
  }
  const RunResult decoded = data({"decode", "--tokenizer-model", model, continued[0]}, "decode");
  EXPECT_EQ(decoded.exit.code, 0) << show(decoded);
  // As the README pipes it: the ids on standard input.
  const RunResult piped = run_binary("/bin/sh",
                              {"-c", std::string("echo ") + continued[0] + " | " + FP8_DATA_BINARY +
                                         " decode --tokenizer-model " + model},
                              "decode-stdin");
  EXPECT_EQ(piped.exit.code, 0) << show(piped);
  EXPECT_EQ(piped.out, decoded.out);
  const RunResult outside = data({"decode", "--tokenizer-model", model, "1,300"}, "decode-outside");
  EXPECT_EQ(outside.exit.code, 2) << show(outside);
  EXPECT_NE(outside.err.find("'300' is not a token id"), std::string::npos) << show(outside);
}

}  // namespace
}  // namespace fp8::cli_test
