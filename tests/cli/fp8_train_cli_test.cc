// fp8-train end to end, as a user runs it: the real binary in a child process, a job.yaml
// and a small synthetic corpus in a scratch folder, and its exit status, log lines and
// checkpoint folders checked against main.cc's contract:
//
//   exit 0 trained to the last step; 2 bad command line or job file; 130 stopped by
//   SIGINT/SIGTERM after writing a checkpoint; 1 any other failure.
//
// Children run with one thread (FP8_NUM_THREADS / OPENBLAS_NUM_THREADS and
// resources.cpus_per_rank), the setting under which a resumed run must match an
// uninterrupted one bit for bit.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/subprocess.h"
#include "tests/cli/synthetic_text.h"

#ifndef FP8_TRAIN_BINARY
#error "FP8_TRAIN_BINARY must name the fp8-train executable"
#endif

namespace fp8::cli_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr milliseconds kRunLimit{120'000};  // per child; a healthy run takes well under a second

const std::map<std::string, std::string>& inherited_env() {
  static const std::map<std::string, std::string> env = {{"FP8_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  return env;
}

// ---- inputs --------------------------------------------------------------------------

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << file;
}

// A tiny job: one block of width 32, a step takes a few milliseconds on one core.
struct JobOptions {
  std::string recipe = "tensorwise";
  int64_t steps = 30;
  std::string data_path = "corpus.txt";
  std::string checkpoint_dir = "ckpt";
  int64_t checkpoint_every = 10;
  int keep = 3;
  std::string extra_train_line;  // written as-is at the end of the train section
};

std::string job_yaml(const JobOptions& o) {
  std::ostringstream y;
  y << "name: cli-test\n"
       "model:\n"
       "  dim: 32\n"
       "  n_layers: 1\n"
       "  n_heads: 2\n"
       "  max_seq_len: 32\n"
       "data:\n"
       "  path: "
    << o.data_path
    << "\n"
       "  seq_len: 32\n"
       "  val_fraction: 0.05\n"
       "train:\n"
       "  steps: "
    << o.steps
    << "\n"
       "  batch_size: 4\n"
       "  lr: 3e-3\n"
       "  warmup_steps: 5\n"
       "  log_every: 5\n"
       "  eval_every: 10\n"
       "  eval_batches: 2\n";
  if (!o.extra_train_line.empty()) y << "  " << o.extra_train_line << "\n";
  y << "fp8:\n"
       "  recipe: "
    << o.recipe
    << "\n"
       "checkpoint:\n"
       "  dir: "
    << o.checkpoint_dir << "\n  every: " << o.checkpoint_every << "\n  keep: " << o.keep
    << "\n"
       "resources:\n"
       "  device: cpu\n"
       "  cpus_per_rank: 1\n";
  return y.str();
}

// ---- reading the log -----------------------------------------------------------------

std::vector<std::string> raw_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "YYYY-MM-DDThh:mm:ss.sssZ INFO fp8-train: step 1/30 ...": fp8-train's text log.
const std::regex& log_line_pattern() {
  static const std::regex kLine(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) fp8-train(?:\[rank \d+\])?: (.*)$)");
  return kLine;
}

// The messages of fp8-train's log, a warning's marked "warning: " as `fp8ctl logs` shows it;
// a line outside the log stays as it is.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> messages;
  for (const std::string& line : raw_lines(text)) {
    std::smatch m;
    if (!std::regex_match(line, m, log_line_pattern())) {
      messages.push_back(line);
    } else if (m[1] == "WARNING") {
      messages.push_back("warning: " + m[2].str());
    } else {
      messages.push_back(m[2].str());
    }
  }
  return messages;
}

std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& l : split_lines(text)) {
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  }
  return out;
}

// "step  5/30  loss 5.2162  lr 3.00e-03  grad_norm 1.702  57130 tok/s  2.2 ms/step  peak 3.1 MiB",
// with "  val 4.4441" after the loss on evaluation steps.
struct StepLine {
  int64_t step = 0, total = 0;
  std::string loss, val, lr, grad_norm;  // as printed; val empty when no evaluation ran
  double tokens_per_second = 0, step_ms = 0;
  std::string peak_memory;  // "3.1 MiB"
  std::string text;
  // The deterministic part: everything but the timings.
  std::string numbers() const { return "loss " + loss + " val " + val + " lr " + lr + " grad_norm " + grad_norm; }
};

std::vector<StepLine> parse_step_lines(const std::string& out) {
  static const std::regex kStep(
      R"(^step +(\d+)/(\d+)  loss (\S+)(?:  val (\S+))?  lr (\S+)  grad_norm (\S+)  (\S+) tok/s  (\S+) ms/step  peak (\S+ \S+)$)");
  std::vector<StepLine> steps;
  for (const std::string& l : split_lines(out)) {
    if (l.rfind("step ", 0) != 0) continue;
    std::smatch m;
    StepLine s;
    s.text = l;
    if (!std::regex_match(l, m, kStep)) {
      ADD_FAILURE() << "malformed step line: " << l;
      continue;
    }
    s.step = std::stoll(m[1]);
    s.total = std::stoll(m[2]);
    s.loss = m[3];
    s.val = m[4].matched ? m[4].str() : "";
    s.lr = m[5];
    s.grad_norm = m[6];
    s.tokens_per_second = std::stod(m[7]);
    s.step_ms = std::stod(m[8]);
    s.peak_memory = m[9];
    steps.push_back(s);
  }
  return steps;
}

