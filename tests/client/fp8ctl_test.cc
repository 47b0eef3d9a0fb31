// fp8ctl end to end: the real binary against a real fp8-coordinator and two fp8-worker
// daemons on loopback (tests/system/control_plane.h), checking what a user sees: the job
// id on stdout, tables, JSON and YAML, and the exit codes.
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"
#include "tests/system/control_plane.h"

#ifndef FP8CTL_BINARY
#error "FP8CTL_BINARY must name the fp8ctl executable"
#endif

namespace fp8::system_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr milliseconds kCommandLimit{60'000};

// A tiny job in the shape of ControlPlane::spec, written to <dir>/<name>.yaml, with the
// data path given (relative to the file).
fs::path write_job(const fs::path& dir, const std::string& name, int64_t steps, int world_size,
                  const std::string& data_path = "corpus.txt", const std::string& recipe = "tensorwise") {
  std::ostringstream y;
  y << "name: " << name
    << "\nmodel: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n"
       "data: {path: "
    << data_path
    << ", seq_len: 32, val_fraction: 0.05}\n"
       "train: {steps: "
    << steps
    << ", batch_size: 4, lr: 3e-3, warmup_steps: 2, log_every: 5, eval_every: 0}\n"
       "fp8: {recipe: "
    << recipe << "}\ncheckpoint: {dir: ckpt/" << name << ", every: " << steps
    << ", keep: 1}\n"
       "resources: {device: cpu, world_size: "
    << world_size << ", cpus_per_rank: 1}\nrestarts: {max_restarts: 0, backoff_seconds: 0}\n";
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(file) << y.str();
  return file;
}

class Fp8ctl {
 public:
  Fp8ctl(const fs::path& dir, std::map<std::string, std::string> env) : dir_(dir), env_(std::move(env)) {}

  cli_test::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), FP8CTL_BINARY);
    const std::string n = std::to_string(++runs_);
    return cli_test::run(args, env_, dir_ / ("fp8ctl-" + n + ".out"), dir_ / ("fp8ctl-" + n + ".err"),
                         kCommandLimit);
  }
  std::unique_ptr<cli_test::Subprocess> start(std::vector<std::string> args) {
    args.insert(args.begin(), FP8CTL_BINARY);
    const std::string n = std::to_string(++runs_);
    return std::make_unique<cli_test::Subprocess>(args, env_, dir_ / ("fp8ctl-" + n + ".out"),
                                                  dir_ / ("fp8ctl-" + n + ".err"));
  }

 private:
  fs::path dir_;
  std::map<std::string, std::string> env_;
  int runs_ = 0;
};

