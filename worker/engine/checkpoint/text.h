// Message building that accepts std::string_view.
//
// Debian's abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW
// is 0), so absl::StrCat rejects the std::string_view this library's API uses. cat()
// converts such arguments and forwards everything to absl::StrCat.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fp8::checkpoint {

inline absl::string_view to_absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view to_std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

namespace internal {
template <typename T>
decltype(auto) for_str_cat(const T& value) {
  if constexpr (std::is_same_v<T, std::string_view>) {
    return to_absl(value);
  } else {
    return (value);  // a reference: no copy
  }
}
}  // namespace internal

template <typename... Args>
std::string cat(const Args&... args) {
  return absl::StrCat(internal::for_str_cat(args)...);
}

}  // namespace fp8::checkpoint
