// The NCCL process group on real GPUs (label gpu): every collective on device memory at
// world size 1 (one GPU) and 2 (two GPUs, one forked process per rank, meeting through a
// FileStore), the creation timeouts, a peer that dies, rejected arguments. Without a CUDA
// device the GPU tests skip and say why, and the no-device error path is tested instead.
//
// A CUDA context does not survive fork(), and the multi-rank tests fork one process per
// rank, so this process never touches CUDA itself: the device probe and every rank run in
// forked children, which report back through files and their exit status.

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fp8/arith.h"
#include "gtest/gtest.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/nccl/nccl_process_group.h"
#include "worker/engine/collectives/process_group.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine::collectives {
namespace {

namespace fs = std::filesystem;

// ---- processes ---------------------------------------------------------------------------

// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string name = (fs::temp_directory_path() / "fp8_nccl_test.XXXXXX").string();
    if (mkdtemp(name.data()) != nullptr) path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct ChildOutcome {
  bool ok = false;
  std::string text;  // what the child returned, or what went wrong with it
};

using ChildBody = std::function<absl::StatusOr<std::string>(int index)>;

// Runs body(0), ..., body(n - 1) in n forked processes at once and collects what each
// returned. Children still running after `limit` are killed (a hang is a failure, never a
// hung test).
std::vector<ChildOutcome> run_children(int n, const ChildBody& body, absl::Duration limit) {
  std::vector<ChildOutcome> outcomes(n);
  TempDir reports;
  if (reports.path().empty()) {
    for (ChildOutcome& o : outcomes) o.text = absl::StrCat("mkdtemp failed: ", std::strerror(errno));
    return outcomes;
  }
  const auto report_path = [&](int i) { return reports.path() / absl::StrCat("child-", i); };

  std::fflush(nullptr);  // or the children flush the parent's buffered output a second time
  std::vector<pid_t> pids(n, -1);
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      std::string text;
      try {
        absl::StatusOr<std::string> result = body(i);
        if (result.ok()) {
          code = 0;
          text = *std::move(result);
        } else {
          text = result.status().ToString();
        }
      } catch (const std::exception& e) {
        text = absl::StrCat("exception: ", e.what());
      }
      {
        std::ofstream out(report_path(i), std::ios::binary);
        out << text;
      }
      std::fflush(nullptr);
      _exit(code);  // no atexit handlers or static destructors of the parent's copy
    }
    if (pid < 0) {
      outcomes[i].text = absl::StrCat("fork failed: ", std::strerror(errno));
      continue;
    }
    pids[i] = pid;
  }

  std::vector<int> wait_status(n, 0);
  std::vector<bool> done(n, false);
  for (int i = 0; i < n; ++i) done[i] = pids[i] < 0;
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    bool all_done = true;
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      const pid_t w = waitpid(pids[i], &wait_status[i], WNOHANG);
      if (w == pids[i] || (w < 0 && errno != EINTR)) {
        done[i] = true;
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    if (absl::Now() >= deadline) {
      for (int i = 0; i < n; ++i) {
        if (done[i]) continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &wait_status[i], 0);
        done[i] = true;
        outcomes[i].text = absl::StrCat("still running after ", absl::FormatDuration(limit), "; killed");
        pids[i] = -1;
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }

  for (int i = 0; i < n; ++i) {
    if (pids[i] < 0) continue;  // fork failed or killed: text already says so
    std::ifstream in(report_path(i), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int status = wait_status[i];
    outcomes[i].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (WIFSIGNALED(status)) {
      text = absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")",
                          text.empty() ? "" : ": ", text);
    } else if (!outcomes[i].ok && text.empty()) {
      text = absl::StrCat("exited with status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, " without a report");
    }
    outcomes[i].text = std::move(text);
  }
  return outcomes;
}

// ---- the device probe ------------------------------------------------------------------------

struct DeviceProbe {
  int count = 0;
  std::string why;  // why there is no device, when count == 0
};

// cudaGetDeviceCount, asked in a child process so that this one stays free of CUDA.
const DeviceProbe& device_probe() {
  static const DeviceProbe probe = [] {
    DeviceProbe p;
    const std::vector<ChildOutcome> out = run_children(
        1,
        [](int) -> absl::StatusOr<std::string> {
          int count = 0;
          if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
            return absl::UnavailableError(absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(e), " (",
                                                       cudaGetErrorName(e), ")"));
          }
          return absl::StrCat(count);
        },
        absl::Seconds(120));
    if (!out[0].ok) {
      p.why = out[0].text;
    } else {
      p.count = std::atoi(out[0].text.c_str());
      if (p.count == 0) p.why = "cudaGetDeviceCount found 0 devices";
    }
    return p;
  }();
  return probe;
}

