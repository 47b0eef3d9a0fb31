#include "worker/fp8_train/device_peak.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fp8::train_cli {
namespace {

// Dense (not "with sparsity") tensor-core rates from NVIDIA's Hopper data sheets, in
// FLOP/s, by form factor; fp32 is the non-tensor-core rate.
struct GpuPeaks {
  const char* model;
  double fp8, bf16, fp32;
};
constexpr GpuPeaks kSxm{"SXM", 1979e12, 989.5e12, 67e12};
constexpr GpuPeaks kPcie{"PCIe", 1513e12, 756.5e12, 51e12};
constexpr GpuPeaks kNvl{"NVL", 1670.5e12, 835.5e12, 60e12};

DevicePeak gpu_peak(const v1::JobSpec& spec, const std::string& device_name) {
  const bool hopper = absl::StrContains(device_name, "H100") || absl::StrContains(device_name, "H200");
  if (!hopper) return {};
  const GpuPeaks& p = absl::StrContains(device_name, "PCIe") ? kPcie
                      : absl::StrContains(device_name, "NVL") ? kNvl
                                                              : kSxm;
  const char* gpu = absl::StrContains(device_name, "H200") ? "H200" : "H100";
  if (spec.fp8().recipe() != v1::Fp8Spec::NONE) return {p.fp8, absl::StrCat(gpu, " ", p.model, " data sheet, dense fp8")};
  if (spec.train().compute_dtype() == v1::TrainSpec::BF16) {
    return {p.bf16, absl::StrCat(gpu, " ", p.model, " data sheet, dense bf16")};
  }
  return {p.fp32, absl::StrCat(gpu, " ", p.model, " data sheet, fp32")};
}

// A square sgemm big enough to run at the BLAS's full rate, best of a few after one to
// warm up, on the threads this process trains with.
DevicePeak cpu_peak() {
  constexpr int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a), c(a.size());
  double best = 0;
  for (int round = 0; round < 4; ++round) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (round > 0 && took.count() > 0) best = std::max(best, 2.0 * n * n * n / took.count());
  }
  return {best, "sgemm measured here"};
}

}  // namespace

DevicePeak device_peak(const v1::JobSpec& spec, const engine::Device& device) {
  if (device.is_cuda()) return gpu_peak(spec, device.backend().name());
  return cpu_peak();
}

}  // namespace fp8::train_cli
