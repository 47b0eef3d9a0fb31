// A protobuf message as the Document that -o json|yaml prints: the .proto field names (as
// in job.yaml), int64s as JSON numbers, enums by name, every scalar field (zeros too, so
// that scripts need not know proto3 drops defaults) but unset messages and optional fields
// left out, and times readable: an int64 field `X_unix_ms` becomes `X_time` (`time` for
// `time_unix_ms`), an RFC 3339 UTC string, or null for 0 (not yet).
#pragma once

#include <cstdint>
#include <string>

#include "client/fp8ctl/document.h"
#include "google/protobuf/message.h"

namespace fp8::ctl {

Document message_document(const google::protobuf::Message& message);

// "YYYY-MM-DDThh:mm:ss.mmmZ"; a null Document for 0 or less.
Document time_document(int64_t unix_ms);

}  // namespace fp8::ctl