const StepLine* find_step(const std::vector<StepLine>& lines, int64_t step) {
  for (const StepLine& s : lines) {
    if (s.step == step) return &s;
  }
  return nullptr;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> step_dirs(const fs::path& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

constexpr char kShard[] = "rank-00000-of-00001.ckpt";

// ---- the fixture ---------------------------------------------------------------------

class Fp8TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
    }
    dir_ = fs::temp_directory_path() /
           ("fp8-train-cli-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + name);
    fs::remove_all(dir_);
    ASSERT_TRUE(fs::create_directories(dir_)) << dir_;
    ASSERT_NO_FATAL_FAILURE(write_text(dir_ / "corpus.txt", synthetic_text(300 * 1024)));
  }

  void TearDown() override {
    if (HasFailure() && std::getenv("FP8_CLI_TEST_KEEP") != nullptr) {
      std::printf("kept %s\n", dir_.c_str());
      return;
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  fs::path write_job(const std::string& file, const std::string& yaml) {
    const fs::path p = dir_ / file;
    write_text(p, yaml);
    return p;
  }

  // fp8-train with `args`; its stdout and stderr are kept as <tag>.out / <tag>.err.
  // `env` adds to (or replaces) child_env()'s variables.
  RunResult train(const std::vector<std::string>& args, const std::string& tag,
                  const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = {FP8_TRAIN_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> child_env = env;
    child_env.insert(inherited_env().begin(), inherited_env().end());
    RunResult r = cli_test::run(argv, child_env, dir_ / (tag + ".out"), dir_ / (tag + ".err"), kRunLimit);
    EXPECT_FALSE(r.exit.timed_out) << tag << ": fp8-train did not finish in " << kRunLimit.count() << " ms";
    return r;
  }

  fs::path dir_;
};

std::string show(const RunResult& r) {
  return r.exit.describe() + "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

// ---- 1. a whole run ------------------------------------------------------------------

TEST_F(Fp8TrainCliTest, TrainsToTheLastStep) {
  JobOptions o;
  o.keep = 2;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult r = train({"--config", job.string()}, "run");
  ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  EXPECT_EQ(r.err, "") << "a good run writes nothing to stderr";

  // Every line of a run is a line of its log: time, level, component, message.
  for (const std::string& line : raw_lines(r.out)) {
    EXPECT_TRUE(std::regex_match(line, log_line_pattern())) << "not a log line: " << line;
  }

  // Header.
  const std::vector<std::string> lines = split_lines(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("job cli-test: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("on cpu"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("fp8 tensorwise: ", 0), 0u) << lines[1];
  EXPECT_EQ(lines_starting_with(r.out, "training steps 1..30, 128 tokens per step").size(), 1u) << r.out;

  // A line at step 1, every log_every steps and the last; val on eval_every steps.
  const std::vector<StepLine> steps = parse_step_lines(r.out);
  std::vector<int64_t> reported;
  for (const StepLine& s : steps) reported.push_back(s.step);
  EXPECT_EQ(reported, (std::vector<int64_t>{1, 5, 10, 15, 20, 25, 30})) << r.out;
  for (const StepLine& s : steps) {
    EXPECT_EQ(s.total, 30) << s.text;
    EXPECT_EQ(!s.val.empty(), s.step % 10 == 0) << "val belongs on evaluation steps only: " << s.text;
    EXPECT_GT(std::stod(s.loss), 0.0) << s.text;
    EXPECT_GT(std::stod(s.lr), 0.0) << s.text;
    EXPECT_GT(std::stod(s.grad_norm), 0.0) << s.text;
    EXPECT_GT(s.tokens_per_second, 0.0) << s.text;
    EXPECT_GT(s.step_ms, 0.0) << s.text;
    // The model's weights, optimizer state and activations are all in use during a step.
    EXPECT_NE(s.peak_memory.find("iB"), std::string::npos) << s.text;
    EXPECT_NE(s.peak_memory.rfind("0 KiB", 0), 0u) << s.text;
  }
  ASSERT_EQ(steps.size(), 7u);
  EXPECT_LT(std::stod(steps.back().loss), std::stod(steps.front().loss)) << "the loss did not fall:\n" << r.out;
  // A byte-level model starts near ln(256) = 5.55.
  EXPECT_NEAR(std::stod(steps.front().loss), 5.55, 0.5) << steps.front().text;
  // Warmup to 3e-3 over 5 steps, cosine down to min_lr = lr / 10 at the last step.
  EXPECT_EQ(steps[0].lr, "6.00e-04");
  EXPECT_EQ(steps[1].lr, "3.00e-03");
  EXPECT_EQ(steps.back().lr, "3.00e-04");

  // Summary.
  const std::vector<std::string> done = lines_starting_with(r.out, "done: ");
  ASSERT_EQ(done.size(), 1u) << r.out;
  EXPECT_EQ(done[0].rfind("done: steps 1..30 in ", 0), 0u) << done[0];
  EXPECT_NE(done[0].find(", 3840 tokens ("), std::string::npos) << done[0];
  const std::vector<std::string> loss = lines_starting_with(r.out, "loss ");
  ASSERT_EQ(loss.size(), 1u) << r.out;
  EXPECT_EQ(loss[0].rfind("loss " + steps.front().loss + " -> " + steps.back().loss + " (", 0), 0u) << loss[0];
  EXPECT_NE(loss[0].find(", validation " + steps.back().val + " (best "), std::string::npos) << loss[0];
  EXPECT_TRUE(lines_starting_with(r.out, "stopped").empty()) << r.out;

  // Checkpoints every 10 steps, the newest 2 kept.
  const fs::path ckpt = dir_ / "ckpt";
  for (int64_t s : {10, 20, 30}) {
    const std::string want = "checkpoint at step " + std::to_string(s) + ": " + (ckpt / step_dir_name(s)).string();
    EXPECT_EQ(lines_starting_with(r.out, want).size(), 1u) << "no \"" << want << "\" in\n" << r.out;
  }
  EXPECT_EQ(step_dirs(ckpt), (std::vector<std::string>{step_dir_name(20), step_dir_name(30)}));
  for (int64_t s : {20, 30}) {
    EXPECT_TRUE(fs::is_regular_file(ckpt / step_dir_name(s) / "COMMITTED")) << s;
    EXPECT_TRUE(fs::is_regular_file(ckpt / step_dir_name(s) / kShard)) << s;
  }
  EXPECT_EQ(lines.back(), "last checkpoint: " + (ckpt / step_dir_name(30)).string());

  // The same job again without --resume would mix two runs in one checkpoint.dir.
  const RunResult again = train({"--config", job.string()}, "again");
  EXPECT_TRUE(again.exit.exited && again.exit.code == 2) << show(again);
  EXPECT_NE(again.err.find("already holds checkpoints (newest: step 30)"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;
  EXPECT_TRUE(parse_step_lines(again.out).empty()) << again.out;
  EXPECT_EQ(step_dirs(ckpt), (std::vector<std::string>{step_dir_name(20), step_dir_name(30)}));
}

// ---- 2. stopped by a signal, resumed bit for bit --------------------------------------

class Fp8TrainResumeTest : public Fp8TrainCliTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(Fp8TrainResumeTest, StoppedBySigintThenResumedMatchesAnUninterruptedRun) {
  JobOptions o;
  o.recipe = GetParam();
  o.steps = 150;  // ~1 s: long enough for the signal to land mid-run
  o.checkpoint_every = 10;

  // Run B: stopped by SIGINT once the step-10 checkpoint is written, so the stopped run
  // has evaluated and checkpointed on schedule before its own final evaluation and
  // checkpoint. Should the run finish before the signal lands (a very slow machine), try
  // again with more steps: the schedule depends on train.steps, so run A below uses the
  // final count.
  RunResult b1;
  int64_t stopped_at = 0;
  const fs::path ckpt_b = dir_ / "ckpt-b";
  for (int attempt = 0;; ++attempt) {
    fs::remove_all(ckpt_b);
    o.checkpoint_dir = "ckpt-b";
    const fs::path job_b = write_job("job-b.yaml", job_yaml(o));
    Subprocess child({FP8_TRAIN_BINARY, "--config", job_b.string()}, inherited_env(), dir_ / "b1.out", dir_ / "b1.err");
    ASSERT_TRUE(child.started()) << child.start_error();
    const bool checkpointed = child.wait_for_stdout(
        [](const std::string& out) { return out.find(": checkpoint at step 10: ") != std::string::npos; }, kRunLimit);
    ASSERT_TRUE(checkpointed) << "no step-10 checkpoint:\n" << child.stdout_text() << child.stderr_text();
    child.signal(SIGINT);
    b1.exit = child.wait(kRunLimit);
    b1.out = child.stdout_text();
    b1.err = child.stderr_text();
    if (b1.exit.exited && b1.exit.code == 0 && !lines_starting_with(b1.out, "done: ").empty() && attempt < 3) {
      std::printf("run finished before SIGINT landed at %lld steps; retrying with more\n",
                  static_cast<long long>(o.steps));
      o.steps *= 4;
      continue;
    }
    break;
  }
  ASSERT_TRUE(b1.exit.exited && b1.exit.code == 130) << show(b1);
  EXPECT_EQ(b1.err, "");
  {
    static const std::regex kStopped(R"(^stopped: steps 1\.\.(\d+) in .*)");
    const std::vector<std::string> stopped = lines_starting_with(b1.out, "stopped: ");
    ASSERT_EQ(stopped.size(), 1u) << b1.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(stopped[0], m, kStopped)) << stopped[0];
    stopped_at = std::stoll(m[1]);
    ASSERT_GT(stopped_at, 10);
    ASSERT_LT(stopped_at, o.steps);
    std::printf("stopped at step %lld of %lld\n", static_cast<long long>(stopped_at), static_cast<long long>(o.steps));
    EXPECT_TRUE(lines_starting_with(b1.out, "done").empty()) << b1.out;
  }
  const fs::path stop_dir = ckpt_b / step_dir_name(stopped_at);
  EXPECT_EQ(lines_starting_with(b1.out, "checkpoint at step " + std::to_string(stopped_at) + ": " + stop_dir.string())
                .size(),
            1u)
      << b1.out;
  EXPECT_TRUE(fs::is_regular_file(stop_dir / "COMMITTED")) << stop_dir;
  EXPECT_EQ(split_lines(b1.out).back(), "last checkpoint: " + stop_dir.string()) << b1.out;
  const std::vector<StepLine> b1_steps = parse_step_lines(b1.out);
  ASSERT_FALSE(b1_steps.empty());
  EXPECT_EQ(b1_steps.back().step, stopped_at) << "the step a run stops at is reported";

  // Run B again with --resume: continues after the checkpointed step, to the end.
  const fs::path job_b = dir_ / "job-b.yaml";
  const RunResult b2 = train({"--config", job_b.string(), "--resume"}, "b2");
  ASSERT_TRUE(b2.exit.exited && b2.exit.code == 0) << show(b2);
  EXPECT_EQ(b2.err, "");
  EXPECT_EQ(lines_starting_with(b2.out, "resumed from " + stop_dir.string()).size(), 1u) << b2.out;
  const std::string range = std::to_string(stopped_at + 1) + ".." + std::to_string(o.steps);
  EXPECT_EQ(lines_starting_with(b2.out, "training steps " + range + ",").size(), 1u) << b2.out;
  EXPECT_EQ(lines_starting_with(b2.out, "done: steps " + range + " in ").size(), 1u) << b2.out;
  const std::vector<StepLine> b2_steps = parse_step_lines(b2.out);
  ASSERT_FALSE(b2_steps.empty()) << b2.out;
  EXPECT_EQ(b2_steps.front().step, stopped_at + 1);
  EXPECT_EQ(b2_steps.back().step, o.steps);

  // Run A: the same job straight through, in its own checkpoint dir (--resume with
  // nothing to resume from starts at step 1).
  o.checkpoint_dir = "ckpt-a";
  const fs::path job_a = write_job("job-a.yaml", job_yaml(o));
  const RunResult a = train({"--config", job_a.string(), "--resume"}, "a");
  ASSERT_TRUE(a.exit.exited && a.exit.code == 0) << show(a);
  EXPECT_EQ(lines_starting_with(a.out, "no good checkpoint in " + (dir_ / "ckpt-a").string() + ": starting from step 1")
                .size(),
            1u)
      << a.out;
  EXPECT_TRUE(lines_starting_with(a.out, "resumed from").empty()) << a.out;
  const std::vector<StepLine> a_steps = parse_step_lines(a.out);
  ASSERT_FALSE(a_steps.empty());
  ASSERT_EQ(a_steps.back().step, o.steps);

  // Same numbers at every step both runs reported (val only where both evaluated).
  EXPECT_EQ(b2_steps.back().numbers(), a_steps.back().numbers()) << "final step differs after resume\nA: "
                                                                  << a_steps.back().text
                                                                  << "\nB: " << b2_steps.back().text;
  int compared = 0;
  for (const std::vector<StepLine>* b : {&b1_steps, &b2_steps}) {
    for (const StepLine& s : *b) {
      const StepLine* t = find_step(a_steps, s.step);
      if (t == nullptr) continue;
      ++compared;
      EXPECT_EQ(s.loss, t->loss) << "step " << s.step << "\nA: " << t->text << "\nB: " << s.text;
      EXPECT_EQ(s.lr, t->lr) << "step " << s.step;
      EXPECT_EQ(s.grad_norm, t->grad_norm) << "step " << s.step << "\nA: " << t->text << "\nB: " << s.text;
      if (!s.val.empty() && !t->val.empty()) {
        EXPECT_EQ(s.val, t->val) << "step " << s.step;
      }
    }
  }
  EXPECT_GE(compared, static_cast<int>(o.steps / 5) - 1);
  // The loss summary line of the resumed run covers its own steps only; its last loss
  // and validation match A's.
  const std::vector<std::string> a_loss = lines_starting_with(a.out, "loss ");
  const std::vector<std::string> b_loss = lines_starting_with(b2.out, "loss ");
  ASSERT_EQ(a_loss.size(), 1u);
  ASSERT_EQ(b_loss.size(), 1u);
  EXPECT_NE(b_loss[0].find("-> " + a_steps.back().loss + " ("), std::string::npos) << b_loss[0];

  // Bit for bit: the final checkpoints (weights, optimizer state, data position, fp8
  // scaling state) are the same bytes.
  const fs::path shard_a = dir_ / "ckpt-a" / step_dir_name(o.steps) / kShard;
  const fs::path shard_b = ckpt_b / step_dir_name(o.steps) / kShard;
  ASSERT_TRUE(fs::is_regular_file(shard_a)) << shard_a;
  ASSERT_TRUE(fs::is_regular_file(shard_b)) << shard_b;
  EXPECT_TRUE(read_file(shard_a) == read_file(shard_b)) << "final checkpoints differ: " << shard_a << " vs " << shard_b;
  EXPECT_EQ(read_file(shard_a.parent_path() / "COMMITTED"), read_file(shard_b.parent_path() / "COMMITTED"));

  // Resuming a finished job has nothing to do.
  const RunResult b3 = train({"--config", job_b.string(), "--resume"}, "b3");
  ASSERT_TRUE(b3.exit.exited && b3.exit.code == 0) << show(b3);
  EXPECT_EQ(lines_starting_with(b3.out, "resumed from " + shard_b.parent_path().string()).size(), 1u) << b3.out;
  EXPECT_EQ(lines_starting_with(b3.out, "nothing to do: the job's last step (" + std::to_string(o.steps) +
                                          ") is already done")
                .size(),
            1u)
      << b3.out;
  EXPECT_TRUE(parse_step_lines(b3.out).empty()) << b3.out;
  EXPECT_TRUE(lines_starting_with(b3.out, "training steps").empty()) << b3.out;

  // So does resuming with train.steps lowered below the checkpoint's step.
  const RunResult b4 =
      train({"--config", job_b.string(), "--resume", "--set", "train.steps=" + std::to_string(stopped_at)}, "b4");
  ASSERT_TRUE(b4.exit.exited && b4.exit.code == 0) << show(b4);
  EXPECT_EQ(lines_starting_with(b4.out, "nothing to do: resumed at step " + std::to_string(o.steps) +
                                          ", past the job's last step (" + std::to_string(stopped_at) + ")")
                .size(),
            1u)
      << b4.out;
  EXPECT_TRUE(parse_step_lines(b4.out).empty()) << b4.out;
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8TrainResumeTest, ::testing::Values("tensorwise", "delayed"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// --estimate prints a rank's memory by part and trains nothing: no checkpoint folder.
TEST_F(Fp8TrainCliTest, JsonLogLinesParseWithTimeLevelComponentAndMessage) {
  JobOptions o;
  o.steps = 10;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult r = train({"--config", job.string(), "--log-format", "json"}, "json");
  ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = raw_lines(r.out);
  ASSERT_FALSE(lines.empty());
  int steps = 0;
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not json: " << line;
    for (const char* key : {"time", "level", "component", "message"}) {
      ASSERT_TRUE(j.contains(key) && j.at(key).is_string()) << key << " missing from " << line;
    }
    EXPECT_EQ(j.at("component"), "fp8-train") << line;
    EXPECT_EQ(j.at("level"), "info") << line;
    if (j.at("message").get<std::string>().rfind("step ", 0) == 0) ++steps;
  }
  EXPECT_GT(steps, 0) << r.out;

  const RunResult bad = train({"--config", job.string(), "--log-format", "xml"}, "xml");
  EXPECT_TRUE(bad.exit.exited && bad.exit.code == 2) << show(bad);
  EXPECT_NE(bad.err.find("--log format \"xml\": expected text or json"), std::string::npos) << show(bad);
}

TEST_F(Fp8TrainCliTest, EstimatePrintsTheMemoryOfARankAndTrainsNothing) {
  JobOptions o;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult one = train({"--config", job.string(), "--estimate"}, "estimate");
  ASSERT_TRUE(one.exit.exited && one.exit.code == 0) << show(one);
  EXPECT_EQ(one.out.rfind("memory per rank (estimate, 1 rank): ", 0), 0u) << one.out;
  for (const char* part : {"parameters", "gradients", "optimizer", "activations", "fp8 casts"}) {
    EXPECT_NE(one.out.find(std::string("  ") + part), std::string::npos) << part << "\n" << one.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / o.checkpoint_dir)) << "--estimate made the checkpoint folder";
  const RunResult four = train({"--config", job.string(), "--estimate", "--nproc", "4", "--set",
                                "train.activation_checkpointing=full"},
                               "estimate4");
  ASSERT_TRUE(four.exit.exited && four.exit.code == 0) << show(four);
  EXPECT_EQ(four.out.rfind("memory per rank (estimate, 4 ranks): ", 0), 0u) << four.out;
  EXPECT_NE(four.out.find("FSDP gathers"), std::string::npos) << four.out;
  EXPECT_NE(four.out.find("activation checkpointing full"), std::string::npos) << four.out;
  const RunResult bad = train({"--config", job.string(), "--estimate", "--set", "train.activation_checkpointing=most"},
                              "estimate-bad");
  EXPECT_TRUE(bad.exit.exited && bad.exit.code == 2) << show(bad);
  EXPECT_NE(bad.err.find("train.activation_checkpointing"), std::string::npos) << bad.err;
}

TEST_F(Fp8TrainCliTest, SigtermAlsoStopsWithACheckpoint) {
  JobOptions o;
  o.steps = 100000;  // minutes: only the signal ends it
  o.checkpoint_every = 0;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  Subprocess child({FP8_TRAIN_BINARY, "--config", job.string()}, inherited_env(), dir_ / "run.out", dir_ / "run.err");
  ASSERT_TRUE(child.started()) << child.start_error();
  ASSERT_TRUE(child.wait_for_stdout(
      [](const std::string& out) { return out.find(": step ") != std::string::npos; }, kRunLimit))
      << child.stdout_text() << child.stderr_text();
  child.signal(SIGTERM);
  const ExitInfo exit = child.wait(kRunLimit);
  const std::string out = child.stdout_text();
  ASSERT_TRUE(exit.exited && exit.code == 130) << exit.describe() << "\n" << out << child.stderr_text();
  const std::vector<std::string> stopped = lines_starting_with(out, "stopped: steps 1..");
  ASSERT_EQ(stopped.size(), 1u) << out;
  const std::vector<StepLine> steps = parse_step_lines(out);
  ASSERT_FALSE(steps.empty());
  const fs::path dir = dir_ / "ckpt" / step_dir_name(steps.back().step);
  EXPECT_EQ(lines_starting_with(out, "checkpoint at step " + std::to_string(steps.back().step) + ": " + dir.string())
                .size(),
            1u)
      << out;
  EXPECT_TRUE(fs::is_regular_file(dir / "COMMITTED")) << dir;
}

// A run whose loss stops being finite exits with the divergence code (3), which the
// coordinator does not restart by default: the same checkpoint would diverge again.
TEST_F(Fp8TrainCliTest, ADivergedRunExitsWithTheDivergenceCode) {
  JobOptions o;
  o.checkpoint_every = 0;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult r = train({"--config", job.string(), "--set", "train.lr=1e30", "--set", "train.grad_clip=0", "--set",
                             "train.warmup_steps=0"},
                            "diverged");
  EXPECT_TRUE(r.exit.exited && r.exit.code == 3) << show(r);
  EXPECT_NE(r.err.find("training diverged at step"), std::string::npos) << r.err;
}

// ---- 3. bad input --------------------------------------------------------------------

TEST_F(Fp8TrainCliTest, BadCommandLinesAndJobFilesExitWithoutTraining) {
  const fs::path good = write_job("job.yaml", job_yaml({}));
  struct Case {
    std::string name;
    std::vector<std::string> args;
    int code;                           // expected exit status; -1: any failure but 130
    std::vector<std::string> stderr_has;
    std::map<std::string, std::string> env = {};  // fp8-train's environment beside child_env()
  };
  std::vector<Case> cases;
  cases.push_back({"no arguments", {}, 2, {"--config"}});
  cases.push_back({"--resume without --config", {"--resume"}, 2, {"--config"}});
  cases.push_back({"unknown option", {"--config", good.string(), "--bogus"}, 2, {"--bogus"}});
  cases.push_back({"config file missing", {"--config", (dir_ / "nope.yaml").string()}, 2, {"nope.yaml"}});
  cases.push_back({"unknown --set field", {"--config", good.string(), "--set", "train.stepz=3"}, 2, {"train.stepz"}});
  cases.push_back({"malformed --set", {"--config", good.string(), "--set", "train.steps"}, 2, {"train.steps"}});
  cases.push_back({"bad --set value", {"--config", good.string(), "--set", "train.steps=many"}, 2, {"train.steps"}});
  cases.push_back({"a warm start without the coordinator",
                   {"--config", good.string(), "--set", "fp8.recipe=delayed", "--set", "fp8.amax_init_from=job-1"},
                   2,
                   {"fp8.amax_init_from: the histories it names are kept by the coordinator"}});
  {
    JobOptions o;
    o.extra_train_line = "lerning_rate: 0.1";
    const std::string yaml = job_yaml(o);
    const fs::path job = write_job("unknown-key.yaml", yaml);
    const std::string before = yaml.substr(0, yaml.find("lerning_rate"));
    const int line = 1 + static_cast<int>(std::count(before.begin(), before.end(), '\n'));
    cases.push_back(
        {"unknown key",
         {"--config", job.string()},
         2,
         {"unknown-key.yaml:" + std::to_string(line) + ":", "lerning_rate"}});
  }
  {
    std::string yaml = job_yaml({});
    yaml.replace(yaml.find("n_heads: 2"), 10, "n_heads: 3");  // does not divide dim 32
    const fs::path job = write_job("bad-heads.yaml", yaml);
    const std::string before = yaml.substr(0, yaml.find("n_heads: 3"));
    const int line = 1 + static_cast<int>(std::count(before.begin(), before.end(), '\n'));
    cases.push_back(
        {"invalid value", {"--config", job.string()}, 2, {"bad-heads.yaml:" + std::to_string(line) + ":", "n_heads"}});
  }
  cases.push_back({"bad FP8_CUDA_ATTENTION",
                   {"--config", good.string()},
                   2,
                   {"FP8_CUDA_ATTENTION", "'tensor'", "mma or simt"},
                   {{"FP8_CUDA_ATTENTION", "tensor"}}});
  cases.push_back({"bad FP8_NCCL_HOST_WAIT", {"--config", good.string()}, 2, {"FP8_NCCL_HOST_WAIT"},
                   {{"FP8_NCCL_HOST_WAIT", "yes"}}});
  {
    JobOptions o;
    o.data_path = "data/missing.txt";
    const fs::path job = write_job("missing-data.yaml", job_yaml(o));
    cases.push_back({"data.path missing", {"--config", job.string()}, -1, {(dir_ / "data/missing.txt").string()}});
  }

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const RunResult r = train(c.args, "case" + std::to_string(i), c.env);
    ASSERT_TRUE(r.exit.exited) << show(r);
    if (c.code >= 0) {
      EXPECT_EQ(r.exit.code, c.code) << show(r);
    } else {
      EXPECT_NE(r.exit.code, 0) << show(r);
      EXPECT_NE(r.exit.code, 130) << show(r);
    }
    for (const std::string& want : c.stderr_has) {
      EXPECT_NE(r.err.find(want), std::string::npos) << "stderr lacks \"" << want << "\"\n" << show(r);
    }
    EXPECT_TRUE(parse_step_lines(r.out).empty()) << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "ckpt")) << "a failed start made the checkpoint dir";
    EXPECT_FALSE(fs::exists(dir_ / "checkpoints")) << "a failed start made a checkpoint dir";
  }
}

// ---- 4. a damaged checkpoint ---------------------------------------------------------

uint64_t load_le64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

TEST_F(Fp8TrainCliTest, ResumeSkipsADamagedNewestCheckpoint) {
  const fs::path job = write_job("job.yaml", job_yaml({}));  // 30 steps, checkpoint every 10, keep 3
  const RunResult first = train({"--config", job.string()}, "first");
  ASSERT_TRUE(first.exit.exited && first.exit.code == 0) << show(first);
  const fs::path ckpt = dir_ / "ckpt";
  ASSERT_EQ(step_dirs(ckpt), (std::vector<std::string>{step_dir_name(10), step_dir_name(20), step_dir_name(30)}));

  // Flip one byte in the middle of step 30's payloads (between the 16-byte header and the
  // index, whose offset the 40-byte footer starts with); the file keeps its size, so
  // only reading the payload finds the damage.
  const fs::path shard = ckpt / step_dir_name(30) / kShard;
  const std::string original = read_file(shard);
  ASSERT_GT(original.size(), 16u + 40u);
  const uint64_t index_offset = load_le64(original, original.size() - 40);
  ASSERT_GT(index_offset, 16u);
  ASSERT_LT(index_offset, original.size());
  std::string damaged = original;
  const size_t at = static_cast<size_t>(16 + (index_offset - 16) / 2);
  damaged[at] = static_cast<char>(damaged[at] ^ 0x5a);
  write_text(shard, damaged);

  const RunResult r = train({"--config", job.string(), "--resume"}, "resume");
  ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> warnings = lines_starting_with(r.out, "warning: ");
  ASSERT_EQ(warnings.size(), 1u) << r.out;
  EXPECT_NE(warnings[0].find(step_dir_name(30)), std::string::npos) << "the warning names the damaged checkpoint: "
                                                                  << warnings[0];
  const std::string good = (ckpt / step_dir_name(20)).string();
  EXPECT_EQ(lines_starting_with(r.out, "resumed from " + good).size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "training steps 21..30,").size(), 1u) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "done: steps 21..30 in ").size(), 1u) << r.out;
  // The warning comes before training starts.
  const std::vector<std::string> lines = split_lines(r.out);
  const auto warning_at = std::find(lines.begin(), lines.end(), warnings[0]);
  const auto first_step =
      std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("step ", 0) == 0; });
  EXPECT_LT(warning_at, first_step);

  // Steps 21..30 again give the same numbers, and a checkpoint at step 30 with the bytes
  // the damaged one had before.
  const std::vector<StepLine> before = parse_step_lines(first.out), after = parse_step_lines(r.out);
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.back().step, 30);
  EXPECT_EQ(after.back().numbers(), before.back().numbers())
      << "A: " << before.back().text << "\nB: " << after.back().text;
  EXPECT_TRUE(fs::is_regular_file(shard.parent_path() / "COMMITTED"));
  EXPECT_TRUE(read_file(shard) == original) << "the rewritten step-30 checkpoint differs from the first run's";
  EXPECT_EQ(step_dirs(ckpt), (std::vector<std::string>{step_dir_name(10), step_dir_name(20), step_dir_name(30)}));
}

