// One fp8-worker daemon offering several GPUs (--device cuda:0,1) to a real
// fp8-coordinator on loopback: each GPU registers as a worker of its own, a 2-rank CUDA
// job is placed across the two slots, and each rank is started with its slot's GPU in
// its slot's folder. The ranks are a /bin/sh stand-in for fp8-train that records its
// command line and succeeds, so that this runs without a GPU; what is under test is the
// daemon and the coordinator, not training.
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"
#include "tests/system/control_plane.h"

namespace fp8::system_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A generous limit that only keeps a broken test from hanging (never a timing assert).
constexpr seconds kLimit{60};

bool eventually(const std::function<bool()>& done, seconds limit = kLimit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}

std::vector<v1::WorkerInfo> list_workers(const ControlPlane& cp) {
  v1::ListWorkersResponse response;
  auto ctx = with_token(cp.admin_token(), seconds(10));
  if (!cp.job_stub()->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &response).ok()) return {};
  return {response.workers().begin(), response.workers().end()};
}

std::string scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  httplib::Client client(address.substr(0, colon), std::stoi(address.substr(colon + 1)));
  auto res = client.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

bool has_line(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

std::vector<std::string> split_lines(const fs::path& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool final(const v1::Job& j) {
  return j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED;
}

TEST(MultiSlotWorker, EachGpuIsAWorkerOfItsOwnAndSigtermStopsThemAll) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());

  // Stands in for fp8-train: writes its arguments next to its job.yaml, exits 0.
  const fs::path trainer = cp.dir() / "fake-fp8-train";
  std::ofstream(trainer) << "#!/bin/sh\n"
                            "for a in \"$@\"; do\n"
                            "  [ \"$prev\" = --config ] && out=\"$(dirname \"$a\")/argv.txt\"\n"
                            "  prev=$a\n"
                            "done\n"
                            "printf '%s\\n' \"$@\" > \"$out\"\n";
  fs::permissions(trainer, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);

  const fs::path work = cp.dir() / "gpus";
  cli_test::Subprocess worker({FP8_WORKER_BINARY, "--coordinator", "127.0.0.1:" + std::to_string(cp.port()),
                               "--token-file", (cp.dir() / "fp8-worker.token").string(), "--work-dir", work.string(),
                               "--trainer", trainer.string(), "--device", "cuda:0,1", "--cpus", "1",
                               "--stop-grace-default", "3"},
                              {}, cp.dir() / "worker.out", cp.dir() / "worker.err");
  ASSERT_TRUE(worker.started()) << worker.start_error();
  auto logs = [&] { return cp.logs() + "---- worker.err\n" + worker.stderr_text(); };

  // Two workers, one per GPU, both heartbeating.
  std::vector<v1::WorkerInfo> workers;
  ASSERT_TRUE(eventually([&] {
    workers = list_workers(cp);
    return workers.size() == 2 && std::all_of(workers.begin(), workers.end(), [](const v1::WorkerInfo& w) {
             return w.state() == v1::WorkerInfo::IDLE;
           });
  })) << logs();
  std::map<std::string, std::string> id_of;  // device -> worker id
  for (const v1::WorkerInfo& w : workers) {
    EXPECT_EQ(w.device_kind(), v1::ResourceSpec::CUDA) << w.DebugString();
    id_of[w.device_name()] = w.worker_id();
  }
  ASSERT_EQ(id_of.size(), 2u);
  ASSERT_EQ(id_of.count("cuda:0"), 1u);
  ASSERT_EQ(id_of.count("cuda:1"), 1u);
  EXPECT_NE(id_of["cuda:0"], id_of["cuda:1"]);
  // Both registered the daemon's one metrics endpoint, which has a set of series per slot.
  EXPECT_EQ(workers[0].address(), workers[1].address());
  std::string metrics;
  EXPECT_TRUE(eventually([&] {
    metrics = scrape(workers[0].address());
    return has_line(metrics, "fp8_worker_info{worker_id=\"" + id_of["cuda:0"] + "\",device=\"cuda:0\"} 1") &&
           has_line(metrics, "fp8_worker_info{worker_id=\"" + id_of["cuda:1"] + "\",device=\"cuda:1\"} 1") &&
           has_line(metrics, "fp8_worker_connected{device=\"cuda:0\"} 1") &&
           has_line(metrics, "fp8_worker_connected{device=\"cuda:1\"} 1");
  })) << metrics;

  // A 2-rank CUDA job fills both slots (one rank per worker); each rank gets its slot's
  // GPU and folder.
  ControlPlane::JobOptions o;
  o.name = "two-gpus";
  o.device = "cuda";
  o.world_size = 2;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok()) << logs();
  const v1::Job done = cp.wait_for(job.id(), final, kLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << logs();
  std::set<std::string> ranks_seen;
  for (const std::string index : {"0", "1"}) {
    const fs::path attempt = work / ("cuda-" + index) / job.id() / "attempt-1";
    std::vector<fs::path> rank_dirs;
    for (const fs::directory_entry& e : fs::directory_iterator(attempt)) rank_dirs.push_back(e.path());
    ASSERT_EQ(rank_dirs.size(), 1u) << "one rank per slot under " << attempt;
    ranks_seen.insert(rank_dirs[0].filename().string());
    const std::vector<std::string> argv = split_lines(rank_dirs[0] / "argv.txt");
    auto flag = std::find(argv.begin(), argv.end(), "--cuda-device");
    ASSERT_NE(flag, argv.end()) << rank_dirs[0];
    ASSERT_NE(flag + 1, argv.end());
    EXPECT_EQ(*(flag + 1), index) << rank_dirs[0];
  }
  EXPECT_EQ(ranks_seen, (std::set<std::string>{"rank-0", "rank-1"}));
  EXPECT_TRUE(eventually([&] {
    metrics = scrape(workers[0].address());
    return has_line(metrics, "fp8_worker_rank_exits_total{device=\"cuda:0\",outcome=\"success\"} 1") &&
           has_line(metrics, "fp8_worker_rank_exits_total{device=\"cuda:1\",outcome=\"success\"} 1");
  })) << metrics;

  // SIGTERM stops every slot; the daemon exits 0.
  worker.signal(SIGTERM);
  const cli_test::ExitInfo exit = worker.wait(milliseconds(30'000));
  EXPECT_TRUE(exit.exited && exit.code == 0) << exit.describe() << "\n" << logs();
  EXPECT_NE(worker.stderr_text().find("stopped"), std::string::npos) << logs();

  // A worker does not deregister (the protocol has no call for it): the coordinator
  // declares both slots lost once they stop heartbeating (--lost-after-ms) and drops them.
  EXPECT_TRUE(eventually([&] {
    workers = list_workers(cp);
    return workers.empty();
  })) << workers.size() << " worker(s) still listed\n" << logs();
}

// A refusal is fatal for the slot it hits, and stops the daemon (every slot) with exit 1.
TEST(MultiSlotWorker, ARefusedRegistrationStopsEverySlotWithExit1) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  const fs::path token = cp.dir() / "wrong.token";
  std::ofstream(token) << "not-a-worker-token\n";
  const cli_test::RunResult r = cli_test::run(
      {FP8_WORKER_BINARY, "--coordinator", "127.0.0.1:" + std::to_string(cp.port()), "--token-file", token.string(),
       "--work-dir", (cp.dir() / "gpus").string(), "--trainer", "/bin/sh", "--device", "cuda:0,1"},
      {}, cp.dir() / "worker.out", cp.dir() / "worker.err", milliseconds(30'000));
  EXPECT_TRUE(r.exit.exited && r.exit.code == 1) << r.exit.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("refused the registration"), std::string::npos) << r.err;
  EXPECT_TRUE(list_workers(cp).empty());
}

// cuda:all counts the GPUs the CUDA runtime sees; with none it is a command-line error.
TEST(MultiSlotWorker, CudaAllWithoutAGpuExits2SayingSo) {
  if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "this host has an NVIDIA driver (and maybe GPUs)";
  const fs::path dir = fs::temp_directory_path() / ("fp8_cuda_all_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const cli_test::RunResult r =
      cli_test::run({FP8_WORKER_BINARY, "--device", "cuda:all", "--trainer", "/bin/sh", "--work-dir", dir.string()},
                    {{"FP8_WORKER_TOKEN", "t"}}, dir / "out", dir / "err", milliseconds(30'000));
  EXPECT_TRUE(r.exit.exited && r.exit.code == 2) << r.exit.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("--device 'cuda:all'"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8::system_test
