#include "common/metrics/http_wire.h"

#include <algorithm>

namespace fp8::metrics {
namespace {

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return status < 500 ? "Client Error" : "Server Error";
  }
}

}  // namespace

size_t request_head_length(std::string_view received) {
  const size_t crlf = received.find("\r\n\r\n");
  const size_t lf = received.find("\n\n");
  const size_t crlf_end = crlf == std::string_view::npos ? std::string_view::npos : crlf + 4;
  const size_t lf_end = lf == std::string_view::npos ? std::string_view::npos : lf + 2;
  const size_t end = std::min(crlf_end, lf_end);
  return end == std::string_view::npos ? 0 : end;
}

std::optional<RequestLine> parse_request_line(std::string_view head) {
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return std::nullopt;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) return std::nullopt;
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (target.empty() || target.front() != '/') return std::nullopt;
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/") return std::nullopt;
  return RequestLine{line.substr(0, sp1), target.substr(0, target.find('?'))};
}

std::string serialize_response(const HttpResponse& response) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + reason(response.status) + "\r\n";
  if (response.status == 405) out += "Allow: GET\r\n";
  out += "Content-Type: " + response.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += response.body;
  return out;
}

}  // namespace fp8::metrics
