#include "worker/fp8_worker/worker_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/fp8_worker/cuda_device_count.h"

namespace fp8::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kDefaultTokenFile[] = "fp8-worker.token";

// One setting: the flag's value when given, else the variable's, else nullopt. `from`
// names where the value came from, for error messages.
struct Setting {
  std::optional<std::string> value;
  std::string from;
};

Setting pick(const CLI::Option* flag, const std::string& flag_value, const EnvLookup& env,
             const std::string& var) {
  if (flag->count() > 0) return {flag_value, flag->get_name()};
  if (std::optional<std::string> v = env(var); v.has_value() && !v->empty()) return {*v, var};
  return {std::nullopt, ""};
}

absl::Status bad(const Setting& s, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(s.from, " '", *s.value, "': ", why));
}

absl::Status parse_address(const Setting& s, std::string* address, std::string* host) {
  absl::StatusOr<std::string> h = host_of_address(*s.value);
  if (!h.ok()) return bad(s, h.status().message());
  *address = *s.value;
  *host = *h;
  return absl::OkStatus();
}

constexpr char kDeviceForms[] = "expected cpu, cuda:<N>, a list cuda:<N>,<M>,... or cuda:all";

// "0,1,3" -> {0, 1, 3}: GPU indices, each written once.
absl::Status parse_cuda_list(const Setting& s, absl::string_view list, std::vector<int>* out) {
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    int index = -1;
    if (item.empty() || !std::all_of(item.begin(), item.end(), [](char ch) { return absl::ascii_isdigit(ch); }) ||
        !absl::SimpleAtoi(item, &index) || index < 0) {
      return bad(s, absl::StrCat(kDeviceForms, "; ", item.empty() ? "the list has an empty item" :
                                 absl::StrCat("'", item, "' is not a GPU index")));
    }
    if (std::find(out->begin(), out->end(), index) != out->end()) {
      return bad(s, absl::StrCat("cuda:", index, " is listed twice (each GPU is one slot)"));
    }
    out->push_back(index);
  }
  return absl::OkStatus();
}

absl::Status parse_device(const Setting& s, const CudaDeviceCounter& count_cuda_devices, WorkerConfig* c) {
  const std::string& v = *s.value;
  if (v == "cpu") {
    c->device_kind = v1::ResourceSpec::CPU;
    c->device_name = v;
    c->cuda_devices.clear();
    return absl::OkStatus();
  }
  if (!absl::StartsWith(v, "cuda:") || v.size() == 5) return bad(s, kDeviceForms);
  std::vector<int> devices;
  if (v == "cuda:all") {
    absl::StatusOr<int> count = count_cuda_devices();
    if (!count.ok()) return bad(s, absl::StrCat("cannot count the GPUs: ", count.status().message()));
    if (*count <= 0) {
      return bad(s, "the CUDA runtime sees no GPU on this host (check the driver and CUDA_VISIBLE_DEVICES)");
    }
    for (int i = 0; i < *count; ++i) devices.push_back(i);
  } else if (absl::Status st = parse_cuda_list(s, absl::string_view(v).substr(5), &devices); !st.ok()) {
    return st;
  }
  c->device_kind = v1::ResourceSpec::CUDA;
  c->cuda_devices = devices;
  c->device_name = absl::StrCat("cuda:", absl::StrJoin(devices, ","));
  return absl::OkStatus();
}

