#include "cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace fp8::cuda::cublaslt {
namespace {

// cuBLASLt 13's soname; the toolkit's library directory comes from the build (CMake's
// CUDAToolkit_LIBRARY_DIR), for machines whose loader path does not list it.
constexpr const char* kSoname = "libcublasLt.so.13";

Api& mutable_api() {
  static Api api;
  return api;
}

absl::Status open_and_resolve() {
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : {std::string(kSoname),
#ifdef FP8_CUBLASLT_LIBRARY_DIR
                                  std::string(FP8_CUBLASLT_LIBRARY_DIR) + "/" + kSoname
#endif
       }) {
    // RTLD_LOCAL: its symbols stay its own; RTLD_NOW: a broken library fails here, not mid-GEMM.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", why != nullptr ? why : path);
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuBLASLt could not be loaded (", tried, "): install the CUDA 13 toolkit's libcublasLt or add its directory to "
        "LD_LIBRARY_PATH"));
  }
  Api& api = mutable_api();
  // Never dlclose()d: the functions are used until the process exits.
#define FP8_CUBLASLT_RESOLVE(name)                                                                            \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name));                                      \
  if (api.name == nullptr) {                                                                                  \
    return absl::FailedPreconditionError(absl::StrCat("cuBLASLt (", kSoname, ") has no " #name ": a cuBLASLt " \
                                                      "older than this build's CUDA 13?"));                  \
  }
  FP8_CUBLASLT_FUNCTIONS(FP8_CUBLASLT_RESOLVE)
#undef FP8_CUBLASLT_RESOLVE
  return absl::OkStatus();
}

}  // namespace

absl::Status load() {
  static std::once_flag once;
  static absl::Status status;
  std::call_once(once, [] { status = open_and_resolve(); });
  return status;
}

const Api& api() { return mutable_api(); }

}  // namespace fp8::cuda::cublaslt
