#include "bench/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/cpu/parallel.h"

namespace fp8::bench {

void die(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  std::exit(2);
}

void check(const absl::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + std::string(s.message()));
}

Options parse_options(int argc, char** argv, const char* usage) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      o.device = argv[++i];
    } else if (a.rfind("--device=", 0) == 0) {
      o.device = a.substr(9);
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--max-size" && i + 1 < argc) {
      o.max_size = std::atoi(argv[++i]);
    } else if (a == "--csv" && i + 1 < argc) {
      o.csv = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::printf("%s\n", usage);
      std::exit(0);
    } else {
      std::fprintf(stderr, "error: unknown argument '%s'\n%s\n", a.c_str(), usage);
      std::exit(2);
    }
  }
  if (o.device != "cpu" && o.device != "cuda") die("--device must be cpu or cuda, got '" + o.device + "'");
  return o;
}

Backend& open_backend(const Options& o) {
  if (o.device == "cpu") return cpu_backend();
  static absl::StatusOr<std::unique_ptr<Backend>> cuda = make_cuda_backend(0, nullptr);
  if (!cuda.ok()) die("cannot open the CUDA backend: " + std::string(cuda.status().message()));
  return **cuda;
}

double time_it(Backend& b, const std::function<void()>& fn, int iters, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  check(b.synchronize(), "synchronize");
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    check(b.synchronize(), "synchronize");
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double>(t1 - t0).count() / iters);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

std::vector<double> time_interleaved(Backend& b, const std::vector<std::function<void()>>& fns, int iters, int reps,
                                     int warmup) {
  return time_interleaved(b, fns, std::vector<int>(fns.size(), iters), reps, warmup);
}

std::vector<double> time_interleaved(Backend& b, const std::vector<std::function<void()>>& fns,
                                     const std::vector<int>& iters, int reps, int warmup) {
  if (iters.size() != fns.size()) die("time_interleaved: one iteration count per function");
  for (const auto& fn : fns) {
    for (int i = 0; i < warmup; ++i) fn();
  }
  check(b.synchronize(), "synchronize");
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters[f]; ++i) fns[f]();
      check(b.synchronize(), "synchronize");
      samples[f].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters[f]);
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return medians;
}

int iterations_for(double estimate_s, double target_s) {
  if (estimate_s <= 0) return 10;
  return std::clamp(static_cast<int>(target_s / estimate_s), 1, 1000);
}

DeviceBuffer::DeviceBuffer(Backend& b, size_t bytes) : b_(b) {
  auto p = b.allocate(bytes);
  check(p.status(), "allocate");
  ptr_ = *p;
}

DeviceBuffer::~DeviceBuffer() { b_.deallocate(ptr_); }

void DeviceBuffer::upload(const void* host, size_t bytes) { check(b_.copy_from_host(ptr_, host, bytes), "upload"); }

void fill_gaussian(DeviceBuffer& buf, int64_t n, uint32_t seed) {
  std::vector<float> host(static_cast<size_t>(n));
  // Several generators in parallel: a 16384^2 matrix is 268M values.
  const int workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(w));
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = w; i < n; i += workers) host[static_cast<size_t>(i)] = d(rng);
    });
  }
  for (auto& t : threads) t.join();
  buf.upload(host.data(), host.size() * sizeof(float));
}

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

double cpu_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  }
  return 0;
}

bool cpu_has(const char* flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) {
      if (w == flag) return true;
    }
    return false;
  }
  return false;
}

}  // namespace

Peaks machine_peaks(Backend& b) {
  Peaks p;
  if (!b.is_cuda()) {
    // fp32 FMA peak: cores x clock x (2 FMA pipes x 8 lanes x 2 flops) with AVX2+FMA.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const double flops_per_cycle = cpu_has("avx512f") ? 64 : (cpu_has("avx2") && cpu_has("fma")) ? 32 : 8;
    p.machine = cpu_model() + ", " + std::to_string(cores) + " cores";
    p.hp_tflops = cores * cpu_mhz() * 1e6 * flops_per_cycle / 1e12;
    return p;
  }
  p.machine = b.name();
  // Dense tensor-core peaks (without sparsity) from NVIDIA's datasheets for the SXM parts.
  if (p.machine.find("H100") != std::string::npos || p.machine.find("H200") != std::string::npos) {
    p.hp_tflops = 989;
    p.fp8_tflops = 1979;
  }
  return p;
}

void Table::print() const {
  std::vector<size_t> width;
  for (const auto& r : rows_) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (size_t ri = 0; ri < rows_.size(); ++ri) {
    std::string line;
    for (size_t i = 0; i < rows_[ri].size(); ++i) {
      line.append(i == 0 ? "| " : " | ");
      line.append(width[i] - rows_[ri][i].size(), ' ');
      line.append(rows_[ri][i]);
    }
    std::printf("%s |\n", line.c_str());
    if (ri == 0) {
      std::string sep;
      for (size_t i = 0; i < width.size(); ++i) {
        sep.push_back('|');
        sep.append(width[i] + 2, '-');
      }
      std::printf("%s|\n", sep.c_str());
    }
  }
  std::fflush(stdout);
}

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

void apply_threads_from_environment() {
  if (const char* env = std::getenv("FP8_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    fp8::cpu::set_num_threads(std::atoi(env));
  }
}

}  // namespace fp8::bench
