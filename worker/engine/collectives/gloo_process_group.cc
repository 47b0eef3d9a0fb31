#include "worker/engine/collectives/gloo_process_group.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <span>
#include <vector>

#include <gloo/context.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/engine/collectives/gloo_error_text.h"
#include "worker/engine/collectives/gloo_peer_exchange.h"
#include "worker/engine/collectives/gloo_rendezvous.h"
#include "worker/engine/collectives/rank_order_reduce.h"
#include "worker/engine/collectives/sigpipe_guard.h"

namespace fp8::engine::collectives {
namespace {

// Up to this size an all_reduce sends everything to everyone in one round: the amax and
// grad-norm reductions are a few hundred bytes, where one round trip beats two.
constexpr size_t kDirectAllReduceBytes = size_t{64} << 10;

// Chunk r of `count` elements split W ways: the first count % W chunks get one extra.
struct Chunk {
  int64_t offset = 0;
  int64_t count = 0;
};
Chunk chunk_of(int64_t count, int size, int r) {
  const int64_t base = count / size;
  const int64_t extra = count % size;
  return {r * base + std::min<int64_t>(r, extra), base + (r < extra ? 1 : 0)};
}

bool fits(int64_t count, int size, size_t element_bytes) {
  return count >= 0 && static_cast<uint64_t>(count) <= std::numeric_limits<size_t>::max() / element_bytes / size;
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  // `context` is null for a group of one, which never communicates.
  GlooProcessGroup(int rank, int size, absl::Duration timeout, std::shared_ptr<gloo::Context> context)
      : rank_(rank), size_(size), context_(std::move(context)) {
    set_timeout(timeout);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }

  absl::Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  absl::Status reduce_scatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op) override;
  absl::Status reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> parts) override;
  absl::Status all_reduce(float* data, int64_t count, ReduceOp op) override { return all_reduce_of(data, count, op); }
  absl::Status all_reduce(double* data, int64_t count, ReduceOp op) override { return all_reduce_of(data, count, op); }
  absl::Status broadcast(void* data, size_t bytes, int root) override;
  absl::Status barrier() override;

 private:
  // The first error, repeated, once the group is broken.
  absl::Status check_usable(const char* op) const;
  // Runs the rounds of one collective under one deadline; any failure (or exception) breaks
  // the group. `body` takes the deadline and the timeout it came from, and returns the
  // collective's status.
  template <typename Body>
  absl::Status run(const char* op, Body&& body);
  template <typename T>
  absl::Status all_reduce_of(T* data, int64_t count, ReduceOp op);
  // Everyone's slice `rank` of `send` to this rank, combined by `fold(inputs in rank
  // order, recv, count_per_rank)`.
  template <typename T, typename Fold>
  absl::Status reduce_scatter_of(const T* send, T* recv, int64_t count_per_rank, Fold fold);
  // Room for `count` elements (the W-1 peers' slices), kept and reused between calls.
  template <typename T>
  T* staging(size_t count);

  const int rank_;
  const int size_;
  std::shared_ptr<gloo::Context> context_;
  absl::Status broken_;
  std::unique_ptr<std::byte[]> staging_;
  size_t staging_bytes_ = 0;
  char token_ = 0;  // barrier payload
};

absl::Status GlooProcessGroup::check_usable(const char* op) const {
  if (broken_.ok()) return absl::OkStatus();
  return absl::Status(broken_.code(), absl::StrCat(op, ": process group failed earlier: ", broken_.message()));
}

template <typename Body>
absl::Status GlooProcessGroup::run(const char* op, Body&& body) {
  absl::Status status;
  {
    ScopedSigpipeBlock no_sigpipe;
    try {
      const absl::Duration waits_for = timeout();  // read once: set_timeout may run meanwhile
      status = body(absl::Now() + waits_for, waits_for);
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory on rank ", rank_));
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(op, ": ", gloo_error_text(e.what()), " [rank ", rank_, "]"));
    } catch (...) {
      status = absl::InternalError(absl::StrCat(op, ": unknown exception [rank ", rank_, "]"));
    }
  }
  if (!status.ok()) {
    broken_ = status;
    // Closing the connections (gently: data already written still arrives) stops Gloo from
    // serving transfers this failure left behind, and tells the peers we are gone.
    try {
      context_.reset();
    } catch (...) {
    }
  }
  return status;
}

