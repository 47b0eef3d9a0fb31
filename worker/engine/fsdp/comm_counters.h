// What FSDP's communication cost, cumulative since the model was sharded: for the step log
// now and for metrics later. A step's share is the difference of two snapshots.
#pragma once

#include <cstdint>

namespace fp8::engine::fsdp {

struct CommCounters {
  // Bytes of gathered tensors (world_size x shard bytes), by the element type that travelled.
  int64_t all_gather_bytes_fp8 = 0;
  int64_t all_gather_bytes_bf16 = 0;
  int64_t all_gather_bytes_f32 = 0;
  // Bytes of the gradients reduce-scattered (world_size x shard bytes), by the element type
  // that travelled.
  int64_t reduce_scatter_bytes_f32 = 0;
  int64_t reduce_scatter_bytes_bf16 = 0;
  // Every all-reduce, and of those the ones computing fp8 weight scales and the ones
  // synchronising delayed-scaling amaxes.
  int64_t all_reduces = 0;
  int64_t all_reduce_bytes = 0;  // of the reduced buffers
  int64_t weight_scale_all_reduces = 0;
  int64_t amax_all_reduces = 0;
  // Seconds the communication thread spent in collectives, and seconds the compute thread
  // spent waiting for them (communication not hidden behind compute).
  double comm_seconds = 0;
  double exposed_seconds = 0;

  int64_t all_gather_bytes() const { return all_gather_bytes_fp8 + all_gather_bytes_bf16 + all_gather_bytes_f32; }
  int64_t reduce_scatter_bytes() const { return reduce_scatter_bytes_f32 + reduce_scatter_bytes_bf16; }

  CommCounters operator-(const CommCounters& o) const {
    CommCounters d;
    d.all_gather_bytes_fp8 = all_gather_bytes_fp8 - o.all_gather_bytes_fp8;
    d.all_gather_bytes_bf16 = all_gather_bytes_bf16 - o.all_gather_bytes_bf16;
    d.all_gather_bytes_f32 = all_gather_bytes_f32 - o.all_gather_bytes_f32;
    d.reduce_scatter_bytes_f32 = reduce_scatter_bytes_f32 - o.reduce_scatter_bytes_f32;
    d.reduce_scatter_bytes_bf16 = reduce_scatter_bytes_bf16 - o.reduce_scatter_bytes_bf16;
    d.all_reduces = all_reduces - o.all_reduces;
    d.all_reduce_bytes = all_reduce_bytes - o.all_reduce_bytes;
    d.weight_scale_all_reduces = weight_scale_all_reduces - o.weight_scale_all_reduces;
    d.amax_all_reduces = amax_all_reduces - o.amax_all_reduces;
    d.comm_seconds = comm_seconds - o.comm_seconds;
    d.exposed_seconds = exposed_seconds - o.exposed_seconds;
    return d;
  }
};

}  // namespace fp8::engine::fsdp
