// bench_allgather: FSDP's weight all-gather with fp8 codes (1 byte per element) against
// bf16 (2 bytes) and fp32 (4 bytes), for Llama-sized weights across 2-4 local ranks.
//
//   bench_allgather [--ranks 2,4] [--shapes 1024x1024,4096x4096,14336x4096]
//                   [--repeats 20] [--backend gloo|nccl] [--quick] [--csv FILE]
//
// Each world size W runs as W forked processes that meet through a file store in a fresh
// temporary directory. A weight of R x C is sharded along dim 0 as FSDP does (ceil(R / W)
// rows per rank, the last padded) and every rank gathers the whole of it, once per dtype.
// Each repeat runs the three dtypes in turn, so that a drift in the machine's speed hits
// all of them alike, and starts with a different one each time, so that no dtype always
// follows the largest transfer. A timed all-gather starts right after a barrier, and its
// time is the slowest rank's (an all-reduce MAX of the ranks' elapsed times): the gather
// is done when the last rank holds the weight. Printed: the median and the min over
// repeats, after warm-up.
//
// Effective bandwidth = bytes one rank receives from its peers ((W-1)/W of the gathered
// weight) / time. As in FSDP, send and receive buffers are apart, so each gather also
// copies the rank's own shard locally (inside the time, not in the bytes). Unlike FSDP,
// which allocates the gathered weight per gather, the buffers here are allocated and
// touched once: this measures the transfer, not the allocator.
//
// --backend gloo (default): Gloo over TCP on 127.0.0.1, host memory. --backend nccl: NCCL
// on device memory, rank r on CUDA device r % device count; compiled only where the CUDA
// toolkit with NCCL was found at configure time, and it needs GPUs at run time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/local_ranks.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"

#ifdef FP8_BENCH_NCCL
#include <cuda_runtime.h>

#include "worker/engine/collectives/nccl/nccl_process_group.h"
#endif

namespace {

namespace collectives = fp8::engine::collectives;
using fp8::bench::fmt;

struct Shape {
  int64_t rows = 0, cols = 0;
  std::string name() const { return absl::StrCat(rows, "x", cols); }
  int64_t elements() const { return rows * cols; }
};

struct Dtype {
  const char* name;
  size_t bytes;  // per element on the wire
};
// fp8 first: it is the one the others are compared with.
constexpr Dtype kDtypes[] = {{"fp8", 1}, {"bf16", 2}, {"fp32", 4}};
constexpr int kNumDtypes = 3;

struct Config {
  std::vector<Shape> shapes;
  int repeats = 20;
  int warmup = 2;
  bool nccl = false;
};

// One (shape, dtype) at one world size, over repeats of the slowest rank's time.
struct Timing {
  double median_s = 0;
  double min_s = 0;
};

// Bytes of one rank's shard, with FSDP's padded dim-0 sharding.
size_t shard_bytes(const Shape& s, int world, const Dtype& d) {
  const int64_t rows = (s.rows + world - 1) / world;
  return static_cast<size_t>(rows * s.cols) * d.bytes;
}

// A buffer in the memory the backend gathers into: host memory for Gloo, device memory
// (of the current CUDA device) for NCCL.
class Buffer {
 public:
  Buffer(bool device, size_t bytes) : device_(device), bytes_(bytes) {
#ifdef FP8_BENCH_NCCL
    if (device_) {
      if (cudaMalloc(&data_, bytes) != cudaSuccess) fp8::bench::die(absl::StrCat("cudaMalloc of ", bytes, " bytes"));
      return;
    }
#endif
    data_ = std::malloc(bytes);
    if (data_ == nullptr) fp8::bench::die(absl::StrCat("out of memory allocating ", bytes, " bytes"));
  }
  ~Buffer() {
#ifdef FP8_BENCH_NCCL
    if (device_) {
      cudaFree(data_);
      return;
    }
#endif
    std::free(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  // Also touches every page, so that first-touch faults stay out of the timings.
  void fill(int value) {
#ifdef FP8_BENCH_NCCL
    if (device_) {
      cudaMemset(data_, value, bytes_);
      cudaDeviceSynchronize();
      return;
    }
#endif
    std::memset(data_, value, bytes_);
  }
  void write(const void* from, size_t n) {
#ifdef FP8_BENCH_NCCL
    if (device_) {
      cudaMemcpy(data_, from, n, cudaMemcpyHostToDevice);
      return;
    }
#endif
    std::memcpy(data_, from, n);
  }
  void read(size_t offset, void* to, size_t n) const {
#ifdef FP8_BENCH_NCCL
    if (device_) {
      cudaMemcpy(to, static_cast<const char*>(data_) + offset, n, cudaMemcpyDeviceToHost);
      return;
    }
#endif
    std::memcpy(to, static_cast<const char*>(data_) + offset, n);
  }

 private:
  bool device_;
  size_t bytes_;
  void* data_ = nullptr;
};

// What rank r's shard of dtype d is filled with, so that a gather that mixed up blocks
// shows.
int fill_value(int rank, int dtype) { return (7 * rank + dtype + 1) & 0xff; }

absl::Status check_gathered(const Buffer& recv, size_t per_rank, int world, int dtype, const std::string& what) {
  for (int r = 0; r < world; ++r) {
    for (size_t at : {size_t{0}, per_rank - 1}) {
      unsigned char got = 0;
      recv.read(static_cast<size_t>(r) * per_rank + at, &got, 1);
      if (got != fill_value(r, dtype)) {
        return absl::InternalError(absl::StrCat(what, ": byte ", at, " of rank ", r, "'s block is ", got,
                                                ", expected ", fill_value(r, dtype)));
      }
    }
  }
  return absl::OkStatus();
}

// One timed all-gather: all ranks start together after a barrier, and the time is the
// slowest rank's.
absl::StatusOr<double> timed_gather(collectives::ProcessGroup& g, const Buffer& send, Buffer& recv, size_t per_rank,
                                    Buffer& scalar) {
  if (absl::Status s = g.barrier(); !s.ok()) return s;
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = g.all_gather(send.data(), recv.data(), per_rank); !s.ok()) return s;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  scalar.write(&seconds, sizeof seconds);  // NCCL reduces device memory only
  if (absl::Status s = g.all_reduce(static_cast<double*>(scalar.data()), 1, collectives::ReduceOp::kMax); !s.ok()) return s;
  scalar.read(0, &seconds, sizeof seconds);
  return seconds;
}

Timing summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front()};
}

absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> join(const Config& cfg, int rank, int world,
                                                         const std::filesystem::path& dir) {
  absl::StatusOr<std::unique_ptr<collectives::FileStore>> store = collectives::FileStore::open(dir / "rendezvous");
  if (!store.ok()) return store.status();
  collectives::ProcessGroupOptions options;
  options.prefix = "bench_allgather/";
  options.timeout = absl::Seconds(120);
  if (!cfg.nccl) return collectives::make_gloo_process_group(**store, rank, world, options);
#ifdef FP8_BENCH_NCCL
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--backend nccl needs a CUDA GPU; none is usable on this machine (",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", ")"));
  }
  if (cudaSetDevice(rank % devices) != cudaSuccess) return absl::InternalError("cudaSetDevice");
  return collectives::make_nccl_process_group(**store, rank, world, options, rank % devices, nullptr);
#else
  return absl::UnimplementedError("this build has no NCCL");  // main() refuses earlier
#endif
}

// One rank at one world size: every shape and dtype, repeats interleaved by dtype. Rank 0
// writes "shape dtype median_s min_s" lines to `dir`/results.txt.
absl::Status rank_main(const Config& cfg, int rank, int world, const std::filesystem::path& dir) {
  absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> group = join(cfg, rank, world, dir);
  if (!group.ok()) return group.status();
  collectives::ProcessGroup& g = **group;
  Buffer scalar(cfg.nccl, sizeof(double));
  std::ofstream out;
  if (rank == 0) out.open(dir / "results.txt");
  for (size_t si = 0; si < cfg.shapes.size(); ++si) {
    const Shape& shape = cfg.shapes[si];
    std::vector<std::unique_ptr<Buffer>> send, recv;
    for (int d = 0; d < kNumDtypes; ++d) {
      const size_t per_rank = shard_bytes(shape, world, kDtypes[d]);
      send.push_back(std::make_unique<Buffer>(cfg.nccl, per_rank));
      recv.push_back(std::make_unique<Buffer>(cfg.nccl, per_rank * static_cast<size_t>(world)));
      send[d]->fill(fill_value(rank, d));
      recv[d]->fill(0);
    }
    std::vector<std::vector<double>> samples(kNumDtypes);
    for (int rep = 0; rep < cfg.warmup + cfg.repeats; ++rep) {
      for (int k = 0; k < kNumDtypes; ++k) {
        const int d = (rep + k) % kNumDtypes;  // each dtype leads in turn: no fixed order
        const size_t per_rank = send[d]->size();
        absl::StatusOr<double> t = timed_gather(g, *send[d], *recv[d], per_rank, scalar);
        if (!t.ok()) return t.status();
        if (rep == 0) {  // the gather really moved every rank's block
          const std::string what = absl::StrCat(shape.name(), " ", kDtypes[d].name, " all-gather");
          if (absl::Status s = check_gathered(*recv[d], per_rank, world, d, what); !s.ok()) return s;
        }
        if (rep >= cfg.warmup) samples[d].push_back(*t);
      }
    }
    for (int d = 0; d < kNumDtypes; ++d) {
      const Timing t = summarize(samples[d]);
      if (out) out << si << " " << d << " " << t.median_s << " " << t.min_s << "\n";
    }
  }
  return absl::OkStatus();
}