#define FP8_REQUIRE_CUDA_DEVICES(n)                                                                      \
  do {                                                                                                   \
    const DeviceProbe& probe_ = device_probe();                                                          \
    if (probe_.count == 0) GTEST_SKIP() << "no CUDA device: " << probe_.why;                             \
    if (probe_.count < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << probe_.count; \
  } while (false)

// ---- device memory and checks (run in the children) ---------------------------------------

struct CudaFree {
  void operator()(void* p) const { (void)cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

absl::Status cuda_check(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}

absl::StatusOr<DevicePtr> device_alloc(size_t bytes) {
  void* p = nullptr;
  FP8_RETURN_IF_ERROR(cuda_check(cudaMalloc(&p, bytes), "cudaMalloc"));
  return DevicePtr(p);
}

template <typename T>
absl::StatusOr<DevicePtr> to_device(const std::vector<T>& host) {
  FP8_ASSIGN_OR_RETURN(DevicePtr p, device_alloc(host.size() * sizeof(T)));
  FP8_RETURN_IF_ERROR(cuda_check(cudaMemcpy(p.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                                 "cudaMemcpy to device"));
  return p;
}

template <typename T>
absl::StatusOr<std::vector<T>> to_host(const void* device, size_t count) {
  std::vector<T> host(count);
  FP8_RETURN_IF_ERROR(
      cuda_check(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host"));
  return host;
}

template <typename T>
std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return absl::StrFormat("%.17g", static_cast<double>(v));
  } else {
    return absl::StrCat(+v);
  }
}

// Exact equality: every expected value here is exactly representable, whatever the order
// of summation.
template <typename T>
absl::Status expect_equal(absl::string_view what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return absl::InternalError(absl::StrCat(what, ": ", got.size(), " elements, expected ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", show(got[i]), ", expected ", show(want[i])));
    }
  }
  return absl::OkStatus();
}

// `s` has `code` and its message contains `fragment`.
absl::Status expect_error(absl::string_view what, const absl::Status& s, absl::StatusCode code,
                          absl::string_view fragment) {
  if (s.code() != code || !absl::StrContains(s.message(), fragment)) {
    return absl::InternalError(absl::StrCat(what, ": expected ", absl::StatusCodeToString(code), " containing '",
                                            fragment, "', got ", s.ToString()));
  }
  return absl::OkStatus();
}

uint8_t byte_pattern(int rank, size_t i) {
  return static_cast<uint8_t>((rank * 131 + i * 7 + (i >> 8) * 13 + 3) & 0xff);
}

std::vector<uint8_t> bytes_of(int rank, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = byte_pattern(rank, i);
  return v;
}

ProcessGroupOptions options_for(std::string prefix, absl::Duration timeout) {
  ProcessGroupOptions options;
  options.prefix = std::move(prefix);
  options.timeout = timeout;
  return options;
}

// ---- one rank of the collectives test ------------------------------------------------------

absl::Status check_all_gather(ProcessGroup& g, size_t bytes, bool in_place) {
  const int rank = g.rank();
  const int world = g.size();
  std::vector<uint8_t> want;
  for (int r = 0; r < world; ++r) {
    const std::vector<uint8_t> b = bytes_of(r, bytes);
    want.insert(want.end(), b.begin(), b.end());
  }
  const std::string what = absl::StrCat(in_place ? "in-place " : "", "all_gather of ", bytes, " bytes");
  if (in_place) {
    // Every other rank's slot holds junk that must be overwritten.
    std::vector<uint8_t> buffer(bytes * world, 0xEE);
    const std::vector<uint8_t> mine = bytes_of(rank, bytes);
    std::copy(mine.begin(), mine.end(), buffer.begin() + static_cast<std::ptrdiff_t>(rank * bytes));
    FP8_ASSIGN_OR_RETURN(DevicePtr buf, to_device(buffer));
    auto* base = static_cast<uint8_t*>(buf.get());
    FP8_RETURN_IF_ERROR(g.all_gather(base + rank * bytes, base, bytes));
    FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> got, to_host<uint8_t>(base, bytes * world));
    return expect_equal(what, got, want);
  }
  FP8_ASSIGN_OR_RETURN(DevicePtr send, to_device(bytes_of(rank, bytes)));
  FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(bytes * world));
  FP8_RETURN_IF_ERROR(g.all_gather(send.get(), recv.get(), bytes));
  FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> got, to_host<uint8_t>(recv.get(), bytes * world));
  return expect_equal(what, got, want);
}

