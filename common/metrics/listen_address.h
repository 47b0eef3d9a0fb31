// host:port as given on the command line (--metrics-address 127.0.0.1:9400).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fp8::metrics {

struct ListenAddress {
  std::string host;  // "0.0.0.0" for an empty host (":9400"); IPv6 without brackets
  int port = 0;      // 0: the system picks a free port
};

// Accepts "host:port", ":port" and "[v6addr]:port". Errors are InvalidArgument and read
// "metrics address <address>: <what is wrong>".
absl::StatusOr<ListenAddress> parse_listen_address(const std::string& address);

}  // namespace fp8::metrics
