// Gloo writes to its sockets with writev(2), which raises SIGPIPE in the writing thread
// when the peer has gone away, and SIGPIPE's default action ends the process. Precisely the
// failure a process group must survive (a dead peer) would then kill the survivors too.
//
// Instead of ignoring SIGPIPE for the whole process (a surprise for whoever embeds us), the
// group blocks it only in the threads that write to Gloo's sockets: Gloo's event-loop
// thread, which inherits the mask of the thread that creates the device, and the calling
// thread for the duration of each collective. A SIGPIPE raised meanwhile is discarded, and
// the write fails with EPIPE, which Gloo handles.
#pragma once

#include <signal.h>

namespace fp8::engine::collectives {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  bool was_blocked_ = true;  // then this guard changes nothing
};

}  // namespace fp8::engine::collectives
