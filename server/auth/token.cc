#include "server/auth/token.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace fp8::server {

const char* role_name(Role role) {
  switch (role) {
    case Role::kAdmin: return "admin";
    case Role::kUser: return "user";
    case Role::kWorker: return "worker";
    case Role::kTrainer: return "trainer";
  }
  return "?";
}

absl::StatusOr<Role> parse_role(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "user") return Role::kUser;
  if (name == "worker") return Role::kWorker;
  return absl::InvalidArgumentError(absl::StrCat("role '", std::string(name), "' is not one of admin, user, worker"));
}

std::string new_token(Role role) {
  std::array<unsigned char, 32> bytes{};
  // RAND_bytes fails only when the system has no entropy source at all; a coordinator
  // that cannot make unguessable tokens must not run.
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) std::abort();
  const char* prefix = role == Role::kWorker ? "fp8w_" : role == Role::kTrainer ? "fp8t_" : "fp8u_";
  return absl::StrCat(prefix, absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                                        bytes.size())));
}

std::string hash_token(std::string_view token) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

}  // namespace fp8::server