// Rank r's reduce_scatter input: small integers, so every sum is exact.
float scatter_input(int r, size_t j, ReduceOp op) {
  if (op == ReduceOp::kSum) return static_cast<float>((r + 1) * 1024 + static_cast<int>(j % 1000));
  return static_cast<float>(static_cast<int>((r * 37 + j * 11) % 101) - 50);
}

absl::Status check_reduce_scatter(ProcessGroup& g, int64_t count, ReduceOp op, bool in_place) {
  const int rank = g.rank();
  const int world = g.size();
  const size_t n = static_cast<size_t>(count);
  std::vector<float> send(n * world);
  for (size_t j = 0; j < send.size(); ++j) send[j] = scatter_input(rank, j, op);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    float acc = scatter_input(0, rank * n + i, op);
    for (int r = 1; r < world; ++r) {
      const float v = scatter_input(r, rank * n + i, op);
      acc = op == ReduceOp::kSum ? acc + v : std::max(acc, v);
    }
    want[i] = acc;
  }
  const std::string what = absl::StrCat(in_place ? "in-place " : "", "reduce_scatter(", reduce_op_name(op), ") of ",
                                        count, " floats per rank");
  FP8_ASSIGN_OR_RETURN(DevicePtr sendbuf, to_device(send));
  auto* base = static_cast<float*>(sendbuf.get());
  if (in_place) {
    FP8_RETURN_IF_ERROR(g.reduce_scatter(base, base + rank * n, count, op));
    FP8_ASSIGN_OR_RETURN(std::vector<float> got, to_host<float>(base + rank * n, n));
    return expect_equal(what, got, want);
  }
  FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(n * sizeof(float)));
  FP8_RETURN_IF_ERROR(g.reduce_scatter(base, static_cast<float*>(recv.get()), count, op));
  FP8_ASSIGN_OR_RETURN(std::vector<float> got, to_host<float>(recv.get(), n));
  return expect_equal(what, got, want);
}

// bf16 sums (fsdp.reduce_dtype): small integers, so every partial sum is a bf16 value and
// the result exact whatever order NCCL adds in.
absl::Status check_bf16_reduce_scatter(ProcessGroup& g, int64_t count) {
  const int rank = g.rank();
  const int world = g.size();
  const size_t n = static_cast<size_t>(count);
  auto input = [](int r, size_t j) { return static_cast<float>(r + 1 + static_cast<int>(j % 8)); };
  std::vector<uint16_t> send(n * world);
  for (size_t j = 0; j < send.size(); ++j) send[j] = float_to_bf16(input(rank, j));
  std::vector<uint16_t> want(n);
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += input(r, rank * n + i);
    want[i] = float_to_bf16(sum);
  }
  FP8_ASSIGN_OR_RETURN(DevicePtr sendbuf, to_device(send));
  FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(n * sizeof(uint16_t)));
  const Bf16ReduceScatterPart part{static_cast<const uint16_t*>(sendbuf.get()), static_cast<uint16_t*>(recv.get()),
                                   count};
  FP8_RETURN_IF_ERROR(g.reduce_scatter_bf16_parts({&part, 1}));
  FP8_ASSIGN_OR_RETURN(std::vector<uint16_t> got, to_host<uint16_t>(recv.get(), n));
  return expect_equal(absl::StrCat("bf16 reduce_scatter of ", count, " values per rank"), got, want);
}

