#include "client/fp8ctl/format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fp8::ctl {

std::string job_state_name(v1::Job::State state) {
  if (state == v1::Job::STATE_UNSPECIFIED) return "UNKNOWN";
  return v1::Job::State_Name(state);
}

std::string attempt_state_name(v1::Attempt::State state) {
  if (state == v1::Attempt::STATE_UNSPECIFIED) return "UNKNOWN";
  return v1::Attempt::State_Name(state);
}

std::string recipe_name(v1::Fp8Spec::Recipe recipe) {
  if (recipe == v1::Fp8Spec::RECIPE_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(v1::Fp8Spec::Recipe_Name(recipe));
}

std::string device_name(v1::ResourceSpec::Device device) {
  if (device == v1::ResourceSpec::DEVICE_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(v1::ResourceSpec::Device_Name(device));
}

std::string mesh_text(const v1::JobSpec& spec) {
  return absl::StrCat(data_parallel_ranks(spec), " data-parallel x ", std::max(1, spec.parallel().tensor()),
                      " tensor-parallel ranks");
}

bool is_final(v1::Job::State state) {
  return state == v1::Job::SUCCEEDED || state == v1::Job::FAILED || state == v1::Job::CANCELLED;
}

std::string local_time(int64_t unix_ms, bool with_date) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, with_date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
  return buf;
}

std::string age(int64_t ms) {
  const int64_t s = ms < 0 ? 0 : ms / 1000;
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm", s / 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string clock_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(std::min(seconds, 1e9)));
  if (s < 3600) return absl::StrFormat("%d:%02d", s / 60, s % 60);
  return absl::StrFormat("%d:%02d:%02d", s / 3600, (s % 3600) / 60, s % 60);
}

std::string si_rate(double v) {
  if (!std::isfinite(v)) return "?";
  if (v < 1000) return absl::StrFormat("%.0f", v);
  if (v < 1e6) return absl::StrFormat("%.1fk", v / 1e3);
  if (v < 1e9) return absl::StrFormat("%.2fM", v / 1e6);
  return absl::StrFormat("%.2fG", v / 1e9);
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace fp8::ctl
