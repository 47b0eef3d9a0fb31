// Names and sizes of the core's enums; used in error messages and benchmark tables.
#include "fp8/fp8.h"

namespace fp8 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kE4M3:
    case DType::kE5M2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kE4M3: return "float8_e4m3fn";
    case DType::kE5M2: return "float8_e5m2";
  }
  return "?";
}

const char* format_name(Format f) { return f == Format::kE4M3 ? "e4m3" : "e5m2"; }

DType fp8_dtype(Format f) { return f == Format::kE4M3 ? DType::kE4M3 : DType::kE5M2; }

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::kTensorwise: return "tensorwise";
    case Granularity::kRowwise: return "rowwise";
    case Granularity::kColumnwise: return "columnwise";
    case Granularity::kBlock1x128: return "block1x128";
    case Granularity::kBlock128x128: return "block128x128";
  }
  return "?";
}

int64_t scale_count(Granularity g, int64_t rows, int64_t cols) {
  switch (g) {
    case Granularity::kTensorwise: return 1;
    case Granularity::kRowwise: return rows;
    case Granularity::kColumnwise: return cols;
    case Granularity::kBlock1x128: return rows * scale_blocks(cols);
    case Granularity::kBlock128x128: return scale_blocks(rows) * block128x128_ld(cols);
  }
  return 0;
}

}  // namespace fp8