// Several all-gathers and reduce-scatters in one call each (one NCCL group): every part
// what its own call gives, an empty part among them.
absl::Status check_parts(ProcessGroup& g) {
  const int rank = g.rank();
  const int world = g.size();
  // Part k's bytes come from "rank" 10 * k + r, so that parts differ.
  const size_t gather_bytes[] = {1001, 0, 64, (size_t{1} << 20) + 5};
  std::vector<DevicePtr> keep;
  std::vector<AllGatherPart> gathers;
  for (size_t k = 0; k < std::size(gather_bytes); ++k) {
    const size_t n = gather_bytes[k];
    if (n == 0) {
      gathers.push_back({nullptr, nullptr, 0});
      continue;
    }
    FP8_ASSIGN_OR_RETURN(DevicePtr send, to_device(bytes_of(static_cast<int>(10 * k) + rank, n)));
    FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(n * world));
    gathers.push_back({send.get(), recv.get(), n});
    keep.push_back(std::move(send));
    keep.push_back(std::move(recv));
  }
  FP8_RETURN_IF_ERROR(g.all_gather_parts(gathers));
  for (size_t k = 0; k < gathers.size(); ++k) {
    const size_t n = gathers[k].bytes_per_rank;
    if (n == 0) continue;
    std::vector<uint8_t> want;
    for (int r = 0; r < world; ++r) {
      const std::vector<uint8_t> b = bytes_of(static_cast<int>(10 * k) + r, n);
      want.insert(want.end(), b.begin(), b.end());
    }
    FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> got, to_host<uint8_t>(gathers[k].recv, n * world));
    FP8_RETURN_IF_ERROR(expect_equal(absl::StrCat("all_gather_parts: part ", k, " of ", n, " bytes"), got, want));
  }

  // Part k's inputs are those of "rank" 3 * k + r.
  const int64_t counts[] = {1000, 0, 333};
  std::vector<ReduceScatterPart> scatters;
  for (size_t k = 0; k < std::size(counts); ++k) {
    const size_t n = static_cast<size_t>(counts[k]);
    if (n == 0) {
      scatters.push_back({nullptr, nullptr, 0});
      continue;
    }
    std::vector<float> send(n * world);
    for (size_t j = 0; j < send.size(); ++j) send[j] = scatter_input(static_cast<int>(3 * k) + rank, j, ReduceOp::kSum);
    FP8_ASSIGN_OR_RETURN(DevicePtr sendbuf, to_device(send));
    FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(n * sizeof(float)));
    scatters.push_back({static_cast<float*>(sendbuf.get()), static_cast<float*>(recv.get()), counts[k]});
    keep.push_back(std::move(sendbuf));
    keep.push_back(std::move(recv));
  }
  FP8_RETURN_IF_ERROR(g.reduce_scatter_parts(scatters, ReduceOp::kSum));
  for (size_t k = 0; k < scatters.size(); ++k) {
    const size_t n = static_cast<size_t>(scatters[k].count_per_rank);
    if (n == 0) continue;
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      float acc = scatter_input(static_cast<int>(3 * k), rank * n + i, ReduceOp::kSum);
      for (int r = 1; r < world; ++r) acc += scatter_input(static_cast<int>(3 * k) + r, rank * n + i, ReduceOp::kSum);
      want[i] = acc;
    }
    FP8_ASSIGN_OR_RETURN(std::vector<float> got, to_host<float>(scatters[k].recv, n));
    FP8_RETURN_IF_ERROR(expect_equal(absl::StrCat("reduce_scatter_parts: part ", k, " of ", n, " floats"), got, want));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status check_all_reduce(ProcessGroup& g, int64_t count, ReduceOp op, T (*input)(int rank, size_t i)) {
  const int world = g.size();
  const size_t n = static_cast<size_t>(count);
  std::vector<T> mine(n);
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = input(g.rank(), i);
    T acc = input(0, i);
    for (int r = 1; r < world; ++r) acc = op == ReduceOp::kSum ? acc + input(r, i) : std::max(acc, input(r, i));
    want[i] = acc;
  }
  FP8_ASSIGN_OR_RETURN(DevicePtr data, to_device(mine));
  FP8_RETURN_IF_ERROR(g.all_reduce(static_cast<T*>(data.get()), count, op));
  FP8_ASSIGN_OR_RETURN(std::vector<T> got, to_host<T>(data.get(), n));
  return expect_equal(absl::StrCat("all_reduce(", reduce_op_name(op), ") of ", count, " ",
                                   sizeof(T) == 8 ? "doubles" : "floats"),
                      got, want);
}