// ---- 5. several ranks (FSDP) -----------------------------------------------------------

// --nproc 2: two local ranks, one log (rank 0's), sharded checkpoints committed once both
// shards are durable.
TEST_F(Fp8TrainCliTest, NprocTrainsShardedWithOneLogAndShardedCheckpoints) {
  JobOptions o;
  o.steps = 20;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult r = train({"--nproc", "2", "--config", job.string()}, "run");
  ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  EXPECT_EQ(r.err, "") << "a good run writes nothing to stderr";
  EXPECT_EQ(lines_starting_with(r.out, "job cli-test: ").size(), 1u) << "only rank 0 logs:\n" << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "fsdp over 2 ranks; all-gather of 7 weights in fp8").size(), 1u) << r.out;
  // batch_size is per rank: 2 ranks x 4 sequences x 32 tokens.
  EXPECT_EQ(lines_starting_with(r.out, "training steps 1..20, 256 tokens per step").size(), 1u) << r.out;
  const std::vector<StepLine> steps = parse_step_lines(r.out);
  std::vector<int64_t> reported;
  for (const StepLine& s : steps) reported.push_back(s.step);
  EXPECT_EQ(reported, (std::vector<int64_t>{1, 5, 10, 15, 20})) << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "  comm  all-gather ").size(), steps.size()) << r.out;
  ASSERT_FALSE(steps.empty());
  EXPECT_LT(std::stod(steps.back().loss), std::stod(steps.front().loss)) << r.out;
  for (int64_t step : {10, 20}) {
    const fs::path d = dir_ / "ckpt" / step_dir_name(step);
    EXPECT_TRUE(fs::is_regular_file(d / "COMMITTED")) << d;
    EXPECT_TRUE(fs::is_regular_file(d / "rank-00000-of-00002.ckpt")) << d;
    EXPECT_TRUE(fs::is_regular_file(d / "rank-00001-of-00002.ckpt")) << d;
  }
}

