// fp8ctl's exit codes: distinct per kind of failure, so that scripts can tell a bad spec
// from an unreachable coordinator without parsing messages. Listed in client/README.md.
#pragma once

namespace fp8::ctl {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,         // anything not below
  kExitUsage = 2,         // bad flags or arguments
  kExitInvalidSpec = 3,   // job.yaml invalid locally, or INVALID_ARGUMENT from the coordinator
  kExitUnreachable = 4,   // UNAVAILABLE / DEADLINE_EXCEEDED
  kExitAuth = 5,          // no token, UNAUTHENTICATED / PERMISSION_DENIED
  kExitNotFound = 6,      // NOT_FOUND (also another user's job)
  kExitJobFailed = 10,    // follow: the job ended FAILED
  kExitJobCancelled = 11, // follow: the job ended CANCELLED
};

}  // namespace fp8::ctl
