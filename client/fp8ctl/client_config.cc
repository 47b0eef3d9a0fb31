#include "client/fp8ctl/client_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>
#include <filesystem>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/rpc_errors.h"

namespace fp8::ctl {
namespace {

constexpr char kCwdTokenFile[] = "fp8-admin.token";
constexpr char kHomeTokenFile[] = ".config/fp8ctl/token";

std::optional<std::string> non_empty(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> v = env(name);
  if (v.has_value() && v->empty()) return std::nullopt;
  return v;
}

// A token file named by the user must exist and hold a token.
absl::StatusOr<ResolvedToken> from_named_file(const std::string& path, const std::string& from,
                                            const FileReader& files) {
  absl::StatusOr<std::string> text = files(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(from, " ", path, ": cannot read the token file (",
                                                   text.status().message(), ")"));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(from, " ", path, ": the token file is empty"));
  return ResolvedToken{token, absl::StrCat(from, " ", path)};
}

// A default location: skipped when absent, an error when present but unusable.
std::optional<absl::StatusOr<ResolvedToken>> from_default_file(const std::string& path, const FileReader& files) {
  absl::StatusOr<std::string> text = files(path);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) {
    return absl::StatusOr<ResolvedToken>(absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read the token file (", text.status().message(), ")")));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::StatusOr<ResolvedToken>(absl::InvalidArgumentError(absl::StrCat(path, ": the token file is empty")));
  }
  return absl::StatusOr<ResolvedToken>(ResolvedToken{token, path});
}

}  // namespace

void add_global_flags(CLI::App& app, GlobalFlags* flags) {
  app.add_option("--coordinator", flags->coordinator,
                 absl::StrCat("coordinator address HOST:PORT (FP8_COORDINATOR; default ", kDefaultCoordinator, ")"));
  app.add_option("--token", flags->token, "bearer token (FP8_TOKEN); prefer --token-file, argv is visible to others");
  app.add_option("--token-file", flags->token_file,
                 "file holding the token (FP8_TOKEN_FILE; default ./fp8-admin.token if present, else "
                 "~/.config/fp8ctl/token)")
      ->type_name("FILE");
  app.add_option("--coordinator-ca", flags->coordinator_ca,
                 "PEM file of the coordinator's CA: use TLS (FP8_COORDINATOR_CA; default plaintext)")
      ->type_name("FILE");
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

FileReader real_files() {
  return [](const std::string& path) -> absl::StatusOr<std::string> {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return absl::NotFoundError("no such file");
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::PermissionDeniedError("cannot open it");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
}

absl::StatusOr<ResolvedToken> resolve_token(const GlobalFlags& flags, const EnvLookup& env, const FileReader& files) {
  if (!flags.token.empty()) return ResolvedToken{flags.token, "--token"};
  if (std::optional<std::string> v = non_empty(env, "FP8_TOKEN")) {
    std::string token(absl::StripAsciiWhitespace(*v));
    if (!token.empty()) return ResolvedToken{token, "FP8_TOKEN"};
  }
  if (!flags.token_file.empty()) return from_named_file(flags.token_file, "--token-file", files);
  if (std::optional<std::string> v = non_empty(env, "FP8_TOKEN_FILE")) return from_named_file(*v, "FP8_TOKEN_FILE", files);
  if (auto t = from_default_file(absl::StrCat("./", kCwdTokenFile), files)) return *t;
  if (std::optional<std::string> home = non_empty(env, "HOME")) {
    if (auto t = from_default_file(absl::StrCat(*home, "/", kHomeTokenFile), files)) return *t;
  }
  return absl::NotFoundError(absl::StrCat("no token found; ", how_to_get_token()));
}

ClientConfig resolve_client_config(const GlobalFlags& flags, const EnvLookup& env, const FileReader& files) {
  ClientConfig c;
  if (!flags.coordinator.empty()) {
    c.coordinator = flags.coordinator;
  } else if (std::optional<std::string> v = non_empty(env, "FP8_COORDINATOR")) {
    c.coordinator = *v;
  }
  if (!flags.coordinator_ca.empty()) {
    c.coordinator_ca = flags.coordinator_ca;
  } else if (std::optional<std::string> v = non_empty(env, "FP8_COORDINATOR_CA")) {
    c.coordinator_ca = *v;
  }
  c.token = resolve_token(flags, env, files);
  return c;
}

}  // namespace fp8::ctl