// Ctrl-C reaches the launcher, which forwards it once to every rank: they agree on a step,
// checkpoint it and exit 130; --resume --nproc 2 then reproduces the uninterrupted run.
TEST_F(Fp8TrainCliTest, NprocStopsEveryRankAtOneStepAndResumesBitForBit) {
  JobOptions o;
  o.steps = 200;
  o.checkpoint_every = 10;
  o.checkpoint_dir = "ckpt-b";
  const fs::path job_b = write_job("job-b.yaml", job_yaml(o));
  Subprocess child({FP8_TRAIN_BINARY, "--nproc", "2", "--config", job_b.string()}, inherited_env(), dir_ / "b1.out",
                   dir_ / "b1.err");
  ASSERT_TRUE(child.started()) << child.start_error();
  ASSERT_TRUE(child.wait_for_stdout(
      [](const std::string& out) { return out.find(": checkpoint at step 10: ") != std::string::npos; }, kRunLimit))
      << child.stdout_text() << child.stderr_text();
  child.signal(SIGINT);
  const ExitInfo stopped = child.wait(kRunLimit);
  const std::string b1 = child.stdout_text();
  ASSERT_TRUE(stopped.exited && stopped.code == 130) << stopped.describe() << "\n" << b1 << child.stderr_text();
  const std::vector<StepLine> b1_steps = parse_step_lines(b1);
  ASSERT_FALSE(b1_steps.empty());
  const int64_t at = b1_steps.back().step;
  ASSERT_LT(at, o.steps) << "finished before the signal landed";
  const fs::path stop_dir = dir_ / "ckpt-b" / step_dir_name(at);
  EXPECT_TRUE(fs::is_regular_file(stop_dir / "COMMITTED")) << b1;
  EXPECT_TRUE(fs::is_regular_file(stop_dir / "rank-00001-of-00002.ckpt")) << b1;

  const RunResult b2 = train({"--nproc", "2", "--config", job_b.string(), "--resume"}, "b2");
  ASSERT_TRUE(b2.exit.exited && b2.exit.code == 0) << show(b2);
  EXPECT_EQ(lines_starting_with(b2.out, "resumed from " + stop_dir.string()).size(), 1u) << b2.out;

  o.checkpoint_dir = "ckpt-a";
  const fs::path job_a = write_job("job-a.yaml", job_yaml(o));
  const RunResult a = train({"--nproc", "2", "--config", job_a.string()}, "a");
  ASSERT_TRUE(a.exit.exited && a.exit.code == 0) << show(a);
  const std::vector<StepLine> a_steps = parse_step_lines(a.out), b2_steps = parse_step_lines(b2.out);
  ASSERT_FALSE(b2_steps.empty());
  EXPECT_EQ(b2_steps.back().numbers(), a_steps.back().numbers()) << "A: " << a_steps.back().text << "\nB: "
                                                                  << b2_steps.back().text;
  for (int rank : {0, 1}) {
    const std::string shard = "rank-0000" + std::to_string(rank) + "-of-00002.ckpt";
    EXPECT_TRUE(read_file(dir_ / "ckpt-a" / step_dir_name(o.steps) / shard) ==
                read_file(dir_ / "ckpt-b" / step_dir_name(o.steps) / shard))
        << "rank " << rank << "'s final shards differ";
  }
}

