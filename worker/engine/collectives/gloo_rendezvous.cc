#include "worker/engine/collectives/gloo_rendezvous.h"

#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "worker/engine/collectives/gloo_error_text.h"
#include "worker/engine/collectives/gloo_store_adapter.h"
#include "worker/engine/collectives/sigpipe_guard.h"

namespace fp8::engine::collectives {
namespace {

// Gloo waits with std::condition_variable::wait_for, which overflows on huge durations.
constexpr absl::Duration kLongestTimeout = absl::Hours(24 * 7);

std::chrono::milliseconds to_chrono(absl::Duration d) {
  d = std::clamp(d, absl::Milliseconds(1), kLongestTimeout);
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

std::string join_key(const ProcessGroupOptions& options, int rank) {
  return absl::StrCat(options.prefix, "gloo/joined/", rank);
}

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> open_device(const std::string& hostname_or_interface) {
  gloo::transport::tcp::attr attr;
  const bool is_interface = ::if_nametoindex(hostname_or_interface.c_str()) != 0;
  if (is_interface) {
    attr.iface = hostname_or_interface;
  } else {
    attr.hostname = hostname_or_interface;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot open a TCP device on ", is_interface ? "interface" : "host",
                                               " '", hostname_or_interface, "': ", gloo_error_text(e.what())));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("cannot open a TCP device on '", hostname_or_interface, "'"));
  }
}

// Publishes this rank's arrival and waits for everyone's, so that a missing rank is named
// (all of them, at once) before Gloo starts waiting for addresses one rank at a time.
absl::Status wait_for_all_ranks(KeyValueStore& store, int rank, int size, const ProcessGroupOptions& options,
                                absl::Time deadline) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // The value only helps someone who reads the store by hand.
  if (absl::Status s = store.set(join_key(options, rank), absl::StrCat("host ", host, " pid ", ::getpid()));
      !s.ok()) {
    return s;
  }
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(join_key(options, r));
  absl::Status waited = store.wait(keys, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!absl::IsDeadlineExceeded(waited)) return waited;

  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    absl::StatusOr<bool> present = store.contains(keys[static_cast<size_t>(r)]);
    if (!present.ok()) return present.status();
    if (!*present) missing.push_back(r);
  }
  return absl::DeadlineExceededError(absl::StrCat(missing.size() == 1 ? "rank " : "ranks ",
                                                  absl::StrJoin(missing, ", "), " did not join within ",
                                                  absl::FormatDuration(options.timeout)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<gloo::Context>> connect_gloo_mesh(KeyValueStore& store, int rank, int size,
                                                                 const ProcessGroupOptions& options,
                                                                 const std::string& hostname_or_interface) {
  const absl::Time deadline = absl::Now() + std::min(options.timeout, kLongestTimeout);
  const std::string where = absl::StrCat("gloo rendezvous of rank ", rank, " of ", size, " (prefix '",
                                         options.prefix, "', ", store.describe(), ")");
  auto with_where = [&](const absl::Status& s) { return absl::Status(s.code(), absl::StrCat(where, ": ", s.message())); };
  // Gloo's event-loop thread starts in here and inherits this thread's signal mask.
  ScopedSigpipeBlock no_sigpipe;

  absl::StatusOr<std::shared_ptr<gloo::transport::Device>> device = open_device(hostname_or_interface);
  if (!device.ok()) return with_where(device.status());
  if (absl::Status s = wait_for_all_ranks(store, rank, size, options, deadline); !s.ok()) return with_where(s);

  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Gloo waits up to 5x this for each connection to come up; a fifth of what is left keeps
  // a rank that died after publishing its address from stretching the rendezvous much past
  // the deadline (several such ranks could still add up; see gloo_process_group.h).
  context->setTimeout(to_chrono((deadline - absl::Now()) / 5));
  GlooStoreAdapter adapter(store, absl::StrCat(options.prefix, "gloo/"), deadline);
  try {
    context->connectFullMesh(adapter, *device);
  } catch (const StoreFailure& failure) {
    return with_where(failure.status());
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(where, ": connecting to the other ranks failed: ", gloo_error_text(e.what())));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(where, ": connecting to the other ranks failed"));
  }
  // Collectives pass their own timeouts; this is Gloo's default for anything that does not.
  context->setTimeout(to_chrono(options.timeout));
  return std::shared_ptr<gloo::Context>(std::move(context));
}

}  // namespace fp8::engine::collectives
