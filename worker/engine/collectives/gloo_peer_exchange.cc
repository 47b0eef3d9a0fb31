#include "worker/engine/collectives/gloo_peer_exchange.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/engine/collectives/gloo_error_text.h"

namespace fp8::engine::collectives {
namespace {

// Gloo waits with std::condition_variable::wait_for, which overflows on huge durations; a
// week is "forever" for a collective.
constexpr absl::Duration kLongestWait = absl::Hours(24 * 7);

std::chrono::milliseconds until(absl::Time deadline) {
  const absl::Duration left = std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kLongestWait);
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

}  // namespace

PeerExchange::PeerExchange(gloo::Context& context, const char* op, absl::Time deadline, absl::Duration timeout)
    : context_(context), op_(op), deadline_(deadline), timeout_(timeout), slot_(context.nextSlot()) {
  transfers_.reserve(2 * static_cast<size_t>(context.size));
}

void PeerExchange::send(int peer, const void* data, size_t bytes) {
  // Gloo's buffers are read-write; a send only reads it.
  post(peer, /*is_send=*/true, const_cast<void*>(data), bytes);
}

void PeerExchange::recv(int peer, void* data, size_t bytes) { post(peer, /*is_send=*/false, data, bytes); }

void PeerExchange::post(int peer, bool is_send, void* data, size_t bytes) {
  if (bytes == 0) return;
  Transfer& t = transfers_.emplace_back();
  t.peer = peer;
  t.is_send = is_send;
  t.bytes = bytes;
  try {
    t.buffer = context_.createUnboundBuffer(data, bytes);
    if (is_send) {
      t.buffer->send(peer, slot_);
    } else {
      t.buffer->recv(peer, slot_);
    }
  } catch (const std::exception& e) {
    // The connection to this peer failed before this round (Gloo rethrows its error).
    t.outcome = Outcome::kLost;
    t.detail = gloo_error_text(e.what());
  } catch (...) {
    t.outcome = Outcome::kLost;
    t.detail = "unknown error posting a transfer";
  }
}

void PeerExchange::wait_for(Transfer& t) {
  if (t.outcome != Outcome::kPending) return;
  try {
    const std::chrono::milliseconds left = until(deadline_);
    const bool completed = t.is_send ? t.buffer->waitSend(left) : t.buffer->waitRecv(left);
    // False means aborted, which nothing here requests; treat it as a lost peer all the same.
    t.outcome = completed ? Outcome::kDone : Outcome::kLost;
    if (!completed) t.detail = "transfer aborted";
  } catch (const std::exception& e) {
    t.detail = gloo_error_text(e.what());
    if (absl::StrContains(t.detail, "Timed out waiting")) {
      t.outcome = Outcome::kTimedOut;  // this wait ran into the deadline
    } else if (absl::StrContains(t.detail, "Application timeout caused pair closure")) {
      t.outcome = Outcome::kClosedByUs;  // Gloo closed every connection after our own timeout
    } else {
      t.outcome = Outcome::kLost;
    }
  } catch (...) {
    t.outcome = Outcome::kLost;
    t.detail = "unknown error";
  }
}

absl::Status PeerExchange::wait() {
  for (Transfer& t : transfers_) wait_for(t);
  return report();
}

absl::Status PeerExchange::report() const {
  auto describe = [&](const Transfer& t) {
    if (t.outcome == Outcome::kTimedOut) {
      return absl::StrCat("rank ", t.peer, " did not answer within ", absl::FormatDuration(timeout_), " (",
                          t.is_send ? "send" : "recv", " of ", t.bytes, " bytes)");
    }
    if (t.outcome == Outcome::kLost) return absl::StrCat("lost rank ", t.peer, " (", t.detail, ")");
    return absl::StrCat("connection to rank ", t.peer, " closed (", t.detail, ")");
  };

  const Transfer* first = nullptr;
  for (const Transfer& t : transfers_) {
    if (t.outcome == Outcome::kLost || t.outcome == Outcome::kTimedOut) {
      first = &t;
      break;
    }
  }
  if (first == nullptr) {
    for (const Transfer& t : transfers_) {
      if (t.outcome == Outcome::kClosedByUs) {
        first = &t;
        break;
      }
    }
  }
  if (first == nullptr) return absl::OkStatus();

  std::string message = absl::StrCat(op_, ": ", describe(*first));
  std::vector<int> named = {first->peer};
  for (const Transfer& t : transfers_) {
    if (t.outcome != Outcome::kLost && t.outcome != Outcome::kTimedOut) continue;
    if (std::find(named.begin(), named.end(), t.peer) != named.end()) continue;
    named.push_back(t.peer);
    absl::StrAppend(&message, "; also ", describe(t));
  }
  absl::StrAppend(&message, " [seen from rank ", context_.rank, " of ", context_.size, "]");
  return first->outcome == Outcome::kTimedOut ? absl::DeadlineExceededError(message)
                                              : absl::UnavailableError(message);
}

}  // namespace fp8::engine::collectives
