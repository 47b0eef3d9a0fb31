#include "worker/engine/collectives/nccl/nccl_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace fp8::engine::collectives::nccl {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

Api& mutable_api() {
  static Api api;
  return api;
}

absl::Status open_and_resolve() {
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : {std::string(kSoname),
#ifdef FP8_NCCL_LIBRARY_DIR
                                  std::string(FP8_NCCL_LIBRARY_DIR) + "/" + kSoname
#endif
       }) {
    // RTLD_LOCAL: its symbols stay its own; RTLD_NOW: a broken library fails here, not mid-step.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", why != nullptr ? why : path);
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL could not be loaded (", tried,
                                                      "): install NCCL 2 or add its directory to LD_LIBRARY_PATH"));
  }
  Api& api = mutable_api();
  // Never dlclose()d: the functions are used until the process exits.
#define FP8_NCCL_RESOLVE(name)                                                                                   \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name));                                         \
  if (api.name == nullptr) {                                                                                     \
    return absl::FailedPreconditionError(absl::StrCat("NCCL (", kSoname, ") has no " #name ": an NCCL older than this build's headers?")); \
  }
  FP8_NCCL_FUNCTIONS(FP8_NCCL_RESOLVE)
#undef FP8_NCCL_RESOLVE
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

}  // namespace fp8::engine::collectives::nccl
