// Fatal errors for programming mistakes in how the metrics are declared or used (a bad
// name, a family registered twice with other labels, a wrong number of label values).
// These are bugs in the daemon, not conditions to handle at run time, so they abort at
// once with a message naming the metric, rather than silently exporting wrong series.
#pragma once

#include <string>

namespace fp8::metrics::internal {

// Prints "fp8 metrics: <message>" to stderr and aborts.
[[noreturn]] void fatal(const std::string& message);

}  // namespace fp8::metrics::internal
