#include "common/metrics/listen_address.h"

#include "absl/status/status.h"

namespace fp8::metrics {

absl::StatusOr<ListenAddress> parse_listen_address(const std::string& address) {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError("metrics address " + address + ": " + what);
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return error("want host:port");
  ListenAddress out;
  out.host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  } else if (out.host.find(':') != std::string::npos) {
    return error("an IPv6 host needs brackets ([::1]:9400)");
  }
  if (out.host.empty()) out.host = "0.0.0.0";
  if (port.empty()) return error("no port");
  if (port.find_first_not_of("0123456789") != std::string::npos) {
    return error("port '" + port + "' is not a number");
  }
  // Parsed by hand: at most 6 digits matter, and longer runs are out of range anyway.
  if (port.size() > 5 || std::stoi(port) > 65535) return error("port out of range");
  out.port = std::stoi(port);
  return out;
}

}  // namespace fp8::metrics
