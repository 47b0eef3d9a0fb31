#include "server/coordinator/rank_memory.h"

#include "common/jobspec/memory_estimate.h"

namespace fp8::server {

double rank_memory_need_gb(const v1::JobSpec& spec) {
  const v1::ResourceSpec& r = spec.resources();
  if (r.has_memory_gb()) return r.memory_gb();
  const absl::StatusOr<jobspec::MemoryEstimate> e = jobspec::estimate_rank_memory(spec);
  if (!e.ok()) return 0;
  return static_cast<double>(e->total_bytes()) / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace fp8::server
