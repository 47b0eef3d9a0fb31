// `fp8-train --nproc N`: N local ranks of one job, each a child process running this same
// executable with `--rank r --world-size N --rendezvous <fresh temp dir>`.
//
// The children run in their own process group, so a terminal's Ctrl-C reaches only this
// launcher, which forwards each SIGINT / SIGTERM to every rank once: the ranks agree to stop
// after the same step and checkpoint (a second signal makes them exit at once, as for a
// single process). Rank 0 prints the step log; every rank's failure is reported here with
// its exit status, after all ranks ended (a rank that loses a peer fails within the
// collective timeout; ranks still running 30 s after another failed are killed, so none is
// left hanging, e.g. in a rendezvous with a rank that died before joining).
#pragma once

#include <string>
#include <vector>

namespace fp8::train_cli {

struct LocalLaunch {
  int nproc = 1;
  // Arguments every rank gets after the executable (--config, --set, --resume, --timeout).
  std::vector<std::string> rank_args;
  // A job on CUDA: rank r gets `--cuda-device r`, one GPU each.
  bool one_gpu_per_rank = false;
};

// Returns fp8-train's exit status for the whole job: 0 when every rank finished; 2 when
// any rank rejected its input; 130 when stopped by a signal; otherwise 1.
int run_local_ranks(const LocalLaunch& launch);

}  // namespace fp8::train_cli
