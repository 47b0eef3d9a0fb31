// fp8-worker's settings: command-line flags, each with an environment variable behind it
// (the flag wins), and defaults that work on one machine with no setup.
//
//   --coordinator HOST:PORT     FP8_COORDINATOR         127.0.0.1:7070
//   --token-file FILE           FP8_WORKER_TOKEN_FILE   ./fp8-worker.token
//                               FP8_WORKER_TOKEN        the token itself (beats the file
//                                                       variable and the default file, not
//                                                       an explicit --token-file)
//   --device DEVICES            FP8_DEVICE              cpu
//   --address HOST:PORT         FP8_WORKER_ADDRESS      127.0.0.1:0 (port 0: the metrics port bound)
//   --metrics-address HOST:PORT FP8_WORKER_METRICS_ADDRESS  --address
//   --work-dir DIR              FP8_WORKER_DIR          ./fp8-worker-<device>
//   --trainer PATH              FP8_TRAINER             fp8-train next to this executable
//   --cpus N                    FP8_WORKER_CPUS         0 (unknown)
//   --memory-gb X               FP8_WORKER_MEMORY_GB    0 (unknown)
//   --coordinator-ca FILE       FP8_COORDINATOR_CA      none: plaintext
//   --stop-grace-default S      FP8_STOP_GRACE_DEFAULT  30
//
// DEVICES, what the daemon offers; every GPU is a slot of its own, registered as a worker
// of its own (the coordinator places one rank per worker), so one daemon can serve a
// whole multi-GPU host:
//   cpu          one CPU worker
//   cuda:N       one GPU worker, GPU index N as the CUDA runtime numbers them (after
//                CUDA_VISIBLE_DEVICES, which the ranks inherit, so they number them alike)
//   cuda:N,M,... one worker per listed GPU, in that order; no index twice
//   cuda:all     one worker per GPU cudaGetDeviceCount reports; an error (exit 2) in a
//                build without CUDA or on a host where the runtime sees no GPU
// With several GPUs, each slot works in <work dir>/cuda-N (the default work dir is then
// ./fp8-worker-cuda), and --cpus and --memory-gb are what EACH slot offers its rank.
// Every slot registers the same --address (the daemon's one metrics endpoint; its
// series carry a device label).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/log/log.h"
#include "common/version/version.h"
#include "fp8/v1/job.pb.h"

namespace fp8::worker {

inline constexpr const char* kWorkerVersion = fp8::kVersion;

struct WorkerConfig {
  std::string coordinator = "127.0.0.1:7070";
  // The worker bearer token (a secret: never logged, never passed to ranks).
  std::string token;
  // Where the token came from ("--token-file /x", "FP8_WORKER_TOKEN"), for messages.
  std::string token_source;
  v1::ResourceSpec::Device device_kind = v1::ResourceSpec::CPU;
  // "cpu" or "cuda:<N>" for one slot; for several GPUs their list, "cuda:0,1", which
  // only names the daemon in messages (SlotConfigs gives each slot its "cuda:<N>").
  std::string device_name = "cpu";
  // The GPU indices offered, one slot each, in order: {N} for cuda:N, empty for cpu.
  std::vector<int> cuda_devices;
  std::string address = "127.0.0.1:0";
  std::string listen_host = "127.0.0.1";  // the host part of address, given to ranks
  std::string metrics_address = "127.0.0.1:0";  // where /metrics is served (bind)
  std::string work_dir;                    // absolute
  std::string trainer;                     // absolute path of fp8-train
  int cpus = 0;
  // Memory a rank may use, GiB: the host's on a CPU worker, its GPU's on a CUDA worker
  // (offer_gpu_memory fills it in when --memory-gb is left out); 0 = unknown.
  double memory_gb = 0;
  std::string coordinator_ca;  // PEM file with TLS roots; empty = insecure channel
  int stop_grace_default_s = 30;
  log::Format log_format = log::Format::kText;  // the daemon's own lines
  log::Level log_level = log::Level::kInfo;
};

// Reads an environment variable; nullopt when unset. Injected so tests need no setenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();

struct ParsedCommandLine {
  // Set for --help / --version: print it to stdout and exit 0.
  std::optional<std::string> print_and_exit;
  WorkerConfig config;
};

// How many GPUs the CUDA runtime sees (for cuda:all); an error when it cannot tell.
// Injected so tests need no GPU; the daemon's is CountCudaDevices (cuda_device_count.h).
using CudaDeviceCounter = std::function<absl::StatusOr<int>()>;

// args excludes the program name. Errors (exit 2): InvalidArgument for a bad flag or
// variable, naming it (cuda:all without GPUs included); NotFound when no token was
// found, saying how to get one. count_cuda_devices is called for cuda:all only.
absl::StatusOr<ParsedCommandLine> parse_worker_config(const std::vector<std::string>& args, const EnvLookup& env,
                                                    const CudaDeviceCounter& count_cuda_devices);
// The same, counting GPUs with the CUDA runtime.
absl::StatusOr<ParsedCommandLine> parse_worker_config(const std::vector<std::string>& args,
                                                    const EnvLookup& env);

// One config per slot, each what a single-device worker of that slot would have: for
// several GPUs, device_name "cuda:<N>", cuda_devices {N} and work_dir <work_dir>/cuda-<N>
// (so that the slots' rank folders stay apart); the rest (token, coordinator, address,
// trainer, ...) as given. A single-device config comes back as it is.
std::vector<WorkerConfig> slot_configs(const WorkerConfig& config);

// The memory of GPU `index` in GiB (cuda_device_memory.h). Injected so tests need no GPU.
using CudaMemoryQuery = std::function<absl::StatusOr<double>(int index)>;

// A GPU slot offering no memory (--memory-gb left out) offers its GPU's, as `query` says;
// CPU slots and slots given --memory-gb stay as they are. Returns a line per GPU whose
// memory could not be read (its slot then offers 0: unknown), for the log.
std::vector<std::string> offer_gpu_memory(std::vector<WorkerConfig>& slots, const CudaMemoryQuery& query);

// "host:port" or "[v6]:port" -> host (without brackets). InvalidArgument otherwise.
absl::StatusOr<std::string> host_of_address(absl::string_view address);

}  // namespace fp8::worker