bool parse_shape(const std::string& text, Shape& s) {
  char x = 0;
  long long r = 0, c = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%lld%c%lld%c", &r, &x, &c, &extra) != 3 || (x != 'x' && x != 'X')) return false;
  if (r <= 0 || c <= 0) return false;
  s = {r, c};
  return true;
}

// results[world][shape][dtype]
using Results = std::map<int, std::vector<std::vector<Timing>>>;

void read_results(const std::filesystem::path& file, size_t shapes, std::vector<std::vector<Timing>>& out) {
  out.assign(shapes, std::vector<Timing>(kNumDtypes));
  std::ifstream in(file);
  size_t si = 0;
  int d = 0;
  Timing t;
  while (in >> si >> d >> t.median_s >> t.min_s) {
    if (si < shapes && d >= 0 && d < kNumDtypes) out[si][static_cast<size_t>(d)] = t;
  }
}

// One table per statistic (median, min): a row per shape and world size, dtypes side by
// side, then the two ratios.
void print_table(const Config& cfg, const Results& results, bool use_min) {
  fp8::bench::Table table({"shape", "bf16 MiB", "ranks", "fp8 ms", "bf16 ms", "fp32 ms", "fp8 GB/s", "bf16 GB/s",
                           "fp32 GB/s", "bf16/fp8", "fp32/fp8"});
  for (size_t si = 0; si < cfg.shapes.size(); ++si) {
    const Shape& s = cfg.shapes[si];
    for (const auto& [world, by_shape] : results) {
      std::vector<std::string> row = {s.name(), fmt(static_cast<double>(s.elements()) * 2 / (1 << 20), 1),
                                      std::to_string(world)};
      double seconds[kNumDtypes];
      for (int d = 0; d < kNumDtypes; ++d) {
        const Timing& t = by_shape[si][static_cast<size_t>(d)];
        seconds[d] = use_min ? t.min_s : t.median_s;
        row.push_back(fmt(1e3 * seconds[d], seconds[d] < 0.01 ? 3 : 2));
      }
      for (int d = 0; d < kNumDtypes; ++d) {
        const double received = static_cast<double>(shard_bytes(s, world, kDtypes[d])) * (world - 1);
        row.push_back(fmt(received / seconds[d] / 1e9, 2));
      }
      row.push_back(fmt(seconds[1] / seconds[0], 2) + "x");
      row.push_back(fmt(seconds[2] / seconds[0], 2) + "x");
      table.add(row);
    }
  }
  table.print();
}