// A checkpoint of 2 ranks resumes on 4, and theirs in one process: each says so, trains
// on from the step it loaded, and writes its checkpoints at its own world size.
TEST_F(Fp8TrainCliTest, ResumesAtAnotherWorldSize) {
  JobOptions o;
  o.steps = 10;
  o.checkpoint_every = 5;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult two = train({"--nproc", "2", "--config", job.string()}, "two");
  ASSERT_TRUE(two.exit.exited && two.exit.code == 0) << show(two);

  const RunResult four = train({"--nproc", "4", "--config", job.string(), "--resume", "--set", "train.steps=15",
                                "--set", "train.batch_size=2"},
                               "four");
  ASSERT_TRUE(four.exit.exited && four.exit.code == 0) << show(four);
  EXPECT_EQ(lines_starting_with(four.out, "resumed from " + (dir_ / "ckpt" / step_dir_name(10)).string()).size(), 1u)
      << four.out;
  EXPECT_EQ(lines_starting_with(four.out, "warning: checkpoint step 10 was written by 2 ranks; its parameters and "
                                        "optimizer state are split anew over this job's 4")
                .size(),
            1u)
      << four.out;
  const std::vector<StepLine> four_steps = parse_step_lines(four.out);
  ASSERT_FALSE(four_steps.empty());
  EXPECT_EQ(four_steps.front().step, 11) << four.out;
  EXPECT_TRUE(fs::is_regular_file(dir_ / "ckpt" / step_dir_name(15) / "rank-00003-of-00004.ckpt"));

  const RunResult one = train(
      {"--config", job.string(), "--resume", "--set", "train.steps=20", "--set", "train.batch_size=8"}, "one");
  ASSERT_TRUE(one.exit.exited && one.exit.code == 0) << show(one);
  EXPECT_EQ(lines_starting_with(one.out, "warning: checkpoint step 15 was written by 4 ranks").size(), 1u) << one.out;
  const std::vector<StepLine> one_steps = parse_step_lines(one.out);
  ASSERT_FALSE(one_steps.empty());
  EXPECT_EQ(one_steps.back().step, 20) << one.out;
  EXPECT_LT(std::stod(one_steps.back().loss), std::stod(parse_step_lines(two.out).front().loss)) << one.out;
  EXPECT_TRUE(fs::is_regular_file(dir_ / "ckpt" / step_dir_name(20) / kShard));
}