template <typename T>
T* GlooProcessGroup::staging(size_t count) {
  const size_t bytes = count * sizeof(T);
  if (staging_bytes_ < bytes) {
    staging_.reset();  // the old block goes first: both at once could double the peak
    staging_bytes_ = 0;
    // Not value-initialised: received bytes overwrite it, and zeroing 100 MB costs time.
    staging_.reset(new std::byte[bytes]);
    staging_bytes_ = bytes;
  }
  // new[] aligns to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16), enough for float and double.
  return reinterpret_cast<T*>(staging_.get());
}

absl::Status GlooProcessGroup::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  if (absl::Status s = check_usable("all_gather"); !s.ok()) return s;
  if (bytes_per_rank == 0) return absl::OkStatus();
  if (send == nullptr || recv == nullptr) return absl::InvalidArgumentError("all_gather: null buffer");
  if (bytes_per_rank > std::numeric_limits<size_t>::max() / size_) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: ", bytes_per_rank, " bytes per rank is too large"));
  }
  auto* out = static_cast<char*>(recv);
  char* mine = out + rank_ * bytes_per_rank;
  if (send != mine) std::memmove(mine, send, bytes_per_rank);
  if (size_ == 1) return absl::OkStatus();
  return run("all_gather", [&](absl::Time deadline, absl::Duration waits_for) {
    PeerExchange round(*context_, "all_gather", deadline, waits_for);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      round.send(peer, mine, bytes_per_rank);
      round.recv(peer, out + peer * bytes_per_rank, bytes_per_rank);
    }
    return round.wait();
  });
}

absl::Status GlooProcessGroup::reduce_scatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op) {
  return reduce_scatter_of<float>(send, recv, count_per_rank, [op](std::span<const float* const> inputs, float* out,
                                                                  int64_t n) {
    reduce_in_rank_order<float>(op, inputs, out, n);
  });
}

absl::Status GlooProcessGroup::reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> parts) {
  for (const Bf16ReduceScatterPart& p : parts) {
    absl::Status s = reduce_scatter_of<uint16_t>(p.send, p.recv, p.count_per_rank, sum_bf16_in_rank_order);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

template <typename T, typename Fold>
absl::Status GlooProcessGroup::reduce_scatter_of(const T* send, T* recv, int64_t count_per_rank, Fold fold) {
  if (absl::Status s = check_usable("reduce_scatter"); !s.ok()) return s;
  if (!fits(count_per_rank, size_, sizeof(T))) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: bad count per rank ", count_per_rank));
  }
  if (count_per_rank == 0) return absl::OkStatus();
  if (send == nullptr || recv == nullptr) return absl::InvalidArgumentError("reduce_scatter: null buffer");
  const auto n = static_cast<size_t>(count_per_rank);
  if (size_ == 1) {
    if (recv != send) std::memmove(recv, send, n * sizeof(T));
    return absl::OkStatus();
  }
  return run("reduce_scatter", [&](absl::Time deadline, absl::Duration waits_for) {
    // Rank r's copy of my slice lands in staging slot r (r > rank_ shifts down by one).
    T* others = staging<T>(n * static_cast<size_t>(size_ - 1));
    std::vector<const T*> inputs(static_cast<size_t>(size_));
    PeerExchange round(*context_, "reduce_scatter", deadline, waits_for);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) {
        inputs[static_cast<size_t>(peer)] = send + rank_ * n;
        continue;
      }
      T* slot = others + static_cast<size_t>(peer < rank_ ? peer : peer - 1) * n;
      inputs[static_cast<size_t>(peer)] = slot;
      round.send(peer, send + peer * n, n * sizeof(T));
      round.recv(peer, slot, n * sizeof(T));
    }
    if (absl::Status s = round.wait(); !s.ok()) return s;
    fold(std::span<const T* const>(inputs), recv, count_per_rank);
    return absl::OkStatus();
  });
}

