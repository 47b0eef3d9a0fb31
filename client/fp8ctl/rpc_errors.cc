#include "client/fp8ctl/rpc_errors.h"

#include <cstdio>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/fp8ctl/exit_codes.h"

namespace fp8::ctl {

int exit_code_for_status(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return kExitInvalidSpec;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitAuth;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    default:
      return kExitError;
  }
}

std::string how_to_get_token() {
  return "get a token with `fp8-coordinator token --role user --name NAME` on the coordinator's host "
         "(an admin token is in its <state-dir>/fp8-admin.token) and pass it with --token, FP8_TOKEN, "
         "--token-file FILE, FP8_TOKEN_FILE, ./fp8-admin.token or ~/.config/fp8ctl/token";
}

CliError from_rpc_status(const grpc::Status& status, absl::string_view what, const RpcTarget& target) {
  const int code = exit_code_for_status(status.error_code());
  const std::string detail = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return {code, absl::StrCat(what, ": cannot reach the coordinator at ", target.address, " (", detail,
                                 "); is fp8-coordinator running there? (--coordinator / FP8_COORDINATOR)")};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {code, absl::StrCat(what, ": the coordinator at ", target.address,
                                 " did not answer in time (", detail, ")")};
    case grpc::StatusCode::PERMISSION_DENIED:
      // A field of the job the token may not ask for (spec.owner): the job is what to
      // change, not the token.
      if (absl::StartsWith(detail, "spec.")) return {code, absl::StrCat(what, ": refused: ", detail)};
      [[fallthrough]];
    case grpc::StatusCode::UNAUTHENTICATED:
      return {code, absl::StrCat(what, ": the coordinator at ", target.address, " refused the token from ",
                                 target.token_source.empty() ? "nowhere" : target.token_source, " (", detail,
                                 "); ", how_to_get_token())};
    case grpc::StatusCode::INVALID_ARGUMENT: {
      // Spec problems come one per line ("spec.train.lr: ..."): keep one line each.
      std::string lines;
      for (absl::string_view line : absl::StrSplit(detail, '\n', absl::SkipEmpty())) {
        absl::StrAppend(&lines, lines.empty() ? "" : "\n", what, ": rejected: ", line);
      }
      return {code, lines.empty() ? absl::StrCat(what, ": rejected as invalid") : lines};
    }
    default:
      return {code, absl::StrCat(what, ": ", detail.empty() ? "failed" : detail)};
  }
}

int report(const CliError& error) {
  for (absl::string_view line : absl::StrSplit(error.message, '\n', absl::SkipEmpty())) {
    std::fprintf(stderr, "fp8ctl: %s\n", std::string(line).c_str());
  }
  return error.exit_code;
}

}  // namespace fp8::ctl