float float_sum_input(int r, size_t i) { return 0.25f * static_cast<float>(r + 1) + static_cast<float>(i); }
float float_max_input(int r, size_t i) { return static_cast<float>(static_cast<int>((r * 13 + i * 7) % 29) - 14); }
// 2^-40 next to values up to 2^10 needs 51 significant bits: exact in double, lost in float,
// so a reduction that went through float fails the comparison.
double double_sum_input(int r, size_t i) { return static_cast<double>(i + 1) + std::ldexp(r + 1, -40); }
double double_max_input(int r, size_t i) {
  return static_cast<double>(i) + (i % 2 == 0 ? 1 : -1) * std::ldexp(r, -40);
}

absl::Status check_broadcast(ProcessGroup& g, size_t bytes, int root) {
  const std::vector<uint8_t> want = bytes_of(100 + root, bytes);
  std::vector<uint8_t> mine = g.rank() == root ? want : std::vector<uint8_t>(bytes, 0);
  FP8_ASSIGN_OR_RETURN(DevicePtr data, to_device(mine));
  FP8_RETURN_IF_ERROR(g.broadcast(data.get(), bytes, root));
  FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> got, to_host<uint8_t>(data.get(), bytes));
  return expect_equal(absl::StrCat("broadcast of ", bytes, " bytes from rank ", root), got, want);
}

absl::StatusOr<std::string> collectives_rank(const fs::path& store_dir, int rank, int world, int device) {
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(store_dir));
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                       make_nccl_process_group(*store, rank, world, options_for("collectives/", absl::Seconds(120)),
                                               device, /*stream=*/nullptr));
  ProcessGroup& g = *group;
  if (g.rank() != rank || g.size() != world || g.backend_name() != "nccl") {
    return absl::InternalError(absl::StrCat("group says rank ", g.rank(), " of ", g.size(), " backend '",
                                            g.backend_name(), "', expected rank ", rank, " of ", world, " 'nccl'"));
  }
  // The test's own allocations go to the rank's device too.
  FP8_RETURN_IF_ERROR(cuda_check(cudaSetDevice(device), "cudaSetDevice"));

  FP8_RETURN_IF_ERROR(check_all_gather(g, 1001, /*in_place=*/false));
  FP8_RETURN_IF_ERROR(check_all_gather(g, 1001, /*in_place=*/true));
  FP8_RETURN_IF_ERROR(check_all_gather(g, (size_t{4} << 20) + 3, /*in_place=*/false));  // many chunks
  FP8_RETURN_IF_ERROR(check_reduce_scatter(g, 1000, ReduceOp::kSum, /*in_place=*/false));
  FP8_RETURN_IF_ERROR(check_reduce_scatter(g, 1000, ReduceOp::kMax, /*in_place=*/false));
  FP8_RETURN_IF_ERROR(check_reduce_scatter(g, 777, ReduceOp::kSum, /*in_place=*/true));
  FP8_RETURN_IF_ERROR(check_bf16_reduce_scatter(g, 1000));
  FP8_RETURN_IF_ERROR(check_parts(g));
  FP8_RETURN_IF_ERROR(check_all_reduce<float>(g, 1000, ReduceOp::kSum, float_sum_input));
  FP8_RETURN_IF_ERROR(check_all_reduce<float>(g, 1000, ReduceOp::kMax, float_max_input));
  FP8_RETURN_IF_ERROR(check_all_reduce<double>(g, 1000, ReduceOp::kSum, double_sum_input));
  FP8_RETURN_IF_ERROR(check_all_reduce<double>(g, 1000, ReduceOp::kMax, double_max_input));
  FP8_RETURN_IF_ERROR(check_broadcast(g, 777, 0));
  FP8_RETURN_IF_ERROR(check_broadcast(g, 777, world - 1));

  // Empty collectives are no-ops on every rank, whatever the pointers.
  FP8_RETURN_IF_ERROR(g.all_gather(nullptr, nullptr, 0));
  FP8_RETURN_IF_ERROR(g.reduce_scatter(nullptr, nullptr, 0, ReduceOp::kSum));
  FP8_RETURN_IF_ERROR(g.all_reduce(static_cast<float*>(nullptr), 0, ReduceOp::kMax));
  FP8_RETURN_IF_ERROR(g.all_reduce(static_cast<double*>(nullptr), 0, ReduceOp::kSum));
  FP8_RETURN_IF_ERROR(g.broadcast(nullptr, 0, 0));

  FP8_RETURN_IF_ERROR(g.barrier());
  // The group still works after all of that.
  FP8_RETURN_IF_ERROR(check_all_gather(g, 64, /*in_place=*/false));
  group.reset();  // finalize + destroy while every rank is still alive
  return std::string("ok");
}

