#include "worker/engine/collectives/sigpipe_guard.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace fp8::engine::collectives {
namespace {

sigset_t sigpipe_only() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  return set;
}

}  // namespace

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  const sigset_t pipe = sigpipe_only();
  sigset_t old;
  if (pthread_sigmask(SIG_BLOCK, &pipe, &old) != 0) return;
  was_blocked_ = sigismember(&old, SIGPIPE) == 1;
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (was_blocked_) return;
  const sigset_t pipe = sigpipe_only();
  // Discard a SIGPIPE raised while blocked (it would be delivered on unblocking). A SIGPIPE
  // sent to the whole process by someone else is pending on the process, not this thread,
  // and may be discarded too; nobody sends SIGPIPE on purpose.
  sigset_t pending;
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    const timespec no_wait{0, 0};
    while (sigtimedwait(&pipe, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
}

}  // namespace fp8::engine::collectives
