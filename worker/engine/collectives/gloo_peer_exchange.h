// One round of a collective: point-to-point sends and receives with named peers, all posted
// first and then waited for, over Gloo's unbound buffers on one fresh slot.
//
// Why point to point rather than Gloo's own algorithms: every transfer has exactly one peer,
// so a failure names that peer's rank (Gloo's exceptions name socket addresses only), and
// every wait takes what is left of the collective's deadline, so no failure can hang.
//
// Failure handling: a transfer whose peer is gone fails at once (Gloo sees the connection
// close); one whose peer is silent fails at the deadline. The round still waits, up to the
// deadline, for its transfers with the other peers before it reports: a surviving peer
// must not see this rank vanish halfway through a round and blame it for the first
// peer's failure. wait() then reports the first peer that failed in its own right (not a
// transfer Gloo closed because another one timed out) and lists any others.
//
// After a failed wait() the caller must destroy this object and then the Gloo context:
// transfers may still be pending in Gloo, which holds only weak references to their
// buffers and drops them once the buffers are gone; closing the context then stops Gloo
// from touching the connections at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace fp8::engine::collectives {

class PeerExchange {
 public:
  // `op` names the collective in errors ("all_gather"); `timeout` is what the deadline was
  // derived from, for messages.
  PeerExchange(gloo::Context& context, const char* op, absl::Time deadline, absl::Duration timeout);
  PeerExchange(const PeerExchange&) = delete;
  PeerExchange& operator=(const PeerExchange&) = delete;

  // Posts a transfer; memory must stay valid until wait() returns. Zero bytes: nothing is
  // posted (both sides agree on sizes, so neither side expects a message). At most one send
  // and one recv per peer and round.
  void send(int peer, const void* data, size_t bytes);
  void recv(int peer, void* data, size_t bytes);

  // Waits for every posted transfer. OK, Unavailable (a peer is gone) or DeadlineExceeded
  // (a peer did not answer in time), naming the peer's rank.
  absl::Status wait();

 private:
  enum class Outcome { kPending, kDone, kLost, kTimedOut, kClosedByUs };
  struct Transfer {
    int peer = -1;
    bool is_send = false;
    size_t bytes = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    Outcome outcome = Outcome::kPending;
    std::string detail;  // Gloo's message, without its source-location prefix
  };

  void post(int peer, bool is_send, void* data, size_t bytes);
  void wait_for(Transfer& t);
  absl::Status report() const;

  gloo::Context& context_;
  const char* op_;
  absl::Time deadline_;
  absl::Duration timeout_;
  uint64_t slot_ = 0;
  std::vector<Transfer> transfers_;
};

}  // namespace fp8::engine::collectives
