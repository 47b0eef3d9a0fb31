// An SVG document as PNG bytes, for `fp8ctl plot --out FILE.png`: Debian's librsvg draws
// the very SVG fp8ctl writes (at twice its size, on white), so both formats show the same
// chart. librsvg (librsvg2-2) is opened at run time, so fp8ctl starts and writes SVG and
// CSV on a host or image without it; only PNG needs it.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fp8::ctl {

// FailedPrecondition, saying what to install, when librsvg cannot be loaded;
// InvalidArgument when it cannot read `svg`.
absl::StatusOr<std::string> render_png(const std::string& svg);

}  // namespace fp8::ctl
