// fp8ctl's global settings: where the coordinator is and which token to present.
//
//   --coordinator HOST:PORT   FP8_COORDINATOR   127.0.0.1:7070
//   --coordinator-ca FILE     FP8_COORDINATOR_CA  none: plaintext
//   token, first found wins:  --token, FP8_TOKEN, --token-file FILE, FP8_TOKEN_FILE,
//                             ./fp8-admin.token (if present), ~/.config/fp8ctl/token
//
// The environment and the file system are injected so that the precedence is unit-tested
// without touching the real ones.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

// The global flags as given (empty = not given).
struct GlobalFlags {
  std::string coordinator;
  std::string coordinator_ca;
  std::string token;
  std::string token_file;
};

// Adds the global flags to the top-level app; subcommands accept them too (fallthrough).
void add_global_flags(CLI::App& app, GlobalFlags* flags);

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// Reads a whole file: NotFound when it does not exist, another error when unreadable.
using FileReader = std::function<absl::StatusOr<std::string>(const std::string& path)>;

EnvLookup process_env();
FileReader real_files();

struct ResolvedToken {
  std::string token;   // a secret: never printed
  std::string source;  // "--token", "FP8_TOKEN", "--token-file /x", "./fp8-admin.token", ...
};

// Applies the precedence above. NotFound when no source has a token (the message says how
// to get one); InvalidArgument when a named file is missing, unreadable or empty.
absl::StatusOr<ResolvedToken> resolve_token(const GlobalFlags& flags, const EnvLookup& env, const FileReader& files);

struct ClientConfig {
  std::string coordinator = kDefaultCoordinator;
  std::string coordinator_ca;
  // Resolved lazily by the verbs that call the coordinator, so that `submit` reports a bad
  // job.yaml even without a token.
  absl::StatusOr<ResolvedToken> token = absl::NotFoundError("token not resolved");
};

ClientConfig resolve_client_config(const GlobalFlags& flags, const EnvLookup& env, const FileReader& files);

}  // namespace fp8::ctl
