// Meeting the other ranks: a Gloo TCP device on the given host or interface, then a full
// mesh of connections whose addresses travel through our KeyValueStore. The whole
// rendezvous ends within options.timeout: a rank that never shows up is named in a
// DeadlineExceeded error instead of blocking everyone forever.
#pragma once

#include <memory>
#include <string>

#include <gloo/context.h>

#include "absl/status/statusor.h"
#include "worker/engine/collectives/kv_store.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine::collectives {

// Keys: options.prefix + "gloo/joined/<rank>" (who has arrived) and options.prefix +
// "gloo/<Gloo's own keys>" (connection addresses). `hostname_or_interface` is a network
// interface name when the machine has one of that name ("eth0"), else a host name or an
// address to bind to ("127.0.0.1", "10.1.2.3").
absl::StatusOr<std::shared_ptr<gloo::Context>> connect_gloo_mesh(KeyValueStore& store, int rank, int size,
                                                                 const ProcessGroupOptions& options,
                                                                 const std::string& hostname_or_interface);

}  // namespace fp8::engine::collectives
