// The little of HTTP/1.1 that http_loop.h speaks: finding the end of a request head,
// reading its request line, and writing a whole response with Connection: close.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fp8::metrics {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The length of the request head at the start of `received`, through the blank line that
// ends it (CRLF CRLF, or a bare LF LF from a lenient client); 0 while it is incomplete.
size_t request_head_length(std::string_view received);

struct RequestLine {
  std::string_view method;
  std::string_view path;  // the target without its query string
};

// The first line of a request head ("GET /metrics?x=1 HTTP/1.1"); nullopt unless it is
// METHOD SP TARGET SP HTTP/x.y with an origin-form target (starting with '/').
std::optional<RequestLine> parse_request_line(std::string_view head);

// Status line, Content-Type, Content-Length, Connection: close, then the body.
std::string serialize_response(const HttpResponse& response);

}  // namespace fp8::metrics