// ---- tests ---------------------------------------------------------------------------------

TEST(NcclProcessGroupTest, UniqueIdKeyIsUnderThePrefix) {
  EXPECT_EQ(nccl_unique_id_key("job-7/attempt-2/"), "job-7/attempt-2/nccl/unique_id");
}

class NcclCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(NcclCollectivesTest, EveryCollectiveIsCorrectOnDeviceMemory) {
  const int world = GetParam();
  FP8_REQUIRE_CUDA_DEVICES(world);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const int devices = device_probe().count;
  const std::vector<ChildOutcome> outcomes = run_children(
      world, [&](int rank) { return collectives_rank(dir.path() / "store", rank, world, rank % devices); },
      absl::Seconds(400));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].text;
}

INSTANTIATE_TEST_SUITE_P(WorldSize, NcclCollectivesTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("ranks", info.param); });

TEST(NcclProcessGroupTest, RejectedArgumentsBreakTheGroup) {
  FP8_REQUIRE_CUDA_DEVICES(1);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      1,
      [&](int) -> absl::StatusOr<std::string> {
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(dir.path() / "store"));
        FP8_RETURN_IF_ERROR(cuda_check(cudaSetDevice(0), "cudaSetDevice"));
        FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(64));
        {
          FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> g,
                               make_nccl_process_group(*store, 0, 1, options_for("first/", absl::Seconds(60)), 0,
                                                       nullptr));
          std::vector<uint8_t> host(64, 1);
          FP8_RETURN_IF_ERROR(expect_error("all_gather from host memory", g->all_gather(host.data(), recv.get(), 64),
                                           absl::StatusCode::kInvalidArgument, "host memory"));
          // Broken now: the next call fails at once with the first error.
          FP8_RETURN_IF_ERROR(expect_error("barrier after a failure", g->barrier(),
                                           absl::StatusCode::kInvalidArgument, "broken"));
        }
        {
          FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> g,
                               make_nccl_process_group(*store, 0, 1, options_for("second/", absl::Seconds(60)), 0,
                                                       nullptr));
          FP8_RETURN_IF_ERROR(expect_error("broadcast from a root outside the group", g->broadcast(recv.get(), 64, 1),
                                           absl::StatusCode::kInvalidArgument, "root 1"));
        }
        FP8_RETURN_IF_ERROR(expect_error(
            "rank outside the group",
            make_nccl_process_group(*store, 2, 2, options_for("third/", absl::Seconds(60)), 0, nullptr).status(),
            absl::StatusCode::kInvalidArgument, "rank 2"));
        return std::string("ok");
      },
      absl::Seconds(300));
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].text;
}

// Rank 0 of a 2-rank group alone: the communicator never forms. And rank 1 alone: rank 0's
// unique id never arrives. Both must give up after the timeout instead of hanging.
TEST(NcclProcessGroupTest, CreationTimesOutWhenAPeerNeverJoins) {
  FP8_REQUIRE_CUDA_DEVICES(1);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      2,
      [&](int which) -> absl::StatusOr<std::string> {
        // Separate stores: the two children must not meet.
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store,
                             FileStore::open(dir.path() / absl::StrCat("store-", which)));
        const int rank = which;
        absl::StatusOr<std::unique_ptr<ProcessGroup>> g =
            make_nccl_process_group(*store, rank, 2, options_for("lonely/", absl::Seconds(3)), 0, nullptr);
        FP8_RETURN_IF_ERROR(expect_error(absl::StrCat("rank ", rank, " alone"), g.status(),
                                         absl::StatusCode::kDeadlineExceeded,
                                         rank == 0 ? "did not form" : "unique id"));
        return g.status().ToString();
      },
      absl::Seconds(120));
  EXPECT_TRUE(outcomes[0].ok) << "rank 0 alone: " << outcomes[0].text;
  EXPECT_TRUE(outcomes[1].ok) << "rank 1 alone: " << outcomes[1].text;
}