// Runs `argv` with a pseudo-terminal as its stdout (isatty holds, as in a person's shell),
// the environment plus `env`; returns what it wrote (the terminal's "\r\n" read as "\n")
// and its exit code (-1 if it did not exit within `limit`).
std::pair<std::string, int> run_in_terminal(const std::vector<std::string>& argv,
                                          const std::map<std::string, std::string>& env,
                                          std::chrono::milliseconds limit) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    merged[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  // Built before fork: the child only execs.
  std::vector<char*> envp, args;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return {"forkpty failed", -1};
  if (pid == 0) {
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: the child closed the terminal
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return {out, -1};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t at = out.find("\r\n"); at != std::string::npos; at = out.find("\r\n", at)) out.erase(at, 1);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string show(const cli_test::RunResult& r) {
  return r.exit.describe() + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

bool exited(const cli_test::RunResult& r, int code) { return r.exit.exited && r.exit.code == code; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The same environment for every run: the test's coordinator and admin token, and nothing
// inherited from the developer's shell.
std::map<std::string, std::string> cli_env(const ControlPlane& cp) {
  return {{"FP8_COORDINATOR", "127.0.0.1:" + std::to_string(cp.port())},
          {"FP8_TOKEN", ""},
          {"FP8_TOKEN_FILE", (cp.dir() / "fp8-admin.token").string()},
          {"HOME", cp.dir().string()}};
}

TEST(Fp8ctlTest, JobsEndToEnd) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  Fp8ctl ctl(cp.dir(), cli_env(cp));

  // submit --follow: the id first, then the events; exit 0 for SUCCEEDED.
  const fs::path ok = write_job(cp.dir(), "ok", 10, 2);
  cli_test::RunResult r = ctl.run({"submit", ok.string(), "--follow"});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "job-1") << show(r);
  EXPECT_TRUE(contains(r.out, "attempt 1 started")) << show(r);
  EXPECT_TRUE(contains(r.out, "step 10/10")) << show(r);
  EXPECT_TRUE(contains(r.out, "-> SUCCEEDED")) << show(r);
  EXPECT_FALSE(contains(r.out, "\r")) << "not a terminal: no carriage returns\n" << show(r);

  // The summary after the final state: loss from first to last report, tokens, time.
  const size_t final_line = r.out.find("-> SUCCEEDED");
  EXPECT_LT(final_line, r.out.find("Summary:\n")) << show(r);
  for (const char* part : {"  outcome     SUCCEEDED at step 10/10\n", "  loss        ", " -> ", " -> 10)\n",
                           "  validation  ", "  tokens      ", "  wall time   0:", "  restarts    0\n"}) {
    EXPECT_TRUE(contains(r.out.substr(final_line), part)) << part << "\n" << show(r);
  }

  // follow on a finished job replays it and exits with its outcome.
  r = ctl.run({"follow", "job-1"});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  // On a terminal: a bar redrawn in place, left above the final state line, no redraw after.
  {
    const auto [text, code] = run_in_terminal({FP8CTL_BINARY, "follow", "job-1"}, cli_env(cp), kCommandLimit);
    EXPECT_EQ(code, 0) << text;
    EXPECT_TRUE(contains(text, "\r\x1b[K[############") && contains(text, "] step 10/10 (100%)")) << text;
    const size_t state = text.find("state RUNNING -> SUCCEEDED");
    ASSERT_NE(state, std::string::npos) << text;
    EXPECT_LT(text.rfind("] step 10/10"), state) << text;
    EXPECT_EQ(text.find('\r', state), std::string::npos) << text;
    EXPECT_LT(state, text.find("Summary:\n")) << text;
  }

  // list: table, json, yaml, filters.
  r = ctl.run({"list"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* column : {"ID", "NAME", "OWNER", "STATE", "PROGRESS", "RECIPE", "WORLD", "SUBMITTED", "AGE"}) {
    EXPECT_TRUE(contains(r.out, column)) << column << "\n" << show(r);
  }
  EXPECT_TRUE(contains(r.out, "job-1")) << show(r);
  EXPECT_TRUE(contains(r.out, "SUCCEEDED")) << show(r);
  EXPECT_TRUE(contains(r.out, "10/10")) << show(r);
  EXPECT_TRUE(contains(r.out, "tensorwise")) << show(r);
  r = ctl.run({"list", "--output", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "\"id\": \"job-1\"")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"state\": \"SUCCEEDED\"")) << show(r);
  // Real numbers for int64s, times as RFC 3339 UTC strings, nothing \u-escaped.
  EXPECT_TRUE(contains(r.out, "\"last_checkpoint_step\": 10,")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"step\": 10,")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"created_time\": \"20")) << show(r);
  EXPECT_TRUE(contains(r.out, "Z\",\n")) << show(r);
  EXPECT_FALSE(contains(r.out, "_unix_ms")) << show(r);
  EXPECT_FALSE(contains(r.out, "\\u")) << show(r);
  r = ctl.run({"list", "-o", "wide"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* column : {"ID", "PROGRESS", "DEVICE", "PRIORITY", "LOSS", "ATTEMPTS", "RESTARTS LEFT", "CHECKPOINT",
                             "FINISHED", "REASON"}) {
    EXPECT_TRUE(contains(r.out, column)) << column << "\n" << show(r);
  }
  EXPECT_TRUE(contains(r.out, "step 10")) << show(r);
  r = ctl.run({"list", "-o", "name"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out, "job/job-1\n") << show(r);
  r = ctl.run({"list", "-o", "yaml", "--all-pages"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "jobs:\n- id: job-1\n")) << show(r);  // fields in .proto order
  EXPECT_TRUE(contains(r.out, "  state: SUCCEEDED\n")) << show(r);
  r = ctl.run({"list", "--state", "running", "--state", "queued"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_FALSE(contains(r.out, "job-1")) << show(r);
  r = ctl.run({"list", "--state", "bogus"});
  EXPECT_TRUE(exited(r, 2)) << show(r);

  // describe: spec summary, attempts with their ranks, checkpoint, metrics, numerics.
  r = ctl.run({"describe", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* part : {"State:      SUCCEEDED", "dim 32", "recipe      tensorwise", "world       2 x cpu",
                           "mesh        2 data-parallel x 1 tensor-parallel ranks", "steps       10",
                           "Checkpoint: step 10", "#1 SUCCEEDED", "Metrics (step 10", "loss ", "Numerics:",
                           "memory      per rank: estimate ", ", measured peak ", "(rank 0, step 10)"}) {
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << show(r);
  }
  r = ctl.run({"describe", "job-1", "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "\"job\": {")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"numerics_events\": [")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"resumed_from_step\": 0,")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"finished_time\": \"20")) << show(r);
  r = ctl.run({"describe", "job-1", "-o", "name"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out, "job/job-1\n") << show(r);
  r = ctl.run({"describe", "job-1", "-o", "wide"});  // no wider describe
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "expected table, name, json or yaml, not 'wide'")) << show(r);

  // logs: the workers forward the ranks' output.
  r = ctl.run({"logs", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "[rank 0] ")) << show(r);
  r = ctl.run({"logs", "job-1", "--rank", "0", "--tail", "3"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_FALSE(contains(r.out, "[rank")) << show(r);
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 1) << show(r);
  EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 3) << show(r);
  // -f on a final job prints every line once, in the stored order, and returns; from
  // --tail 1 only the last line (no older line after it, no line twice).
  const cli_test::RunResult every = ctl.run({"logs", "job-1", "--tail", "10000"});
  ASSERT_TRUE(exited(every, 0)) << show(every);
  r = ctl.run({"logs", "job-1", "-f", "--tail", "10000"});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out, every.out);
  r = ctl.run({"logs", "job-1", "-f", "--tail", "1"});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  const std::string last_line = every.out.substr(every.out.rfind('\n', every.out.size() - 2) + 1);
  EXPECT_EQ(r.out, last_line) << show(r);
  r = ctl.run({"logs", "job-1", "-o", "yaml"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "lines:\n- ")) << show(r);

  // workers: both registered workers, idle now that job-1 has ended.
  r = ctl.run({"workers"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* column : {"NAME", "DEVICE", "ADDRESS", "STATE", "JOB/RANK", "LAST HEARTBEAT"}) {
    EXPECT_TRUE(contains(r.out, column)) << column << "\n" << show(r);
  }
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << "a header and two workers\n" << show(r);
  EXPECT_TRUE(contains(r.out, " ago")) << show(r);
  r = ctl.run({"workers", "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  size_t idle = 0;
  for (size_t at = r.out.find("\"state\": \"IDLE\""); at != std::string::npos;
       at = r.out.find("\"state\": \"IDLE\"", at + 1)) {
    ++idle;
  }
  EXPECT_EQ(idle, 2u) << show(r);
  EXPECT_TRUE(contains(r.out, "\"worker_id\": ")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"last_heartbeat_time\": \"20")) << show(r);
  r = ctl.run({"workers", "-o", "wide"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "HEARTBEAT AT")) << show(r);
  r = ctl.run({"workers", "-o", "name"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << show(r);
  EXPECT_EQ(r.out.rfind("worker/", 0), 0u) << show(r);

  // version: this fp8ctl's and the running coordinator's build, and the protocol.
  r = ctl.run({"version"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "client  0.")) << show(r);
  EXPECT_TRUE(contains(r.out, "server  0.")) << show(r);
  EXPECT_TRUE(contains(r.out, "protocol fp8.v1")) << show(r);
  EXPECT_TRUE(contains(r.out, "(127.0.0.1:" + std::to_string(cp.port()) + ")")) << show(r);
  r = ctl.run({"version", "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "\"server\": {")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"protocol\": \"fp8.v1\"")) << show(r);

  // amax: a delayed-scaling job has histories per layer and operand; job-1 (tensorwise) none.
  const fs::path delayed = write_job(cp.dir(), "delayed", 10, 1, "corpus.txt", "delayed");
  r = ctl.run({"submit", delayed.string(), "--follow"});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  const std::string delayed_id = r.out.substr(0, r.out.find('\n'));
  const std::string delayed_followed = r.out;
  r = ctl.run({"amax", delayed_id});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* part : {"LAYER", "OPERAND", "AMAX", "HISTORY MAX", "SCALE", "LEN", " input ", " weight ",
                           " grad_output ", "amax histories at step "}) {
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << show(r);
  }
  r = ctl.run({"amax", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "job-1 has no amax histories")) << show(r);

  // events: every numerics event, one line each; describe counts them by kind, layer and
  // operand (the same total either way).
  r = ctl.run({"events", delayed_id, "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  size_t listed = 0;
  for (size_t at = r.out.find("\"numerics\": {"); at != std::string::npos; at = r.out.find("\"numerics\": {", at + 1)) {
    ++listed;
  }
  r = ctl.run({"events", delayed_id});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  if (listed == 0) {
    EXPECT_TRUE(contains(r.out, delayed_id + " has no numerics events")) << show(r);
  } else {
    EXPECT_EQ(static_cast<size_t>(std::count(r.out.begin(), r.out.end(), '\n')), listed + 1) << show(r);
    // describe: a line per group with its count; follow printed each group's first event
    // only, and the same groups in its summary.
    const cli_test::RunResult described = ctl.run({"describe", delayed_id});
    const std::string head = "Numerics:   " + std::to_string(listed) + " events of ";
    ASSERT_TRUE(contains(described.out, head)) << show(described);
    const size_t kinds = std::stoul(described.out.substr(described.out.find(head) + head.size()));
    size_t printed = 0;
    for (size_t at = delayed_followed.find("  numerics: "); at != std::string::npos;
         at = delayed_followed.find("  numerics: ", at + 1)) {
      ++printed;
    }
    EXPECT_EQ(printed, kinds) << delayed_followed;
    EXPECT_TRUE(contains(delayed_followed, "  numerics    " + std::to_string(listed) + " events of " +
                                               std::to_string(kinds) + " kinds"))
        << delayed_followed;
  }
  r = ctl.run({"events", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  r = ctl.run({"events", "job-999"});
  EXPECT_TRUE(exited(r, 6)) << show(r);

  // plot: one SVG with both jobs' lines; only .svg is written.
  const fs::path svg = cp.dir() / "loss.svg";
  r = ctl.run({"plot", "job-1", delayed_id, "--out", svg.string()});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, svg.string())) << show(r);
  {
    std::ifstream in(svg);
    ASSERT_TRUE(in.good()) << svg;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.rfind("<svg", 0), 0u) << text.substr(0, 200);
    EXPECT_TRUE(contains(text, "<polyline")) << text;
    EXPECT_TRUE(contains(text, "job-1 ok (tensorwise)")) << text;
    EXPECT_TRUE(contains(text, delayed_id + " delayed (delayed)")) << text;
  }
  // plot as PNG: the same chart drawn by librsvg at twice the SVG's size, on white.
  const fs::path png = cp.dir() / "loss.png";
  r = ctl.run({"plot", "job-1", delayed_id, "--out", png.string()});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  {
    std::ifstream in(png, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 24u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    EXPECT_EQ(bytes.substr(12, 4), "IHDR");
    const auto be32 = [&](size_t at) {
      return (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at])) << 24) |
             (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 1])) << 16) |
             (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 2])) << 8) |
             static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 3]));
    };
    std::ifstream svg_in(svg);
    const std::string svg_text((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
    const auto attribute = [&](const std::string& name) {
      const size_t at = svg_text.find(name + "=\"");
      return at == std::string::npos ? 0 : std::stoi(svg_text.substr(at + name.size() + 2));
    };
    EXPECT_EQ(be32(16), static_cast<uint32_t>(2 * attribute("width")));
    EXPECT_EQ(be32(20), static_cast<uint32_t>(2 * attribute("height")));
  }
  // plot as CSV: a row per job and step, by the file's extension or -o csv (to stdout).
  const fs::path csv = cp.dir() / "loss.csv";
  r = ctl.run({"plot", "job-1", delayed_id, "--out", csv.string()});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  {
    std::ifstream in(csv);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.rfind("job_id,name,recipe,step,loss,val_loss,tokens_per_second\n", 0), 0u) << text;
    EXPECT_TRUE(contains(text, "\njob-1,ok,tensorwise,10,")) << text;
    EXPECT_TRUE(contains(text, "\n" + delayed_id + ",delayed,delayed,10,")) << text;
  }
  r = ctl.run({"plot", "job-1", "-o", "csv", "--out", "-"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out.rfind("job_id,", 0), 0u) << show(r);
  EXPECT_TRUE(contains(r.out, "\njob-1,ok,tensorwise,10,")) << show(r);

  r = ctl.run({"completion", "bash"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "submit")) << show(r);
  EXPECT_TRUE(contains(r.out, "complete ")) << show(r);
  // Completion in the real shells (those installed), with fp8ctl on PATH and this
  // coordinator: verbs, -o's values for the verb, job ids from `list -o name`.
  {
    std::map<std::string, std::string> env = cli_env(cp);
    env["PATH"] = fs::path(FP8CTL_BINARY).parent_path().string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "");
    const fs::path out = cp.dir() / "completion.out", err = cp.dir() / "completion.err";
    auto shell = [&](std::vector<std::string> argv) {
      const cli_test::RunResult run = cli_test::run(argv, env, out, err, kCommandLimit);
      EXPECT_TRUE(exited(run, 0)) << show(run);
      return run.out;
    };
    const std::string bash_words =
        "source <(fp8ctl completion bash); complete() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _fp8ctl; "
        "printf '%s\\n' \"${COMPREPLY[@]}\"; };";
    std::string got = shell({"/bin/bash", "-c", bash_words + " complete fp8ctl ev; complete fp8ctl list -o ''; "
                                                            "complete fp8ctl describe ''"});
    for (const char* want : {"events\n", "wide\n", "name\n", "job-1\n"}) EXPECT_TRUE(contains(got, want)) << want << got;
    for (const char* dir : {"/usr/bin/fish", "/bin/fish"}) {
      if (!fs::exists(dir)) continue;
      got = shell({dir, "-c", "fp8ctl completion fish | source; complete -C 'fp8ctl ev'; complete -C 'fp8ctl list -o '; "
                              "complete -C 'fp8ctl describe '; complete -C 'fp8ctl plot --out x.svg -o '"});
      for (const char* want : {"events\t", "wide\t", "name\t", "job-1\t", "csv\t"}) {
        EXPECT_TRUE(contains(got, want)) << "fish: " << want << "\n" << got;
      }
      break;
    }
    for (const char* dir : {"/usr/bin/zsh", "/bin/zsh"}) {
      if (!fs::exists(dir)) continue;
      const fs::path script = cp.dir() / "_fp8ctl";
      r = ctl.run({"completion", "zsh"});
      ASSERT_TRUE(exited(r, 0)) << show(r);
      std::ofstream(script) << r.out;
      const std::string helper = std::string(FP8_SOURCE_DIR) + "/tests/client/zsh_completions.zsh";
      const std::vector<std::pair<std::string, std::string>> cases = {
          {"fp8ctl ev", "events\n"}, {"fp8ctl list -o ", "wide\n"}, {"fp8ctl describe ", "job-1\n"},
          {"fp8ctl completion ", "fish\n"}};
      for (const auto& [line, want] : cases) {
        got = shell({dir, "-f", helper, script.string(), line});
        EXPECT_TRUE(contains(got, want)) << "zsh: " << line << " -> " << want << "\n" << got;
      }
      break;
    }
  }

  // A rank that fails (its corpus is missing) with no restarts: follow exits 10.
  const fs::path broken = write_job(cp.dir(), "broken", 10, 1, "missing-corpus.txt");
  r = ctl.run({"submit", broken.string(), "--follow"});
  EXPECT_TRUE(exited(r, 10)) << show(r) << cp.logs();
  EXPECT_TRUE(contains(r.out, "-> FAILED")) << show(r);
  const std::string broken_id = r.out.substr(0, r.out.find('\n'));
  r = ctl.run({"describe", broken_id});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "Reason:")) << show(r);
  EXPECT_TRUE(contains(r.out, "end: ")) << show(r);

  // A long job, followed while it runs, then cancelled: follow exits 11.
  const fs::path slow = write_job(cp.dir(), "slow", 100000, 2);
  r = ctl.run({"submit", slow.string(), "--idempotency-key", "slow-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  const std::string slow_id = r.out.substr(0, r.out.find('\n'));
  r = ctl.run({"submit", slow.string(), "--idempotency-key", "slow-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), slow_id) << "the same key returns the same job";
  std::unique_ptr<cli_test::Subprocess> follow = ctl.start({"follow", slow_id});
  ASSERT_TRUE(follow->started()) << follow->start_error();
  EXPECT_TRUE(follow->wait_for_stdout([](const std::string& out) { return contains(out, "step "); }, kCommandLimit))
      << follow->stdout_text() << follow->stderr_text() << cp.logs();
  // amax --by-rank while it runs: every rank reports its own amaxes, shown side by side.
  bool by_rank = false;
  for (int i = 0; i < 100 && !by_rank; ++i) {
    r = ctl.run({"amax", slow_id, "--by-rank"});
    by_rank = exited(r, 0) && contains(r.out, "RANK 0") && contains(r.out, "RANK 1") &&
              contains(r.out, "layers.0.attention.wq") && contains(r.out, " (rank ");
    if (!by_rank) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(by_rank) << show(r);
  r = ctl.run({"cancel", slow_id, "--reason", "enough"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, slow_id + " CANCELLED")) << show(r);
  const cli_test::ExitInfo followed = follow->wait(kCommandLimit);
  EXPECT_TRUE(followed.exited && followed.code == 11) << followed.describe() << "\n" << follow->stdout_text()
                                                      << follow->stderr_text();
  EXPECT_TRUE(contains(follow->stdout_text(), "-> CANCELLED")) << follow->stdout_text();
  // -o name on the verbs that change one job: `job/ID`, for scripts.
  r = ctl.run({"resume", slow_id, "-o", "name"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_EQ(r.out, "job/" + slow_id + "\n") << show(r);
  r = ctl.run({"cancel", slow_id, "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "\"state\": \"CANCELLED\"")) << show(r);
  r = ctl.run({"cancel", "job-1"});  // already finished
  EXPECT_TRUE(exited(r, 1)) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8ctl: cancel job-1: ")) << show(r);

  // Error exits: unknown job 6, refused token 5 (saying how to get one).
  for (const char* verb : {"describe", "follow", "logs", "cancel"}) {
    r = ctl.run({verb, "job-999"});
    EXPECT_TRUE(exited(r, 6)) << verb << "\n" << show(r);
    EXPECT_TRUE(contains(r.err, "fp8ctl: ")) << show(r);
  }
  r = ctl.run({"list", "--token", "not-a-token"});
  EXPECT_TRUE(exited(r, 5)) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8-coordinator token")) << show(r);
  // A user sees only its own jobs; another's job reads as not found.
  const std::string alice = cp.create_token("user", "alice");
  r = ctl.run({"describe", "job-1", "--token", alice});
  EXPECT_TRUE(exited(r, 6)) << show(r);
  // A job owned by someone else (the examples' `owner: examples`): the fix is the owner,
  // not the token.
  r = ctl.run({"submit", ok.string(), "--set", "owner=examples", "--token", alice});
  EXPECT_TRUE(exited(r, 5)) << show(r);
  EXPECT_TRUE(contains(r.err, "leave owner out of the job")) << show(r);
  EXPECT_TRUE(contains(r.err, "--set owner=alice")) << show(r);
  EXPECT_FALSE(contains(r.err, "fp8-coordinator token")) << show(r);
  // A spec the coordinator refuses (data outside its data root): exit 3.
  const fs::path outside = write_job(cp.dir(), "outside", 10, 1, "/etc/hostname");
  r = ctl.run({"submit", outside.string()});
  EXPECT_TRUE(exited(r, 3)) << show(r);
  EXPECT_TRUE(contains(r.err, "spec.data.path")) << show(r);
}

// A job the fleet cannot hold yet says why in list and describe, and does not keep a
// smaller job behind it from running (backfill).
// A tensor-parallel job (parallel.tensor 2 on 2 ranks: one data-parallel rank) as a user
// sees it: follow's summary counts each step's shared batch once, describe shows the mesh
// and the job's tokens/s equal to rank 0's, list shows the job's 2 ranks.
TEST(Fp8ctlTest, ATensorParallelJobCountsOneDataParallelRank) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  Fp8ctl ctl(cp.dir(), cli_env(cp));
  const fs::path job = cp.dir() / "tp.yaml";
  std::ofstream(job) << "name: tp\n"
                        "model: {dim: 64, n_layers: 1, n_heads: 4, ffn_dim: 128, max_seq_len: 32}\n"
                        "data: {path: corpus.txt, seq_len: 32, val_fraction: 0}\n"
                        "train: {steps: 6, batch_size: 4, lr: 3e-3, log_every: 3, eval_every: 0}\n"
                        "fp8: {recipe: tensorwise}\n"
                        "checkpoint: {dir: ckpt/tp, every: 3, keep: 1}\n"
                        "parallel: {tensor: 2}\n"
                        "resources: {device: cpu, world_size: 2, cpus_per_rank: 1}\n"
                        "restarts: {max_restarts: 0, backoff_seconds: 0}\n";
  cli_test::RunResult r = ctl.run({"submit", job.string(), "--follow"});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  // 6 steps of one batch of 4 x 32 tokens, not one a rank.
  EXPECT_TRUE(contains(r.out, "  tokens      768\n")) << show(r);

  r = ctl.run({"describe", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* part : {"State:      SUCCEEDED", "world       2 x cpu",
                           "mesh        1 data-parallel x 2 tensor-parallel ranks", "Checkpoint: step 6",
                           "Metrics (step 6"}) {
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << show(r);
  }
  // "tokens/s 10.6k (10.6k per rank)": the job's rate is rank 0's.
  const size_t rate = r.out.find("  tokens/s ");
  ASSERT_NE(rate, std::string::npos) << show(r);
  const std::string job_rate = r.out.substr(rate + 11, r.out.find(' ', rate + 11) - (rate + 11));
  EXPECT_TRUE(contains(r.out, "  tokens/s " + job_rate + " (" + job_rate + " per rank)")) << show(r);

  r = ctl.run({"list", "-o", "wide"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  const std::string row = r.out.substr(r.out.find("\njob-1 ") + 1);
  for (const char* part : {" SUCCEEDED ", " 6/6 ", " tensorwise ", " 2 ", " cpu ", " step 6 "}) {
    EXPECT_TRUE(contains(row, part)) << part << "\n" << show(r);
  }
}

TEST(Fp8ctlTest, AQueuedJobSaysWhyAndASmallerOneRunsMeanwhile) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  Fp8ctl ctl(cp.dir(), cli_env(cp));
  cli_test::RunResult r = ctl.run({"submit", write_job(cp.dir(), "big", 10, 2).string()});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  const std::string waiting = "waiting for 2 cpu workers: 1 registered, 1 free; more must register";
  r = ctl.run({"list"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "REASON")) << show(r);
  EXPECT_TRUE(contains(r.out, waiting)) << show(r);
  r = ctl.run({"describe", "job-1"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "Waiting:")) << show(r);
  EXPECT_TRUE(contains(r.out, waiting)) << show(r);

  r = ctl.run({"submit", write_job(cp.dir(), "small", 10, 1).string(), "--follow"});
  EXPECT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  r = ctl.run({"describe", "job-1", "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "\"state\": \"QUEUED\"")) << show(r);
  EXPECT_TRUE(contains(r.out, "\"pending_reason\": \"" + waiting + "\"")) << show(r);
  r = ctl.run({"cancel", "job-1"});
  EXPECT_TRUE(exited(r, 0)) << show(r);

  // clone: the finished job's spec again, with overrides; a bad override submits nothing.
  r = ctl.run({"clone", "job-2", "--set", "fp8.recipe=rowwise", "--set", "train.steps=5", "--follow"});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "job-3") << show(r);
  r = ctl.run({"describe", "job-3", "-o", "json"});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  for (const char* part : {"\"name\": \"small\"", "\"recipe\": \"ROWWISE\"", "\"steps\": 5,", "\"state\": \"SUCCEEDED\""}) {
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << show(r);
  }
  r = ctl.run({"clone", "job-2", "--set", "train.steps=-1"});
  EXPECT_TRUE(exited(r, 3)) << show(r);
  EXPECT_TRUE(contains(r.err, "train.steps")) << show(r);
  r = ctl.run({"list", "-o", "name"});
  EXPECT_EQ(r.out, "job/job-3\njob/job-2\njob/job-1\n") << show(r);
  r = ctl.run({"clone", "job-99"});
  EXPECT_FALSE(exited(r, 0)) << show(r);
}

TEST(Fp8ctlTest, FollowResumesAcrossACoordinatorRestart) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  Fp8ctl ctl(cp.dir(), cli_env(cp));
  const fs::path slow = write_job(cp.dir(), "slow", 100000, 1);
  cli_test::RunResult r = ctl.run({"submit", slow.string()});
  ASSERT_TRUE(exited(r, 0)) << show(r);
  const std::string id = r.out.substr(0, r.out.find('\n'));
  std::unique_ptr<cli_test::Subprocess> follow = ctl.start({"follow", id});
  ASSERT_TRUE(follow->wait_for_stdout([](const std::string& out) { return contains(out, "step "); }, kCommandLimit))
      << follow->stdout_text() << follow->stderr_text() << cp.logs();

  cp.kill_coordinator(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());  // same port and state
  r = ctl.run({"cancel", id});
  ASSERT_TRUE(exited(r, 0)) << show(r) << cp.logs();
  const cli_test::ExitInfo followed = follow->wait(kCommandLimit);
  EXPECT_TRUE(followed.exited && followed.code == 11) << followed.describe() << "\n" << follow->stdout_text()
                                                      << follow->stderr_text();
  EXPECT_TRUE(contains(follow->stderr_text(), "reconnecting")) << follow->stderr_text();
  // Resumed after the last event seen: the start of the job is not replayed.
  const std::string out = follow->stdout_text();
  EXPECT_EQ(out.find("attempt 1 started"), out.rfind("attempt 1 started")) << out;
  EXPECT_TRUE(contains(out, "-> CANCELLED")) << out;
}

TEST(Fp8ctlTest, LocalErrors) {
  const fs::path dir = fs::temp_directory_path() / ("fp8ctl_local_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Fp8ctl ctl(dir, {{"FP8_COORDINATOR", "127.0.0.1:1"}, {"FP8_TOKEN", "x"}, {"FP8_TOKEN_FILE", ""}});

  // An invalid job.yaml: file:line:col lines and exit 3, before any token or connection.
  std::ofstream(dir / "bad.yaml") << "name: bad\nmodel: {dim: 32, n_layers: 1, n_heads: 3, max_seq_len: 32}\n"
                                     "data: {path: corpus.txt}\ntrain: {steps: 10, batch_size: 2, lr: 1e-3}\n";
  cli_test::RunResult r = ctl.run({"submit", (dir / "bad.yaml").string()});
  EXPECT_TRUE(exited(r, 3)) << show(r);
  EXPECT_TRUE(contains(r.err, (dir / "bad.yaml").string() + ":2:")) << show(r);
  EXPECT_TRUE(r.out.empty()) << show(r);
  r = ctl.run({"submit", (dir / "bad.yaml").string(), "--set", "model.n_heads=2", "--set", "train.stepz=3"});
  EXPECT_TRUE(exited(r, 3)) << show(r);
  EXPECT_TRUE(contains(r.err, "stepz")) << show(r);

  // A table of bad job files: each exits 3 with file:line and the offending key, before
  // any connection.
  struct BadJob {
    std::string name, yaml;
    std::vector<std::string> expected;
  };
  const std::string model = "model: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n";
  const std::string rest = "data: {path: corpus.txt}\ntrain: {steps: 10, batch_size: 2, lr: 1e-3}\n";
  const std::vector<BadJob> bad_jobs = {
      {"misspelt-key", "name: k\n" + model + rest + "fp8: {recipie: rowwise}\n", {":5:7:", "recipie", "did you mean 'recipe'"}},
      {"wrong-type", "name: t\n" + model + "data: {path: corpus.txt}\ntrain: {steps: many, batch_size: 2, lr: 1e-3}\n",
       {":4:", "train.steps"}},
      {"unknown-recipe", "name: r\n" + model + rest + "fp8: {recipe: fastest}\n", {":5:", "fp8.recipe", "fastest"}},
      {"negative-lr", "name: l\n" + model + "data: {path: corpus.txt}\ntrain: {steps: 10, batch_size: 2, lr: -1}\n",
       {":4:", "train.lr"}},
      {"zero-world", "name: w\n" + model + rest + "resources: {world_size: 0}\n", {":5:", "resources.world_size"}},
      {"no-model", "name: m\n" + rest, {"model"}},
      {"not-yaml", "name: [unclosed\n", {":1:"}},
  };
  for (const BadJob& b : bad_jobs) {
    const fs::path file = dir / (b.name + ".yaml");
    std::ofstream(file) << b.yaml;
    const cli_test::RunResult bad = ctl.run({"submit", file.string()});
    EXPECT_TRUE(exited(bad, 3)) << b.name << "\n" << show(bad);
    for (const std::string& e : b.expected) {
      EXPECT_TRUE(contains(bad.err, file.filename().string())) << b.name << "\n" << show(bad);
      EXPECT_TRUE(contains(bad.err, e)) << b.name << " should mention " << e << "\n" << show(bad);
    }
  }

  // No coordinator there: exit 4, naming the address.
  std::ofstream(dir / "good.yaml") << "name: good\nmodel: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n"
                                      "data: {path: corpus.txt}\ntrain: {steps: 10, batch_size: 2, lr: 1e-3}\n";
  r = ctl.run({"submit", (dir / "good.yaml").string()});
  EXPECT_TRUE(exited(r, 4)) << show(r);
  EXPECT_TRUE(contains(r.err, "127.0.0.1:1")) << show(r);
  // --dry-run validates and prints a rank's memory without connecting (no coordinator
  // listens there): exit 0.
  r = ctl.run({"submit", (dir / "good.yaml").string(), "--dry-run", "--set", "resources.world_size=2"});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "valid, not submitted (--dry-run)")) << show(r);
  EXPECT_TRUE(contains(r.out, "memory per rank (estimate, 2 ranks): ")) << show(r);
  EXPECT_TRUE(contains(r.out, "FSDP gathers")) << show(r);
  r = ctl.run({"submit", (dir / "bad.yaml").string(), "--dry-run"});
  EXPECT_TRUE(exited(r, 3)) << show(r);
  r = ctl.run({"list", "--coordinator", "127.0.0.1:2"});
  EXPECT_TRUE(exited(r, 4)) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8ctl: list: cannot reach the coordinator at 127.0.0.1:2")) << show(r);
  // version: the client's part still prints; the server's needs the coordinator.
  r = ctl.run({"version"});
  EXPECT_TRUE(exited(r, 4)) << show(r);
  EXPECT_TRUE(contains(r.out, "client  ")) << show(r);
  EXPECT_FALSE(contains(r.out, "server")) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8ctl: version: cannot reach the coordinator at 127.0.0.1:1")) << show(r);
  r = ctl.run({"version", "--client", "-o", "yaml"});
  EXPECT_TRUE(exited(r, 0)) << show(r);
  EXPECT_TRUE(contains(r.out, "client:\n")) << show(r);
  EXPECT_TRUE(contains(r.out, "  protocol: fp8.v1\n")) << show(r);

  // Usage: exit 2.
  r = ctl.run({"list", "--no-such-flag"});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  r = ctl.run({});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  r = ctl.run({"bogus"});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8ctl: unknown verb 'bogus'")) << show(r);
  r = ctl.run({"list", "-o", "xml"});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "expected table, wide, name, json or yaml, not 'xml'")) << show(r);
  r = ctl.run({"amax", "job-1", "-o", "name"});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "expected table, json or yaml, not 'name'")) << show(r);
  // plot: -o is the format (svg, png or csv), the file is --out.
  r = ctl.run({"plot", "job-1", "-o", (dir / "loss.svg").string()});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "expected svg, png or csv, not '" + (dir / "loss.svg").string() +
                                  "' (the file to write is --out FILE)"))
      << show(r);
  r = ctl.run({"plot", "job-1", "--out", (dir / "loss.jpg").string()});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "name a .svg, .png or .csv file, or choose the format with -o svg|png|csv")) << show(r);
  EXPECT_FALSE(fs::exists(dir / "loss.jpg"));
  r = ctl.run({"plot", "job-1"});  // no --out
  EXPECT_TRUE(exited(r, 2)) << show(r);
  r = ctl.run({"completion", "tcsh"});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  r = ctl.run({"submit", (dir / "none.yaml").string()});
  EXPECT_TRUE(exited(r, 2)) << show(r);

  // A named token file that is not there: exit 2. No token anywhere: exit 5, saying how
  // to get one.
  Fp8ctl tokenless(dir, {{"FP8_COORDINATOR", "127.0.0.1:1"}, {"FP8_TOKEN", ""}, {"FP8_TOKEN_FILE", ""},
                         {"HOME", dir.string()}});
  r = tokenless.run({"list", "--token-file", (dir / "none.token").string()});
  EXPECT_TRUE(exited(r, 2)) << show(r);
  EXPECT_TRUE(contains(r.err, "none.token")) << show(r);
  r = tokenless.run({"list"});
  EXPECT_TRUE(exited(r, 5)) << show(r);
  EXPECT_TRUE(contains(r.err, "fp8-coordinator token --role user")) << show(r);

  // --help on every verb.
  for (const char* verb :
       {"submit", "follow", "list", "describe", "logs", "cancel", "resume", "clone", "workers", "amax", "events", "plot",
        "version", "completion"}) {
    r = ctl.run({verb, "--help"});
    EXPECT_TRUE(exited(r, 0)) << verb << "\n" << show(r);
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8::system_test
