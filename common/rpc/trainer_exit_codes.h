// fp8-train's exit codes: how a rank tells its worker, and through it the coordinator, why
// it failed (job.proto, RestartPolicy.FailureClass). Any other non-zero code is a failure
// of unknown class.
#pragma once

namespace fp8::rpc {

inline constexpr int kExitConfiguration = 2;  // bad command line, job file, data or checkpoint
inline constexpr int kExitDivergence = 3;     // a loss or grad norm not finite
inline constexpr int kExitOutOfMemory = 4;    // an allocation failed
inline constexpr int kExitPeerLost = 5;       // a collective or the rendezvous failed for want of a peer
inline constexpr int kExitStopped = 130;      // stopped by SIGINT or SIGTERM after a checkpoint

}  // namespace fp8::rpc