template <typename T>
absl::Status GlooProcessGroup::all_reduce_of(T* data, int64_t count, ReduceOp op) {
  if (absl::Status s = check_usable("all_reduce"); !s.ok()) return s;
  if (!fits(count, size_, sizeof(T))) return absl::InvalidArgumentError(absl::StrCat("all_reduce: bad count ", count));
  if (count == 0 || size_ == 1) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("all_reduce: null buffer");
  const auto n = static_cast<size_t>(count);

  if (n * sizeof(T) <= kDirectAllReduceBytes) {
    // One round: everyone's whole buffer to everyone; each rank folds all of them.
    return run("all_reduce", [&](absl::Time deadline, absl::Duration waits_for) {
      T* others = staging<T>(n * static_cast<size_t>(size_ - 1));
      std::vector<const T*> inputs(static_cast<size_t>(size_));
      PeerExchange round(*context_, "all_reduce", deadline, waits_for);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) {
          inputs[static_cast<size_t>(peer)] = data;
          continue;
        }
        T* slot = others + static_cast<size_t>(peer < rank_ ? peer : peer - 1) * n;
        inputs[static_cast<size_t>(peer)] = slot;
        round.send(peer, data, n * sizeof(T));
        round.recv(peer, slot, n * sizeof(T));
      }
      if (absl::Status s = round.wait(); !s.ok()) return s;
      reduce_in_rank_order<T>(op, inputs, data, count);
      return absl::OkStatus();
    });
  }

  // Two rounds: rank r folds chunk r of everyone's buffer, then hands it to everyone. Each
  // element is folded by one rank in rank order, so every rank ends with the same bits.
  return run("all_reduce", [&](absl::Time deadline, absl::Duration waits_for) {
    const Chunk own = chunk_of(count, size_, rank_);
    const auto own_n = static_cast<size_t>(own.count);
    T* others = staging<T>(own_n * static_cast<size_t>(size_ - 1));
    std::vector<const T*> inputs(static_cast<size_t>(size_));
    {
      PeerExchange scatter(*context_, "all_reduce", deadline, waits_for);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) {
          inputs[static_cast<size_t>(peer)] = data + own.offset;
          continue;
        }
        T* slot = others + static_cast<size_t>(peer < rank_ ? peer : peer - 1) * own_n;
        inputs[static_cast<size_t>(peer)] = slot;
        const Chunk theirs = chunk_of(count, size_, peer);
        scatter.send(peer, data + theirs.offset, static_cast<size_t>(theirs.count) * sizeof(T));
        scatter.recv(peer, slot, own_n * sizeof(T));
      }
      if (absl::Status s = scatter.wait(); !s.ok()) return s;
    }
    reduce_in_rank_order<T>(op, inputs, data + own.offset, own.count);

    PeerExchange gather(*context_, "all_reduce", deadline, waits_for);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const Chunk theirs = chunk_of(count, size_, peer);
      gather.send(peer, data + own.offset, own_n * sizeof(T));
      gather.recv(peer, data + theirs.offset, static_cast<size_t>(theirs.count) * sizeof(T));
    }
    return gather.wait();
  });
}

absl::Status GlooProcessGroup::broadcast(void* data, size_t bytes, int root) {
  if (absl::Status s = check_usable("broadcast"); !s.ok()) return s;
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " is not a rank of ", size_));
  }
  if (bytes == 0 || size_ == 1) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("broadcast: null buffer");
  return run("broadcast", [&](absl::Time deadline, absl::Duration waits_for) {
    PeerExchange round(*context_, "broadcast", deadline, waits_for);
    if (rank_ == root) {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != root) round.send(peer, data, bytes);
      }
    } else {
      round.recv(root, data, bytes);
    }
    return round.wait();
  });
}

absl::Status GlooProcessGroup::barrier() {
  if (absl::Status s = check_usable("barrier"); !s.ok()) return s;
  if (size_ == 1) return absl::OkStatus();
  return run("barrier", [&](absl::Time deadline, absl::Duration waits_for) {
    // Every rank hears from every other: no rank leaves before all have arrived.
    std::vector<char> tokens(static_cast<size_t>(size_));
    PeerExchange round(*context_, "barrier", deadline, waits_for);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      round.send(peer, &token_, 1);
      round.recv(peer, &tokens[static_cast<size_t>(peer)], 1);
    }
    return round.wait();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> make_gloo_process_group(KeyValueStore& store, int rank, int size,
                                                                      const ProcessGroupOptions& options,
                                                                      std::string hostname_or_interface) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo process group: rank ", rank, " of ", size, " is not valid"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("gloo process group: timeout must be positive, got ",
                                                   absl::FormatDuration(options.timeout)));
  }
  // Everything that can throw (Gloo, allocation) is caught further in; this is the last
  // line so that nothing escapes to the caller.
  try {
    std::shared_ptr<gloo::Context> context;
    if (size > 1) {
      absl::StatusOr<std::shared_ptr<gloo::Context>> connected =
          connect_gloo_mesh(store, rank, size, options, hostname_or_interface);
      if (!connected.ok()) return connected.status();
      context = *std::move(connected);
    }
    return std::unique_ptr<ProcessGroup>(new GlooProcessGroup(rank, size, options.timeout, std::move(context)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo process group (rank ", rank, " of ", size, "): ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("gloo process group (rank ", rank, " of ", size, "): unknown exception"));
  }
}

}  // namespace fp8::engine::collectives
