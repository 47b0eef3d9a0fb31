// Early return on error, for long straight-line sequences of fallible calls (kernel calls
// in the model and trainer, statements in the coordinator's store), where
// `if (auto s = ...; !s.ok()) return s;` on every line would bury what they do.
#pragma once

#include "absl/status/status.h"

#define FP8_CONCAT_INNER(a, b) a##b
#define FP8_CONCAT(a, b) FP8_CONCAT_INNER(a, b)

// Evaluates an absl::Status expression once; returns it from the caller if not OK.
#define FP8_RETURN_IF_ERROR(expr)                                   \
  do {                                                              \
    if (::absl::Status fp8_status_ = (expr); !fp8_status_.ok()) {   \
      return fp8_status_;                                           \
    }                                                               \
  } while (false)

// `lhs = value of an absl::StatusOr expression`, returning its status from the caller if
// not OK. lhs may be a declaration: FP8_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(...)).
#define FP8_ASSIGN_OR_RETURN(lhs, expr) FP8_ASSIGN_OR_RETURN_IMPL(FP8_CONCAT(fp8_statusor_, __LINE__), lhs, expr)
#define FP8_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)
