// Shared plumbing for the benchmarks: choosing a backend, timing on it, device buffers,
// the machine's peak rates, and printing aligned tables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fp8/fp8.h"

namespace fp8::bench {

// Command-line options common to every benchmark.
struct Options {
  std::string device = "cpu";  // cpu | cuda
  bool quick = false;          // fewer, smaller shapes (what the demo runs)
  int max_size = 0;            // skip shapes with any dimension above this (0 = no limit)
  std::string csv;             // also write the raw timings here (for side-by-side tools)
};
Options parse_options(int argc, char** argv, const char* usage);

// The backend for options.device; exits with a clear message when unavailable.
Backend& open_backend(const Options& o);

// Median over `reps` batches of the mean time of `iters` calls, in seconds. The batch
// is bracketed by synchronize() so asynchronous backends are timed end to end.
double time_it(Backend& b, const std::function<void()>& fn, int iters, int reps = 5, int warmup = 2);

// Times several functions side by side: each repetition runs one batch of each in turn,
// so drifts in the machine's speed (other load, clocks) hit all of them alike. Returns
// each one's median batch-mean time, in seconds.
std::vector<double> time_interleaved(Backend& b, const std::vector<std::function<void()>>& fns, int iters,
                                     int reps = 7, int warmup = 2);
// The same with a batch length per function (iters[i] calls of fns[i] per batch), for
// functions whose costs differ tenfold: equal batch lengths keep each batch well above
// the synchronisation overhead without making the slow ones take seconds.
std::vector<double> time_interleaved(Backend& b, const std::vector<std::function<void()>>& fns,
                                     const std::vector<int>& iters, int reps = 7, int warmup = 2);

// Iterations so one batch takes about `target_s` given one call of ~`estimate_s`.
int iterations_for(double estimate_s, double target_s = 0.2);

// A buffer in backend memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& b, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void upload(const void* host, size_t bytes);

 private:
  Backend& b_;
  void* ptr_ = nullptr;
};

// Random N(0, 1) values into backend memory as fp32 (generated on the host once).
void fill_gaussian(DeviceBuffer& buf, int64_t n, uint32_t seed);

// Peak rates of the machine behind a backend, where known; 0 when unknown.
struct Peaks {
  std::string machine;
  double hp_tflops = 0;   // the high-precision baseline's peak (bf16 on GPU, fp32 on CPU)
  double fp8_tflops = 0;  // fp8 tensor-core peak (GPU only)
};
Peaks machine_peaks(Backend& b);

// A plain table: add rows of cells, print with aligned columns.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double v, int decimals);
std::string today();  // YYYY-MM-DD, for the header RESULTS.md quotes

[[noreturn]] void die(const std::string& what);
void check(const absl::Status& s, const char* what);

// FP8_NUM_THREADS, where set (> 0), sizes the CPU kernels' thread pool, as in fp8-train.
// Call at the top of main, before any kernel runs.
void apply_threads_from_environment();

}  // namespace fp8::bench
