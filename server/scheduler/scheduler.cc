#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <tuple>
#include <unordered_set>
#include <utility>

namespace fp8::scheduler {
namespace {

constexpr std::size_t kKinds = 2;

std::size_t KindIndex(DeviceKind kind) { return kind == DeviceKind::kCuda ? 1 : 0; }

}  // namespace

bool Fits(const JobView& job, const WorkerView& worker) {
  const bool cpus_ok = worker.cpus <= 0 || job.cpus_per_rank <= worker.cpus;
  const bool memory_ok = worker.memory_gb <= 0 || job.memory_gb <= worker.memory_gb;
  return cpus_ok && memory_ok;
}

const char* DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

std::vector<Placement> Schedule(std::span<const JobView> queued,
                                std::span<const WorkerView> workers) {
  // Free workers per kind, in rank-assignment order. Each pool is consumed from the
  // front, so a later placement gets the next workers in the same order.
  std::array<std::vector<const WorkerView*>, kKinds> pools;
  {
    std::vector<const WorkerView*> free;
    for (const WorkerView& w : workers) {
      if (w.alive && !w.busy) free.push_back(&w);
    }
    std::sort(free.begin(), free.end(), [](const WorkerView* a, const WorkerView* b) {
      return std::tie(a->registered_seq, a->id) < std::tie(b->registered_seq, b->id);
    });
    std::unordered_set<std::string> seen;
    for (const WorkerView* w : free) {
      if (seen.insert(w->id).second) pools[KindIndex(w->kind)].push_back(w);
    }
  }
  std::array<std::vector<bool>, kKinds> used;  // per pool: placed in this call
  for (std::size_t k = 0; k < kKinds; ++k) used[k].assign(pools[k].size(), false);

  std::vector<const JobView*> order;
  order.reserve(queued.size());
  for (const JobView& j : queued) order.push_back(&j);
  std::sort(order.begin(), order.end(), [](const JobView* a, const JobView* b) {
    // Higher priority first, then earlier submission, then id for a total order.
    return std::make_tuple(-static_cast<int64_t>(a->priority), a->submitted_seq,
                           std::cref(a->id)) <
           std::make_tuple(-static_cast<int64_t>(b->priority), b->submitted_seq,
                           std::cref(b->id));
  });

  // Head-of-line blocking, per kind. Once a job of a kind does not fit, no later job of
  // that kind is placed in this call, even one small enough to fit now. Otherwise a
  // stream of small jobs would keep taking workers as they free up and a large gang
  // (or a higher-priority job) would wait forever: the workers it waits for must be
  // left free until enough of them are. Blocking is per kind because cpu and cuda
  // workers are disjoint pools: a cuda job waiting can never be helped by holding cpu
  // workers back, so jobs of the other kind go on. The cost: free workers may idle
  // while the blocked job waits, and a job larger than every worker of its kind stalls
  // its kind until more workers register (the coordinator reports such jobs).
  std::array<bool, kKinds> blocked{};

  std::vector<Placement> placements;
  for (const JobView* job : order) {
    if (job->world_size < 1) continue;  // malformed; never placeable, blocks nothing
    const std::size_t k = KindIndex(job->kind);
    if (blocked[k]) continue;
    const std::vector<const WorkerView*>& pool = pools[k];
    const std::size_t want = static_cast<std::size_t>(job->world_size);
    std::vector<std::size_t> picked;  // the first unused workers that can hold a rank
    for (std::size_t i = 0; i < pool.size() && picked.size() < want; ++i) {
      if (!used[k][i] && Fits(*job, *pool[i])) picked.push_back(i);
    }
    if (picked.size() < want) {
      blocked[k] = true;  // gang: nothing is reserved for it
      continue;
    }
    Placement p;
    p.job_id = job->id;
    p.ranks.reserve(want);
    for (std::size_t r = 0; r < want; ++r) {
      used[k][picked[r]] = true;
      p.ranks.push_back(RankSlot{static_cast<int>(r), pool[picked[r]]->id});
    }
    placements.push_back(std::move(p));
  }
  return placements;
}

}  // namespace fp8::scheduler