// Multi-rank mistakes: exit 2 before any rank starts; a rank whose peer never comes fails
// within --timeout, naming the peer, instead of waiting forever.
TEST_F(Fp8TrainCliTest, MultiRankMisuseFailsClearly) {
  JobOptions o;
  const fs::path job = write_job("job.yaml", job_yaml(o));
  const RunResult no_launch = train({"--config", job.string(), "--set", "resources.world_size=2"}, "no-launch");
  EXPECT_TRUE(no_launch.exit.exited && no_launch.exit.code == 2) << show(no_launch);
  EXPECT_NE(no_launch.err.find("--nproc 2"), std::string::npos) << no_launch.err;

  const RunResult bad_rank =
      train({"--config", job.string(), "--rank", "2", "--world-size", "2", "--rendezvous", (dir_ / "r").string()},
            "bad-rank");
  EXPECT_TRUE(bad_rank.exit.exited && bad_rank.exit.code == 2) << show(bad_rank);

  const RunResult alone = train({"--config", job.string(), "--rank", "0", "--world-size", "2", "--rendezvous",
                                 (dir_ / "rdzv").string(), "--timeout", "2"},
                                "alone");
  EXPECT_TRUE(alone.exit.exited && alone.exit.code == 5) << "the lost-peer code\n" << show(alone);
  EXPECT_NE(alone.err.find("fp8-train [rank 0]: "), std::string::npos) << alone.err;
  EXPECT_NE(alone.err.find("rank 1"), std::string::npos) << alone.err;
  EXPECT_FALSE(fs::exists(dir_ / "ckpt")) << "a failed rendezvous writes no checkpoint";
}

}  // namespace
}  // namespace fp8::cli_test
