// The size limits the API declares on its fields (proto/fp8/v1/limits.proto), checked on a
// message in hand: the coordinator runs this on every request before it acts on it, and
// fp8ctl on a spec before sending it. Walks the message by reflection, so a limit added to
// a .proto applies without code here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace fp8::rpc {

// OK, or INVALID_ARGUMENT naming the first field over its limit and the limit:
//   "spec.labels: 400000 entries, more than the limit of 64"
//   "spec.data.path: 1048576 bytes, more than the limit of 4096"
// `prefix` is put before field paths ("spec." for a JobSpec checked on its own).
absl::Status check_request_limits(const google::protobuf::Message& message, std::string_view prefix = "");

// The fields of `type` and of the messages it holds (by path, "spec.labels") that can
// grow without a declared limit: a string, bytes, repeated or map field without one. The
// test of every service's requests expects none.
std::vector<std::string> unbounded_fields(const google::protobuf::Descriptor& type);

// `text` for an error message: at most `max_bytes` of it (cut at a character boundary),
// then "... (N bytes)" when it was longer, so that a long id or path sent by a client
// cannot make an error larger than the request was allowed to be.
std::string quote_for_error(std::string_view text, size_t max_bytes = 64);

}  // namespace fp8::rpc
