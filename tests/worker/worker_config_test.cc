#include "worker/fp8_worker/worker_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "fp8/v1/worker_service.pb.h"
#include "tests/worker/worker_test_util.h"
#include "worker/fp8_worker/cuda_device_count.h"
#include "worker/fp8_worker/trainer_command.h"

namespace fp8::worker {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(Env env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// Every parse needs a trainer that exists and a token.
absl::StatusOr<ParsedCommandLine> parse(std::vector<std::string> args, Env env = {}) {
  if (env.count("FP8_TRAINER") == 0) env["FP8_TRAINER"] = "/bin/sh";
  if (env.count("FP8_WORKER_TOKEN") == 0) env["FP8_WORKER_TOKEN"] = "tok";
  return parse_worker_config(args, lookup(env));
}

// The same with a GPU count of our choosing for cuda:all.
absl::StatusOr<ParsedCommandLine> parse_counting(std::vector<std::string> args, const CudaDeviceCounter& count,
                                                Env env = {}) {
  if (env.count("FP8_TRAINER") == 0) env["FP8_TRAINER"] = "/bin/sh";
  if (env.count("FP8_WORKER_TOKEN") == 0) env["FP8_WORKER_TOKEN"] = "tok";
  return parse_worker_config(args, lookup(env), count);
}

CudaDeviceCounter gpus(int n) {
  return [n]() -> absl::StatusOr<int> { return n; };
}

std::vector<std::string> names(const std::vector<WorkerConfig>& slots) {
  std::vector<std::string> names;
  for (const WorkerConfig& s : slots) names.push_back(s.device_name);
  return names;
}

TEST(WorkerConfig, DefaultsWorkOnOneMachine) {
  absl::StatusOr<ParsedCommandLine> p = parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  const WorkerConfig& c = p->config;
  EXPECT_EQ(c.coordinator, "127.0.0.1:7070");
  EXPECT_EQ(c.device_kind, v1::ResourceSpec::CPU);
  EXPECT_EQ(c.device_name, "cpu");
  EXPECT_EQ(c.address, "127.0.0.1:0");
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.cpus, 0);
  EXPECT_EQ(c.memory_gb, 0);
  EXPECT_TRUE(c.coordinator_ca.empty());
  EXPECT_EQ(c.stop_grace_default_s, 30);
  EXPECT_EQ(c.trainer, "/bin/sh");
  EXPECT_TRUE(std::filesystem::path(c.work_dir).is_absolute()) << c.work_dir;
  EXPECT_EQ(std::filesystem::path(c.work_dir).filename(), "fp8-worker-cpu");
  EXPECT_EQ(c.token, "tok");
}

TEST(WorkerConfig, FlagBeatsEnvironmentWhichBeatsDefault) {
  Env env = {{"FP8_COORDINATOR", "envhost:1"}, {"FP8_DEVICE", "cuda:1"}, {"FP8_WORKER_ADDRESS", "10.0.0.5:9400"},
             {"FP8_WORKER_CPUS", "8"}, {"FP8_WORKER_MEMORY_GB", "12.5"}, {"FP8_STOP_GRACE_DEFAULT", "7"},
             {"FP8_WORKER_DIR", "/tmp/wd-env"}};
  absl::StatusOr<ParsedCommandLine> from_env = parse({}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->config.coordinator, "envhost:1");
  EXPECT_EQ(from_env->config.device_kind, v1::ResourceSpec::CUDA);
  EXPECT_EQ(from_env->config.device_name, "cuda:1");
  EXPECT_EQ(from_env->config.listen_host, "10.0.0.5");
  EXPECT_EQ(from_env->config.cpus, 8);
  EXPECT_EQ(from_env->config.memory_gb, 12.5);
  EXPECT_EQ(from_env->config.stop_grace_default_s, 7);
  EXPECT_EQ(from_env->config.work_dir, "/tmp/wd-env");

  absl::StatusOr<ParsedCommandLine> from_flags =
      parse({"--coordinator", "flaghost:2", "--device", "cpu", "--address", "[::1]:5", "--cpus", "2", "--memory-gb",
             "3", "--stop-grace-default", "0", "--work-dir", "/tmp/wd-flag"},
            env);
  ASSERT_TRUE(from_flags.ok()) << from_flags.status();
  EXPECT_EQ(from_flags->config.coordinator, "flaghost:2");
  EXPECT_EQ(from_flags->config.device_name, "cpu");
  EXPECT_EQ(from_flags->config.address, "[::1]:5");
  EXPECT_EQ(from_flags->config.listen_host, "::1");
  EXPECT_EQ(from_flags->config.cpus, 2);
  EXPECT_EQ(from_flags->config.memory_gb, 3);
  EXPECT_EQ(from_flags->config.stop_grace_default_s, 0);
  EXPECT_EQ(from_flags->config.work_dir, "/tmp/wd-flag");
}

TEST(WorkerConfig, DefaultWorkDirNamesTheDevice) {
  absl::StatusOr<ParsedCommandLine> p = parse({"--device", "cuda:3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::filesystem::path(p->config.work_dir).filename(), "fp8-worker-cuda-3");
}

TEST(WorkerConfig, OneDeviceIsOneSlot) {
  absl::StatusOr<ParsedCommandLine> p = parse({"--device", "cuda:2", "--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.cuda_devices, std::vector<int>{2});
  std::vector<WorkerConfig> slots = slot_configs(p->config);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].device_name, "cuda:2");
  EXPECT_EQ(slots[0].work_dir, "/tmp/wd");  // as a single-GPU worker always had it

  p = parse({"--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->config.cuda_devices.empty());
  slots = slot_configs(p->config);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].device_kind, v1::ResourceSpec::CPU);
  EXPECT_EQ(slots[0].device_name, "cpu");
  EXPECT_EQ(slots[0].work_dir, "/tmp/wd");
}

TEST(WorkerConfig, AListOfGpusIsOneSlotEach) {
  absl::StatusOr<ParsedCommandLine> p =
      parse({"--device", "cuda:3,0,1", "--work-dir", "/tmp/wd", "--coordinator", "coord:7", "--address",
             "10.0.0.5:9401", "--cpus", "4"});
  ASSERT_TRUE(p.ok()) << p.status();
  const WorkerConfig& c = p->config;
  EXPECT_EQ(c.device_kind, v1::ResourceSpec::CUDA);
  EXPECT_EQ(c.cuda_devices, (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(c.device_name, "cuda:3,0,1");

  const std::vector<WorkerConfig> slots = slot_configs(c);
  EXPECT_EQ(names(slots), (std::vector<std::string>{"cuda:3", "cuda:0", "cuda:1"}));
  for (const WorkerConfig& s : slots) {
    const std::string index = s.device_name.substr(5);
    EXPECT_EQ(s.device_kind, v1::ResourceSpec::CUDA);
    EXPECT_EQ(s.cuda_devices, std::vector<int>{std::stoi(index)});
    EXPECT_EQ(s.work_dir, "/tmp/wd/cuda-" + index);
    // What identifies and reaches the daemon is every slot's.
    EXPECT_EQ(s.token, "tok");
    EXPECT_EQ(s.coordinator, "coord:7");
    EXPECT_EQ(s.address, "10.0.0.5:9401");
    EXPECT_EQ(s.listen_host, "10.0.0.5");
    EXPECT_EQ(s.trainer, "/bin/sh");
    EXPECT_EQ(s.cpus, 4);
  }

  // From the environment too; the default work dir is shared, one cuda-N folder per slot.
  p = parse({}, {{"FP8_DEVICE", "cuda:0,1"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::filesystem::path(p->config.work_dir).filename(), "fp8-worker-cuda");
  const std::vector<WorkerConfig> env_slots = slot_configs(p->config);
  ASSERT_EQ(env_slots.size(), 2u);
  EXPECT_EQ(env_slots[1].work_dir, p->config.work_dir + "/cuda-1");
}

// Each GPU slot offers its own GPU's memory unless --memory-gb says; CPU slots are left alone.
TEST(WorkerConfig, GpuSlotsOfferTheirGpusMemory) {
  const CudaMemoryQuery query = [](int index) -> absl::StatusOr<double> {
    if (index == 2) return absl::UnavailableError("cudaGetDeviceProperties(2): no such device");
    return 80.0 + index;
  };
  absl::StatusOr<ParsedCommandLine> p = parse({"--device", "cuda:0,1,2", "--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<WorkerConfig> slots = slot_configs(p->config);
  const std::vector<std::string> unread = offer_gpu_memory(slots, query);
  EXPECT_EQ(slots[0].memory_gb, 80.0);
  EXPECT_EQ(slots[1].memory_gb, 81.0);
  EXPECT_EQ(slots[2].memory_gb, 0.0);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_NE(unread[0].find("cuda:2: its memory is unknown (cudaGetDeviceProperties(2): no such device)"),
            std::string::npos)
      << unread[0];

  p = parse({"--device", "cuda:1", "--memory-gb", "40", "--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  slots = slot_configs(p->config);
  EXPECT_TRUE(offer_gpu_memory(slots, query).empty());
  EXPECT_EQ(slots[0].memory_gb, 40.0) << "--memory-gb wins";

  p = parse({"--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  slots = slot_configs(p->config);
  EXPECT_TRUE(offer_gpu_memory(slots, query).empty());
  EXPECT_EQ(slots[0].memory_gb, 0.0) << "a CPU worker's memory is only what --memory-gb says";
}

// The rank a slot starts trains on that slot's GPU, in that slot's folder.
TEST(WorkerConfig, EachSlotsRanksGetItsGpu) {
  absl::StatusOr<ParsedCommandLine> p = parse({"--device", "cuda:0,1", "--work-dir", "/tmp/wd"});
  ASSERT_TRUE(p.ok()) << p.status();
  v1::StartRank start;
  start.set_job_id("job-1");
  start.set_attempt(1);
  start.set_rank(0);
  start.set_world_size(2);
  start.set_coordinator_address("127.0.0.1:7070");
  start.set_trainer_token("t");
  for (const WorkerConfig& slot : slot_configs(p->config)) {
    absl::StatusOr<TrainerCommand> cmd = build_trainer_command(start, slot, {});
    ASSERT_TRUE(cmd.ok()) << cmd.status();
    const std::string index = slot.device_name.substr(5);
    auto flag = std::find(cmd->argv.begin(), cmd->argv.end(), "--cuda-device");
    ASSERT_NE(flag, cmd->argv.end()) << slot.device_name;
    ASSERT_NE(flag + 1, cmd->argv.end());
    EXPECT_EQ(*(flag + 1), index);
    EXPECT_EQ(cmd->rank_dir, "/tmp/wd/cuda-" + index + "/job-1/attempt-1/rank-0");
  }
}

TEST(WorkerConfig, CudaAllOffersEveryGpuTheRuntimeSees) {
  absl::StatusOr<ParsedCommandLine> p = parse_counting({"--device", "cuda:all", "--work-dir", "/tmp/wd"}, gpus(3));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.cuda_devices, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(names(slot_configs(p->config)), (std::vector<std::string>{"cuda:0", "cuda:1", "cuda:2"}));

  // One GPU: a single-GPU worker, exactly as --device cuda:0 would make it.
  p = parse_counting({"--device", "cuda:all", "--work-dir", "/tmp/wd"}, gpus(1));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.device_name, "cuda:0");
  const std::vector<WorkerConfig> slots = slot_configs(p->config);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].work_dir, "/tmp/wd");
}

TEST(WorkerConfig, CudaAllWithoutGpusIsAnErrorSayingSo) {
  absl::StatusOr<ParsedCommandLine> p = parse_counting({"--device", "cuda:all"}, gpus(0));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--device 'cuda:all'"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("no GPU"), absl::string_view::npos) << p.status();

  // A build without CUDA (or a host without a driver): the counter's reason, and where.
  const CudaDeviceCounter no_runtime = []() -> absl::StatusOr<int> {
    return absl::FailedPreconditionError("this fp8-worker was built without CUDA");
  };
  p = parse_counting({}, no_runtime, {{"FP8_DEVICE", "cuda:all"}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("FP8_DEVICE 'cuda:all'"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("built without CUDA"), absl::string_view::npos) << p.status();
}

// Only cuda:all asks the runtime (which costs a driver load in the daemon).
TEST(WorkerConfig, OnlyCudaAllCountsGpus) {
  int calls = 0;
  const CudaDeviceCounter counting = [&calls]() -> absl::StatusOr<int> {
    ++calls;
    return 2;
  };
  for (const char* device : {"cpu", "cuda:1", "cuda:0,1"}) {
    ASSERT_TRUE(parse_counting({"--device", device}, counting).ok()) << device;
  }
  EXPECT_EQ(calls, 0);
}

// The counter the daemon uses: here (no GPU) a count of 0 or a reason, never a crash.
TEST(CountCudaDevices, CountsOrSaysWhyNot) {
  absl::StatusOr<int> n = count_cuda_devices();
  if (n.ok()) {
    EXPECT_GE(*n, 0);
  } else {
    EXPECT_TRUE(n.status().code() == absl::StatusCode::kUnavailable ||
                n.status().code() == absl::StatusCode::kFailedPrecondition)
        << n.status();
    EXPECT_FALSE(n.status().message().empty());
  }
}

TEST(WorkerConfig, TokenFromFileIsTrimmedAndTheFlagWins) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/token";
  std::ofstream(file) << "  secret-from-file \n\n";
  absl::StatusOr<ParsedCommandLine> p = parse({"--token-file", file}, {{"FP8_WORKER_TOKEN", "from-env"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.token, "secret-from-file");

  // Without the flag, the token variable beats the file variable.
  p = parse({}, {{"FP8_WORKER_TOKEN", " from-env\n"}, {"FP8_WORKER_TOKEN_FILE", file}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.token, "from-env");

  p = parse_worker_config({}, lookup({{"FP8_TRAINER", "/bin/sh"}, {"FP8_WORKER_TOKEN_FILE", file}}));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.token, "secret-from-file");
}

TEST(WorkerConfig, NoTokenSaysHowToGetOne) {
  // ctest runs in the build folder, where no ./fp8-worker.token lies.
  ASSERT_FALSE(std::filesystem::exists("fp8-worker.token"));
  absl::StatusOr<ParsedCommandLine> p = parse_worker_config({}, lookup({{"FP8_TRAINER", "/bin/sh"}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("FP8_WORKER_TOKEN"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("--token-file"), absl::string_view::npos) << p.status();
}

TEST(WorkerConfig, UnreadableOrEmptyTokenFileIsAnError) {
  testing::TempDir dir;
  absl::StatusOr<ParsedCommandLine> p = parse({"--token-file", dir.path() + "/missing"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--token-file"), absl::string_view::npos) << p.status();
  const std::string empty = dir.path() + "/empty";
  std::ofstream(empty) << " \n";
  p = parse({"--token-file", empty});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("empty"), absl::string_view::npos) << p.status();
}

// Each bad value is refused, naming where it came from.
TEST(WorkerConfig, BadValuesNameTheirSource) {
  struct Case {
    std::vector<std::string> args;
    Env env;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"--device", "gpu"}, {}, "--device"},
      {{}, {{"FP8_DEVICE", "cuda:x"}}, "FP8_DEVICE"},
      {{"--device", "cuda:-1"}, {}, "--device"},
      {{"--device", "cuda:"}, {}, "--device"},
      {{"--device", "cuda:0,"}, {}, "--device"},
      {{"--device", "cuda:,1"}, {}, "--device"},
      {{"--device", "cuda:0,,1"}, {}, "--device"},
      {{"--device", "cuda:0;1"}, {}, "--device"},
      {{"--device", "cuda:0, 1"}, {}, "--device"},
      {{"--device", "cuda:all,0"}, {}, "--device"},
      {{"--device", "cpu,cuda:0"}, {}, "--device"},
      {{}, {{"FP8_DEVICE", "cuda:1,x"}}, "FP8_DEVICE"},
      {{"--cpus", "-1"}, {}, "--cpus"},
      {{}, {{"FP8_WORKER_CPUS", "many"}}, "FP8_WORKER_CPUS"},
      {{"--memory-gb", "abc"}, {}, "--memory-gb"},
      {{"--memory-gb", "-2"}, {}, "--memory-gb"},
      {{"--address", "nohost"}, {}, "--address"},
      {{"--address", ":80"}, {}, "--address"},
      {{"--coordinator", "host:99999"}, {}, "--coordinator"},
      {{"--stop-grace-default", "4000"}, {}, "--stop-grace-default"},
      {{"--trainer", "/nonexistent/fp8-train"}, {}, "--trainer"},
      {{}, {{"FP8_TRAINER", "/tmp"}}, "FP8_TRAINER"},
      {{"--coordinator-ca", "/nonexistent/ca.pem"}, {}, "--coordinator-ca"},
      {{"--no-such-flag"}, {}, "--no-such-flag"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ParsedCommandLine> p = parse(c.args, c.env);
    ASSERT_FALSE(p.ok()) << c.names;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_NE(p.status().message().find(c.names), absl::string_view::npos) << p.status();
  }
}

TEST(WorkerConfig, AGpuListedTwiceIsAnError) {
  absl::StatusOr<ParsedCommandLine> p = parse({"--device", "cuda:0,1,0"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--device 'cuda:0,1,0'"), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find("cuda:0 is listed twice"), absl::string_view::npos) << p.status();
  p = parse({}, {{"FP8_DEVICE", "cuda:2,2"}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("FP8_DEVICE"), absl::string_view::npos) << p.status();
}

TEST(WorkerConfig, HelpAndVersionPrintAndExit) {
  absl::StatusOr<ParsedCommandLine> p = parse({"--help"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->print_and_exit.has_value());
  EXPECT_NE(p->print_and_exit->find("--coordinator"), std::string::npos);
  p = parse({"--version"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->print_and_exit.has_value());
  EXPECT_NE(p->print_and_exit->find("0.1.0"), std::string::npos);
}

TEST(WorkerConfig, HostOfAddress) {
  EXPECT_EQ(*host_of_address("10.1.2.3:7"), "10.1.2.3");
  EXPECT_EQ(*host_of_address("node-3.example:0"), "node-3.example");
  EXPECT_EQ(*host_of_address("[fe80::1]:9400"), "fe80::1");
  EXPECT_FALSE(host_of_address("::1:80").ok());
  EXPECT_FALSE(host_of_address("host:").ok());
  EXPECT_FALSE(host_of_address("[::1]").ok());
}

}  // namespace
}  // namespace fp8::worker
