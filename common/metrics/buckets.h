// Bucket boundaries for histograms. The +Inf bucket is always implied and never listed.
#pragma once

#include <string>
#include <vector>

namespace fp8::metrics {

// start, start*factor, ..., start*factor^(count-1). Aborts unless start > 0, factor > 1
// and count >= 1.
std::vector<double> exponential_buckets(double start, double factor, int count);

// For durations in seconds from 1 ms to 10 s (RPC handling, heartbeats, queue waits):
// 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10.
std::vector<double> default_latency_buckets();

namespace internal {

// The bounds as a histogram uses them: a trailing +Inf dropped (it is implied); aborts
// naming `metric` unless they are finite and strictly increasing.
std::vector<double> checked_buckets(const std::string& metric, std::vector<double> bounds);

}  // namespace internal
}  // namespace fp8::metrics