// Rank 1 dies after a working barrier, as a crashed rank would; rank 0's next collective must
// fail within the timeout (NCCL cannot name the peer) and leave the group broken.
TEST(NcclProcessGroupTest, DeadPeerFailsTheCollectiveInsteadOfHanging) {
  FP8_REQUIRE_CUDA_DEVICES(2);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      2,
      [&](int rank) -> absl::StatusOr<std::string> {
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(dir.path() / "store"));
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> g,
                             make_nccl_process_group(*store, rank, 2, options_for("dead-peer/", absl::Seconds(20)),
                                                     rank, nullptr));
        FP8_RETURN_IF_ERROR(g->barrier());
        if (rank == 1) _exit(0);  // no goodbye, no NCCL teardown
        FP8_RETURN_IF_ERROR(cuda_check(cudaSetDevice(rank), "cudaSetDevice"));
        constexpr size_t kBytes = size_t{1} << 20;
        FP8_ASSIGN_OR_RETURN(DevicePtr send, device_alloc(kBytes));
        FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(2 * kBytes));
        const absl::Status s = g->all_gather(send.get(), recv.get(), kBytes);
        if (s.ok()) return absl::InternalError("all_gather succeeded although rank 1 is dead");
        if (!absl::IsDeadlineExceeded(s) && !absl::IsUnavailable(s)) {
          return absl::InternalError(absl::StrCat("expected DeadlineExceeded or Unavailable, got ", s.ToString()));
        }
        if (!absl::StrContains(s.message(), "all_gather")) {
          return absl::InternalError(absl::StrCat("the error does not name the collective: ", s.ToString()));
        }
        const absl::Status later = g->barrier();
        if (later.code() != s.code() || !absl::StrContains(later.message(), "broken")) {
          return absl::InternalError(absl::StrCat("after the failure, barrier gave ", later.ToString()));
        }
        return s.ToString();
      },
      absl::Seconds(180));
  EXPECT_TRUE(outcomes[0].ok) << "rank 0: " << outcomes[0].text;
}

// A stream the test owns, destroyed last.
struct StreamDeleter {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;

absl::StatusOr<StreamPtr> make_stream() {
  cudaStream_t s = nullptr;
  FP8_RETURN_IF_ERROR(cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  return StreamPtr(s);
}

// Queued mode (FSDP's on GPUs): a batch starts after what the compute stream held when it
// was opened, the compute stream's later work sees its results once ordered after it, the
// host waits for neither, and the watchdog times it.
TEST(NcclProcessGroupTest, QueuedBatchesRunBetweenTheComputeStreamsWork) {
  FP8_REQUIRE_CUDA_DEVICES(1);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      1,
      [&](int) -> absl::StatusOr<std::string> {
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(dir.path() / "store"));
        FP8_RETURN_IF_ERROR(cuda_check(cudaSetDevice(0), "cudaSetDevice"));
        FP8_ASSIGN_OR_RETURN(StreamPtr compute, make_stream());
        constexpr size_t kBytes = size_t{64} << 20;
        FP8_ASSIGN_OR_RETURN(DevicePtr send, device_alloc(kBytes));
        FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(kBytes));
        FP8_ASSIGN_OR_RETURN(DevicePtr out, device_alloc(kBytes));
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> g,
                             make_nccl_process_group(*store, 0, 1, options_for("queued/", absl::Seconds(60)), 0,
                                                     nullptr, compute.get()));
        QueuedCollectives* q = g->queued();
        if (q == nullptr) return absl::InternalError("a group made with a compute stream offers no queued mode");
        for (int value : {7, 9}) {
          FP8_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(recv.get(), 0, kBytes, compute.get()), "memset"));
          FP8_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(send.get(), value, kBytes, compute.get()), "memset"));
          FP8_RETURN_IF_ERROR(q->open());
          FP8_RETURN_IF_ERROR(g->all_gather(send.get(), recv.get(), kBytes));
          FP8_ASSIGN_OR_RETURN(int64_t ticket, q->close("all_gather of the test"));
          FP8_RETURN_IF_ERROR(q->order_after(ticket));
          FP8_RETURN_IF_ERROR(
              cuda_check(cudaMemcpyAsync(out.get(), recv.get(), kBytes, cudaMemcpyDeviceToDevice, compute.get()),
                         "copy of the result"));
          FP8_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(compute.get()), "cudaStreamSynchronize"));
          FP8_ASSIGN_OR_RETURN(std::vector<uint8_t> got, to_host<uint8_t>(out.get(), kBytes));
          for (size_t i = 0; i < kBytes; i += 4099) {
            if (got[i] != value) {
              return absl::InternalError(absl::StrCat("byte ", i, " is ", int{got[i]}, ", not ", value,
                                                      ": the batch did not run between the compute stream's work"));
            }
          }
        }
        FP8_RETURN_IF_ERROR(q->health());
        // The watchdog counts a batch once it saw it done: within a few milliseconds.
        double comm_seconds = 0;
        for (int i = 0; i < 1000 && comm_seconds == 0; ++i) {
          comm_seconds += q->take_times().comm_seconds;
          absl::SleepFor(absl::Milliseconds(1));
        }
        if (!(comm_seconds > 0)) return absl::InternalError("the watchdog timed no batch");
        return absl::StrCat("ok, ", comm_seconds * 1e3, " ms in collectives");
      },
      absl::Seconds(300));
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].text;
}

