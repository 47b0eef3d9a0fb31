// Bearer tokens: how they are made, how they are stored (hashed), and who holds them.
//
// A token is 32 random bytes written as 64 hex digits behind a prefix that says what it
// is for ("fp8u_" user or admin, "fp8w_" worker, "fp8t_" trainer). The coordinator stores
// only SHA-256 hashes, so its database alone never lets anyone in.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fp8::server {

// What a token may do.
//   kAdmin    every job API call on every job; creates tokens.
//   kUser     the job API on its own jobs (spec.owner == name).
//   kWorker   the worker API; the trainer and rendezvous APIs for attempts it hosts.
//   kTrainer  the trainer and rendezvous APIs of one job attempt (StartRank hands it out).
enum class Role { kAdmin, kUser, kWorker, kTrainer };

const char* role_name(Role role);  // "admin", "user", "worker", "trainer"
// Accepts "admin", "user" and "worker" (trainer tokens are made only by the coordinator).
absl::StatusOr<Role> parse_role(std::string_view name);

// A fresh random token for `role` (OpenSSL's CSPRNG).
std::string new_token(Role role);

// Hex SHA-256 of the token: the only form stored.
std::string hash_token(std::string_view token);

// The caller of one request, once its token is known.
struct Principal {
  Role role = Role::kUser;
  std::string name;     // user or worker token name; for a trainer "job-7/attempt-2"
  std::string job_id;   // trainer only
  int attempt = 0;      // trainer only

  bool is_admin() const { return role == Role::kAdmin; }
};

}  // namespace fp8::server