// Issue 4's bar: fp8 >= 1.8x faster than bf16 for weights of 16 MiB (bf16) and more.
void print_target(const Config& cfg, const Results& results) {
  double worst = 0;
  std::string where;
  for (size_t si = 0; si < cfg.shapes.size(); ++si) {
    if (cfg.shapes[si].elements() * 2 < (int64_t{16} << 20)) continue;
    for (const auto& [world, by_shape] : results) {
      const double ratio = by_shape[si][1].median_s / by_shape[si][0].median_s;
      if (where.empty() || ratio < worst) {
        worst = ratio;
        where = absl::StrCat(cfg.shapes[si].name(), ", ", world, " ranks");
      }
    }
  }
  if (where.empty()) {
    std::printf("target (fp8 >= 1.8x faster than bf16 from 16 MiB): no shape of 16 MiB or more was run\n");
    return;
  }
  std::printf("target (fp8 >= 1.8x faster than bf16 for weights of 16 MiB and more, median): %s, lowest %.2fx (%s)\n",
              worst >= 1.8 ? "met" : "MISSED", worst, where.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  fp8::bench::apply_threads_from_environment();
  CLI::App app{
      "bench_allgather: fp8 vs bf16 vs fp32 all-gather of Llama-sized weights across local ranks.\n"
      "--backend nccl exists only in builds where the CUDA toolkit with NCCL was found, and runs only\n"
      "on a machine with CUDA GPUs (rank r on device r % count); this is "
#ifdef FP8_BENCH_NCCL
      "such a build."
#else
      "not such a build."
#endif
  };
  std::vector<int> ranks = {2, 4};
  std::vector<std::string> shape_args;
  int repeats = 0;
  std::string backend = "gloo", csv;
  bool quick = false;
  app.add_option("--ranks", ranks, "world sizes to run, each as that many forked processes")
      ->delimiter(',')
      ->check(CLI::Range(2, 64));
  app.add_option("--shapes", shape_args,
                 "weights as ROWSxCOLS, comma-separated (default 1024x1024,4096x4096,14336x4096)")
      ->delimiter(',');
  app.add_option("--repeats", repeats, "timed all-gathers per shape and dtype (default 20; --quick 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--backend", backend, "gloo (CPU, TCP over 127.0.0.1) or nccl (CUDA GPUs)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  app.add_flag("--quick", quick, "small shapes, few repeats: a few seconds");
  app.add_option("--csv", csv, "also write the results here");
  CLI11_PARSE(app, argc, argv);

  Config cfg;
  cfg.nccl = backend == "nccl";
#ifndef FP8_BENCH_NCCL
  if (cfg.nccl) {
    std::fprintf(stderr,
                 "error: --backend nccl: this build has no NCCL (the CUDA toolkit with NCCL was not found when it was "
                 "configured); use --backend gloo\n");
    return 2;
  }
#endif
  if (shape_args.empty()) {
    // A square attention projection, Llama-3-8B's MLP up-projection (w1/w3), and a small
    // weight where per-call latency dominates.
    shape_args = quick ? std::vector<std::string>{"1024x1024", "4096x2048"}
                       : std::vector<std::string>{"1024x1024", "4096x4096", "14336x4096"};
  }
  for (const std::string& a : shape_args) {
    Shape s;
    if (!parse_shape(a, s)) {
      std::fprintf(stderr, "error: --shapes: '%s' is not ROWSxCOLS (e.g. 4096x4096)\n", a.c_str());
      return 2;
    }
    cfg.shapes.push_back(s);
  }
  cfg.repeats = repeats > 0 ? repeats : quick ? 5 : 20;
  cfg.warmup = quick ? 1 : 2;

  // Nothing above starts a thread: the ranks are forked now, and each creates its own.
  Results results;
  for (int world : ranks) {
    if (results.count(world) > 0) continue;
    const bool ok = fp8::bench::run_local_ranks(
        world,
        [&](int rank, const std::filesystem::path& dir) {
          const absl::Status s = rank_main(cfg, rank, world, dir);
          if (s.ok()) return 0;
          std::fprintf(stderr, "bench_allgather [rank %d of %d]: %s\n", rank, world, std::string(s.message()).c_str());
          return 1;
        },
        [&](const std::filesystem::path& dir) {
          read_results(dir / "results.txt", cfg.shapes.size(), results[world]);
        });
    if (!ok) return 1;
  }

  // The machine, asked only now: a CUDA context in the parent before the forks would be
  // inherited half-made by every rank.
  std::string machine = fp8::bench::machine_peaks(fp8::cpu_backend()).machine;
#ifdef FP8_BENCH_NCCL
  if (cudaDeviceProp p; cfg.nccl && cudaGetDeviceProperties(&p, 0) == cudaSuccess) machine = p.name;
#endif
  std::printf("# bench_allgather %s on %s; backend %s (%s); %d repeats after %d warm-up, dtypes interleaved\n",
              fp8::bench::today().c_str(), machine.c_str(), backend.c_str(),
              cfg.nccl ? "device memory" : "host memory, TCP over 127.0.0.1", cfg.repeats, cfg.warmup);
  std::printf("# time: the slowest rank's, from a barrier to holding the whole weight; GB/s: bytes a rank receives\n"
              "# from its peers ((W-1)/W of the weight) / time, 1 GB = 1e9 B; bf16/fp8 = bf16 time / fp8 time\n");
  std::printf("\nmedian over repeats\n");
  print_table(cfg, results, /*use_min=*/false);
  std::printf("\nmin over repeats\n");
  print_table(cfg, results, /*use_min=*/true);
  std::printf("\n");
  print_target(cfg, results);

  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "shape,ranks,dtype,median_ms,min_ms,median_gb_per_s\n";
    for (const auto& [world, by_shape] : results) {
      for (size_t si = 0; si < cfg.shapes.size(); ++si) {
        for (int d = 0; d < kNumDtypes; ++d) {
          const Timing& t = by_shape[si][static_cast<size_t>(d)];
          const double received = static_cast<double>(shard_bytes(cfg.shapes[si], world, kDtypes[d])) * (world - 1);
          out << cfg.shapes[si].name() << "," << world << "," << kDtypes[d].name << "," << 1e3 * t.median_s << ","
              << 1e3 * t.min_s << "," << received / t.median_s / 1e9 << "\n";
        }
      }
    }
  }
  return 0;
}