absl::Status parse_int(const Setting& s, int lo, int hi, int* out) {
  int v = 0;
  if (!absl::SimpleAtoi(*s.value, &v) || v < lo || v > hi) {
    return bad(s, absl::StrCat("expected a whole number in [", lo, ", ", hi, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status parse_gb(const Setting& s, double* out) {
  double v = 0;
  if (!absl::SimpleAtod(*s.value, &v) || !(v >= 0) || v > 1e9) {
    return bad(s, "expected a number of GiB >= 0 (0 = unknown)");
  }
  *out = v;
  return absl::OkStatus();
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

bool is_executable_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// fp8-train installed next to fp8-worker (build/<preset>/bin holds both).
std::string trainer_next_to_self() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "fp8-train";
  return (self.parent_path() / "fp8-train").string();
}

absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& from) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(from, " '", path, "': cannot read the worker token file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(from, " '", path, "': the worker token file is empty"));
  }
  return token;
}

std::string no_token_message() {
  return absl::StrCat(
      "no worker token: fp8-worker needs the coordinator's worker token to register. Ask the "
      "coordinator's operator for it, then put it in ./", kDefaultTokenFile,
      ", pass --token-file FILE (or FP8_WORKER_TOKEN_FILE=FILE), or set FP8_WORKER_TOKEN");
}

// Precedence: --token-file, FP8_WORKER_TOKEN, FP8_WORKER_TOKEN_FILE, ./fp8-worker.token.
absl::Status resolve_token(const CLI::Option* flag, const std::string& flag_value, const EnvLookup& env,
                          WorkerConfig* c) {
  if (flag->count() > 0) {
    absl::StatusOr<std::string> t = read_token_file(flag_value, "--token-file");
    if (!t.ok()) return t.status();
    c->token = *t;
    c->token_source = absl::StrCat("--token-file ", flag_value);
    return absl::OkStatus();
  }
  if (std::optional<std::string> v = env("FP8_WORKER_TOKEN"); v.has_value()) {
    std::string token(absl::StripAsciiWhitespace(*v));
    if (!token.empty()) {
      c->token = token;
      c->token_source = "FP8_WORKER_TOKEN";
      return absl::OkStatus();
    }
  }
  if (std::optional<std::string> v = env("FP8_WORKER_TOKEN_FILE"); v.has_value() && !v->empty()) {
    absl::StatusOr<std::string> t = read_token_file(*v, "FP8_WORKER_TOKEN_FILE");
    if (!t.ok()) return t.status();
    c->token = *t;
    c->token_source = absl::StrCat("FP8_WORKER_TOKEN_FILE ", *v);
    return absl::OkStatus();
  }
  std::error_code ec;
  if (!fs::exists(kDefaultTokenFile, ec)) return absl::NotFoundError(no_token_message());
  absl::StatusOr<std::string> t = read_token_file(kDefaultTokenFile, "default token file");
  if (!t.ok()) return absl::NotFoundError(absl::StrCat(t.status().message(), "; ", no_token_message()));
  c->token = *t;
  c->token_source = absolute(kDefaultTokenFile);
  return absl::OkStatus();
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<std::string> host_of_address(absl::string_view address) {
  absl::string_view host;
  absl::string_view port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError("expected [IPv6]:PORT");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return absl::InvalidArgumentError("expected HOST:PORT");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError("expected HOST:PORT (write an IPv6 host as [addr]:PORT)");
    }
  }
  int p = -1;
  if (host.empty()) return absl::InvalidArgumentError("expected HOST:PORT, the host is empty");
  if (!absl::SimpleAtoi(port, &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError("expected HOST:PORT with a port in [0, 65535]");
  }
  return std::string(host);
}

std::vector<WorkerConfig> slot_configs(const WorkerConfig& config) {
  if (config.cuda_devices.size() <= 1) return {config};
  std::vector<WorkerConfig> slots;
  for (int index : config.cuda_devices) {
    WorkerConfig slot = config;
    slot.device_name = absl::StrCat("cuda:", index);
    slot.cuda_devices = {index};
    slot.work_dir = absl::StrCat(config.work_dir, "/cuda-", index);
    slots.push_back(std::move(slot));
  }
  return slots;
}

std::vector<std::string> offer_gpu_memory(std::vector<WorkerConfig>& slots, const CudaMemoryQuery& query) {
  std::vector<std::string> unread;
  for (WorkerConfig& slot : slots) {
    if (slot.device_kind != v1::ResourceSpec::CUDA || slot.memory_gb > 0 || slot.cuda_devices.size() != 1) continue;
    absl::StatusOr<double> gb = query(slot.cuda_devices.front());
    if (gb.ok() && *gb > 0) {
      slot.memory_gb = *gb;
    } else {
      unread.push_back(absl::StrCat(slot.device_name, ": its memory is unknown (",
                                    gb.ok() ? "the runtime says 0" : gb.status().message(),
                                    "); jobs are placed on it without a memory check; --memory-gb sets it"));
    }
  }
  return unread;
}

absl::StatusOr<ParsedCommandLine> parse_worker_config(const std::vector<std::string>& args,
                                                    const EnvLookup& env) {
  return parse_worker_config(args, env, count_cuda_devices);
}

absl::StatusOr<ParsedCommandLine> parse_worker_config(const std::vector<std::string>& args, const EnvLookup& env,
                                                    const CudaDeviceCounter& count_cuda_devices) {
  CLI::App app("fp8-worker: offers this machine's device to the fp8 coordinator and runs the "
               "fp8-train ranks it assigns. Every flag can also come from the environment "
               "variable named in its description; the flag wins.",
               "fp8-worker");
  std::string coordinator, token_file, device, address, metrics_address, work_dir, trainer, cpus, memory_gb, ca,
      grace, log_format, log_level;
  CLI::Option* o_coordinator = app.add_option("--coordinator", coordinator,
      "HOST:PORT of the coordinator (FP8_COORDINATOR; default 127.0.0.1:7070)");
  CLI::Option* o_token = app.add_option("--token-file", token_file,
      "file holding the worker bearer token (FP8_WORKER_TOKEN_FILE; FP8_WORKER_TOKEN may hold "
      "the token itself; default ./fp8-worker.token)");
  CLI::Option* o_device = app.add_option("--device", device,
      "cpu, cuda:N, cuda:N,M,... or cuda:all (every GPU); each GPU registers as a worker of its "
      "own (FP8_DEVICE; default cpu)");
  CLI::Option* o_address = app.add_option("--address", address,
      "HOST:PORT this worker is reached at (its /metrics; port 0: the one --metrics-address binds); "
      "ranks listen on HOST (FP8_WORKER_ADDRESS; default 127.0.0.1:0)");
  CLI::Option* o_metrics = app.add_option("--metrics-address", metrics_address,
      "HOST:PORT to serve /metrics and /healthz on, e.g. 0.0.0.0:9401 in a container "
      "(FP8_WORKER_METRICS_ADDRESS; default: --address)");
  CLI::Option* o_work_dir = app.add_option("--work-dir", work_dir,
      "folder for each rank's job.yaml and output.log; with several GPUs each has a cuda-N folder in it "
      "(FP8_WORKER_DIR; default ./fp8-worker-<device>, ./fp8-worker-cuda for several GPUs)");
  CLI::Option* o_trainer = app.add_option("--trainer", trainer,
      "fp8-train executable (FP8_TRAINER; default: the one next to fp8-worker)");
  CLI::Option* o_cpus = app.add_option("--cpus", cpus, "CPU cores offered to ranks (FP8_WORKER_CPUS; 0 = unknown)");
  CLI::Option* o_memory = app.add_option("--memory-gb", memory_gb,
      "memory a rank may use in GiB: the host's on cpu, each GPU's on cuda (FP8_WORKER_MEMORY_GB; "
      "default: unknown on cpu, the GPU's own memory on cuda)");
  CLI::Option* o_ca = app.add_option("--coordinator-ca", ca,
      "PEM file of TLS root certificates for the coordinator (FP8_COORDINATOR_CA; default: plaintext)");
  CLI::Option* o_grace = app.add_option("--stop-grace-default", grace,
      "seconds between SIGTERM and SIGKILL when fp8-worker itself stops (FP8_STOP_GRACE_DEFAULT; default 30)");
  CLI::Option* o_log_format = app.add_option("--log-format", log_format,
      "text or json, one object per line for log collectors (FP8_LOG_FORMAT; default text)");
  CLI::Option* o_log_level = app.add_option("--log-level", log_level,
      "debug, info, warning or error: lines below it are dropped (FP8_LOG_LEVEL; default info)");
  app.set_version_flag("--version", std::string(kWorkerVersion));

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return ParsedCommandLine{app.help(), {}};
  } catch (const CLI::CallForVersion&) {
    return ParsedCommandLine{absl::StrCat("fp8-worker ", kWorkerVersion, "\n"), {}};
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(absl::StrCat(e.what(), " (see fp8-worker --help)"));
  }

  ParsedCommandLine out;
  WorkerConfig& c = out.config;
  if (Setting s = pick(o_coordinator, coordinator, env, "FP8_COORDINATOR"); s.value) {
    std::string host;
    if (absl::Status st = parse_address(s, &c.coordinator, &host); !st.ok()) return st;
  }
  if (Setting s = pick(o_device, device, env, "FP8_DEVICE"); s.value) {
    if (absl::Status st = parse_device(s, count_cuda_devices, &c); !st.ok()) return st;
  }
  if (Setting s = pick(o_address, address, env, "FP8_WORKER_ADDRESS"); s.value) {
    if (absl::Status st = parse_address(s, &c.address, &c.listen_host); !st.ok()) return st;
  }
  c.metrics_address = c.address;
  if (Setting s = pick(o_metrics, metrics_address, env, "FP8_WORKER_METRICS_ADDRESS"); s.value) {
    std::string host;
    if (absl::Status st = parse_address(s, &c.metrics_address, &host); !st.ok()) return st;
  }
  if (Setting s = pick(o_cpus, cpus, env, "FP8_WORKER_CPUS"); s.value) {
    if (absl::Status st = parse_int(s, 0, 1 << 20, &c.cpus); !st.ok()) return st;
  }
  if (Setting s = pick(o_memory, memory_gb, env, "FP8_WORKER_MEMORY_GB"); s.value) {
    if (absl::Status st = parse_gb(s, &c.memory_gb); !st.ok()) return st;
  }
  if (Setting s = pick(o_grace, grace, env, "FP8_STOP_GRACE_DEFAULT"); s.value) {
    if (absl::Status st = parse_int(s, 0, 3600, &c.stop_grace_default_s); !st.ok()) return st;
  }
  if (Setting s = pick(o_log_format, log_format, env, "FP8_LOG_FORMAT"); s.value) {
    absl::StatusOr<log::Format> f = log::parse_format(*s.value);
    if (!f.ok()) return bad(s, "expected text or json");
    c.log_format = *f;
  }
  if (Setting s = pick(o_log_level, log_level, env, "FP8_LOG_LEVEL"); s.value) {
    absl::StatusOr<log::Level> l = log::parse_level(*s.value);
    if (!l.ok()) return bad(s, "expected debug, info, warning or error");
    c.log_level = *l;
  }
  if (Setting s = pick(o_ca, ca, env, "FP8_COORDINATOR_CA"); s.value) {
    std::ifstream in(*s.value);
    if (!in) return bad(s, "cannot read the TLS root certificates file");
    c.coordinator_ca = absolute(*s.value);
  }
  {
    Setting s = pick(o_work_dir, work_dir, env, "FP8_WORKER_DIR");
    std::string dir = s.value.value_or("");
    if (dir.empty()) {  // one folder per device, so that two workers on a host stay apart
      // Several GPUs share one (each slot in a cuda-<N> folder of it, SlotConfigs).
      dir = "fp8-worker-" + (c.cuda_devices.size() > 1 ? std::string("cuda") : c.device_name);
      std::replace(dir.begin(), dir.end(), ':', '-');
    }
    c.work_dir = absolute(dir);
  }
  {
    Setting s = pick(o_trainer, trainer, env, "FP8_TRAINER");
    if (!s.value) s = {trainer_next_to_self(), "default trainer (next to fp8-worker)"};
    if (!is_executable_file(*s.value)) {
      return bad(s, "not an executable file; build fp8-train or pass --trainer PATH (FP8_TRAINER)");
    }
    c.trainer = absolute(*s.value);
  }
  if (absl::Status st = resolve_token(o_token, token_file, env, &c); !st.ok()) return st;
  return out;
}

}  // namespace fp8::worker
