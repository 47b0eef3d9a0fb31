#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fp8::scheduler {
namespace {

constexpr std::size_t kKinds = 2;

std::size_t kind_index(DeviceKind kind) { return kind == DeviceKind::kCuda ? 1 : 0; }

}  // namespace

bool fits(const JobView& job, const WorkerView& worker) {
  const bool cpus_ok = worker.cpus <= 0 || job.cpus_per_rank <= worker.cpus;
  const bool memory_ok = worker.memory_gb <= 0 || job.memory_gb <= worker.memory_gb;
  return cpus_ok && memory_ok;
}

const char* device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

const char* waiting_reason_name(Waiting::Reason reason) {
  return reason == Waiting::Reason::kBehind ? "behind" : "workers";
}

namespace {

// "waiting for 3 cpu workers: 2 registered, 1 free" (counting the workers that fit the
// job's ranks), naming what each must offer when some alive worker of the kind does not.
std::string workers_text(const JobView& job, int registered, int free, bool some_do_not_fit) {
  std::string text = absl::StrCat("waiting for ", job.world_size, " ", device_kind_name(job.kind), " worker",
                                  job.world_size == 1 ? "" : "s");
  if (some_do_not_fit) {
    absl::StrAppend(&text, " offering ", job.cpus_per_rank, " cpu", job.cpus_per_rank == 1 ? "" : "s");
    if (job.memory_gb > 0) absl::StrAppend(&text, " and ", absl::StrFormat("%.2f", job.memory_gb), " GiB");
  }
  absl::StrAppend(&text, ": ", registered, " registered, ", free, " free");
  if (registered < job.world_size) absl::StrAppend(&text, "; more must register");
  return text;
}

}  // namespace

Plan schedule(std::span<const JobView> queued, std::span<const WorkerView> workers) {
  // Free workers per kind, in rank-assignment order; and every alive worker per kind,
  // busy or not (what a job could get once running jobs end).
  std::array<std::vector<const WorkerView*>, kKinds> pools;
  std::array<std::vector<const WorkerView*>, kKinds> alive;
  {
    std::vector<const WorkerView*> sorted;
    for (const WorkerView& w : workers) {
      if (w.alive) sorted.push_back(&w);
    }
    std::sort(sorted.begin(), sorted.end(), [](const WorkerView* a, const WorkerView* b) {
      return std::tie(a->registered_seq, a->id) < std::tie(b->registered_seq, b->id);
    });
    std::unordered_set<std::string> seen;
    for (const WorkerView* w : sorted) {
      if (!seen.insert(w->id).second) continue;
      alive[kind_index(w->kind)].push_back(w);
      if (!w->busy) pools[kind_index(w->kind)].push_back(w);
    }
  }
  // Per pool: placed in this call, or held back for a waiting job.
  std::array<std::vector<bool>, kKinds> used;
  std::array<std::vector<bool>, kKinds> held;
  for (std::size_t k = 0; k < kKinds; ++k) {
    used[k].assign(pools[k].size(), false);
    held[k].assign(pools[k].size(), false);
  }
  std::array<const JobView*, kKinds> first_holding{};  // the first job holding workers back

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

  // Why hold workers back at all: otherwise a stream of small jobs would keep taking
  // workers as they free up and a large gang (or a higher-priority job) would wait
  // forever. Why only those that fit it: a worker the waiting job cannot use does not
  // bring its start closer. Kinds are disjoint pools, so a cuda job never holds cpu
  // workers back.
  Plan plan;
  for (const JobView* job : order) {
    if (job->world_size < 1) continue;  // malformed; never placeable, blocks nothing
    const std::size_t k = kind_index(job->kind);
    const std::vector<const WorkerView*>& pool = pools[k];
    const std::size_t want = static_cast<std::size_t>(job->world_size);
    std::vector<std::size_t> picked;  // the first unused, not held workers that fit
    std::size_t free_fitting = 0;     // unused ones that fit, held back or not
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (used[k][i] || !fits(*job, *pool[i])) continue;
      ++free_fitting;
      if (!held[k][i] && picked.size() < want) picked.push_back(i);
    }
    if (picked.size() == want) {
      Placement p;
      p.job_id = job->id;
      p.ranks.reserve(want);
      for (std::size_t r = 0; r < want; ++r) {
        used[k][picked[r]] = true;
        p.ranks.push_back(RankSlot{static_cast<int>(r), pool[picked[r]]->id});
      }
      plan.placements.push_back(std::move(p));
      continue;
    }
    const auto registered = std::count_if(alive[k].begin(), alive[k].end(),
                                          [&](const WorkerView* w) { return fits(*job, *w); });
    Waiting waiting{job->id, Waiting::Reason::kWorkers,
                    workers_text(*job, static_cast<int>(registered), static_cast<int>(free_fitting),
                                static_cast<std::size_t>(registered) < alive[k].size())};
    if (free_fitting >= want && first_holding[k] != nullptr) {
      waiting.reason = Waiting::Reason::kBehind;
      waiting.text = absl::StrCat("behind ", first_holding[k]->id, " (priority ", first_holding[k]->priority, ")");
    }
    plan.waiting.push_back(std::move(waiting));
    if (static_cast<std::size_t>(registered) < want) continue;  // more must register: holds nothing
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (!used[k][i] && fits(*job, *pool[i])) held[k][i] = true;
    }
    if (first_holding[k] == nullptr) first_holding[k] = job;
  }
  return plan;
}

}  // namespace fp8::scheduler
