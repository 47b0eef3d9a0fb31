// The CPU process group: Gloo over TCP, buffers in host memory.
//
// Every collective runs as rounds of point-to-point transfers between all pairs of ranks
// (gloo_peer_exchange.h), so that each failure names its peer and each wait is bounded by
// the group's timeout. Reductions fold ranks in order 0..W-1 (rank_order_reduce.h):
//   all_gather       every rank sends its block to every other rank (one round);
//   reduce_scatter   rank r receives everyone's slice r and folds it (one round);
//   all_reduce       small buffers (<= 64 KiB): everyone sends everything to everyone and
//                    each rank folds all of it; larger: a reduce-scatter over W near-equal
//                    chunks, then an all-gather of the folded chunks (two rounds, each rank
//                    moving about 2x the buffer). Both give the same bits.
//   broadcast        the root sends to every other rank;
//   barrier          a one-byte token between every pair of ranks.
// Each rank sends (W-1) times its share, like the ring algorithms, but in one round rather
// than W-1, which suits the small-to-medium messages and world sizes it serves.
//
// Limits: reduce_scatter and the large all_reduce keep a staging buffer of (W-1) slices,
// reused across calls (it stays at its largest size). The rendezvous ends within the
// timeout unless ranks die between publishing their address and connecting (each such rank
// can add up to the timeout). Not thread-safe (see process_group.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/collectives/kv_store.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine::collectives {

// Joins the group `rank` of `size` through `store` (keys under options.prefix), blocking
// until every rank has joined or options.timeout passes (DeadlineExceeded naming the ranks
// that did not join). `hostname_or_interface`: where this rank listens, a network interface
// name ("eth0") or a host name / address ("10.1.2.3"); other ranks connect to the address
// it resolves to. The store is used only during this call.
absl::StatusOr<std::unique_ptr<ProcessGroup>> make_gloo_process_group(KeyValueStore& store, int rank, int size,
                                                                      const ProcessGroupOptions& options,
                                                                      std::string hostname_or_interface = "127.0.0.1");

}  // namespace fp8::engine::collectives