// A queued batch whose peer died: the host never waits on it, so the watchdog must find it,
// abort the communicator (the compute stream then moves on) and break the group.
TEST(NcclProcessGroupTest, AQueuedBatchWithADeadPeerBreaksTheGroupWithinTheTimeout) {
  FP8_REQUIRE_CUDA_DEVICES(2);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      2,
      [&](int rank) -> absl::StatusOr<std::string> {
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(dir.path() / "store"));
        FP8_RETURN_IF_ERROR(cuda_check(cudaSetDevice(rank), "cudaSetDevice"));
        FP8_ASSIGN_OR_RETURN(StreamPtr compute, make_stream());
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> g,
                             make_nccl_process_group(*store, rank, 2, options_for("queued-dead/", absl::Seconds(10)),
                                                     rank, nullptr, compute.get()));
        FP8_RETURN_IF_ERROR(g->barrier());
        if (rank == 1) _exit(0);
        constexpr size_t kBytes = size_t{1} << 20;
        FP8_ASSIGN_OR_RETURN(DevicePtr send, device_alloc(kBytes));
        FP8_ASSIGN_OR_RETURN(DevicePtr recv, device_alloc(2 * kBytes));
        QueuedCollectives& q = *g->queued();
        FP8_RETURN_IF_ERROR(q.open());
        FP8_RETURN_IF_ERROR(g->all_gather(send.get(), recv.get(), kBytes));
        FP8_ASSIGN_OR_RETURN(int64_t ticket, q.close("all_gather of layers.0"));
        (void)q.order_after(ticket);
        // Returns once the abort ended the collective (the child's deadline guards a hang).
        (void)cudaStreamSynchronize(compute.get());
        const absl::Status s = q.health();
        if (!absl::IsDeadlineExceeded(s) && !absl::IsUnavailable(s)) {
          return absl::InternalError(absl::StrCat("expected DeadlineExceeded or Unavailable, got ", s.ToString()));
        }
        const absl::Status later = g->barrier();
        if (!absl::StrContains(later.message(), "broken")) {
          return absl::InternalError(absl::StrCat("after the failure, barrier gave ", later.ToString()));
        }
        return s.ToString();
      },
      absl::Seconds(180));
  EXPECT_TRUE(outcomes[0].ok) << "rank 0: " << outcomes[0].text;
}

// Without a GPU, creating a group fails with CUDA's reason instead of crashing.
TEST(NcclProcessGroupTest, WithoutADeviceCreationSaysWhy) {
  if (device_probe().count > 0) GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<ChildOutcome> outcomes = run_children(
      1,
      [&](int) -> absl::StatusOr<std::string> {
        FP8_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::open(dir.path() / "store"));
        const absl::Status s =
            make_nccl_process_group(*store, 0, 1, options_for("none/", absl::Seconds(5)), 0, nullptr).status();
        FP8_RETURN_IF_ERROR(
            expect_error("no device", s, absl::StatusCode::kFailedPrecondition, "no usable CUDA device"));
        return s.ToString();
      },
      absl::Seconds(120));
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].text;
}

}  // namespace
}  // namespace fp8::engine::collectives
