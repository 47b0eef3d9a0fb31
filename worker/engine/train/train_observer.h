// What the training loop tells the outside world, and how: an interface the executables
// implement (fp8-train prints lines; the worker daemon will forward reports to the
// coordinator), so the engine knows nothing of terminals or gRPC.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp8::engine {

struct TrainStart {
  std::string job;
  std::string model;        // LlamaConfig::describe()
  std::string device;       // "cpu"
  std::string fp8;          // "tensorwise: 14 of 15 linears in fp8 (output excluded ...)"
  int64_t parameters = 0;
  int64_t first_step = 1;   // > 1 when resumed
  int64_t total_steps = 0;
  int64_t tokens_per_step = 0;  // over all ranks
  int world_size = 1;           // ranks training together (FSDP when > 1)
  std::string sharding;         // "fsdp over 2 gloo ranks; fp8 all-gather: 14 weights", or empty
  std::optional<std::filesystem::path> resumed_from;
};

// One rank's communication per step (FSDP).
struct StepComm {
  double all_gather_fp8_bytes = 0;
  double all_gather_f32_bytes = 0;
  double all_gather_bf16_bytes = 0;   // fsdp.param_dtype bf16
  double reduce_scatter_f32_bytes = 0;
  double reduce_scatter_bf16_bytes = 0;  // fsdp.reduce_dtype bf16
  double all_reduces = 0;
  double all_reduce_bytes = 0;
  double weight_scale_all_reduces = 0;
  double comm_ms = 0;     // collectives running on the communication thread
  double exposed_ms = 0;  // the compute thread waiting for them
  // Tensor parallelism (parallel.tensor > 1): the all-reduces across the tensor-parallel
  // ranks (partial outputs and input gradients, amaxes, the grad norm), all on the compute
  // thread, so all exposed. The fields above are the data-parallel (FSDP) axis's.
  double tensor_all_reduces = 0;
  double tensor_all_reduce_bytes = 0;  // this rank's traffic of every tensor-parallel collective
  double tensor_ms = 0;
  // Of which sequence parallelism's (parallel.sequence): the all-gathers of the normed tokens
  // as fp8 codes, those in high precision (and of the gradients), and the reduce-scatters.
  double sequence_gather_fp8_bytes = 0;
  double sequence_gather_bytes = 0;
  double sequence_reduce_scatter_bytes = 0;

  StepComm& operator+=(const StepComm& o) {
    all_gather_fp8_bytes += o.all_gather_fp8_bytes;
    all_gather_f32_bytes += o.all_gather_f32_bytes;
    all_gather_bf16_bytes += o.all_gather_bf16_bytes;
    reduce_scatter_f32_bytes += o.reduce_scatter_f32_bytes;
    reduce_scatter_bf16_bytes += o.reduce_scatter_bf16_bytes;
    all_reduces += o.all_reduces;
    all_reduce_bytes += o.all_reduce_bytes;
    weight_scale_all_reduces += o.weight_scale_all_reduces;
    comm_ms += o.comm_ms;
    exposed_ms += o.exposed_ms;
    tensor_all_reduces += o.tensor_all_reduces;
    tensor_all_reduce_bytes += o.tensor_all_reduce_bytes;
    tensor_ms += o.tensor_ms;
    sequence_gather_fp8_bytes += o.sequence_gather_fp8_bytes;
    sequence_gather_bytes += o.sequence_gather_bytes;
    sequence_reduce_scatter_bytes += o.sequence_reduce_scatter_bytes;
    return *this;
  }
  StepComm& operator/=(double steps) {
    all_gather_fp8_bytes /= steps;
    all_gather_f32_bytes /= steps;
    all_gather_bf16_bytes /= steps;
    reduce_scatter_f32_bytes /= steps;
    reduce_scatter_bf16_bytes /= steps;
    all_reduces /= steps;
    all_reduce_bytes /= steps;
    weight_scale_all_reduces /= steps;
    comm_ms /= steps;
    exposed_ms /= steps;
    tensor_all_reduces /= steps;
    tensor_all_reduce_bytes /= steps;
    tensor_ms /= steps;
    sequence_gather_fp8_bytes /= steps;
    sequence_gather_bytes /= steps;
    sequence_reduce_scatter_bytes /= steps;
    return *this;
  }
};

// One optimizer step, reported at every log interval and at the last step.
struct StepReport {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;         // mean over the step's micro-batches
  double lr = 0;
  double grad_norm = 0;    // before clipping
  double step_ms = 0;      // mean over the steps since the last report
  double data_ms = 0;      // of which fetching batches (mean likewise)
  double tokens_per_second = 0;  // over the steps since the last report
  std::optional<double> val_loss;  // when an evaluation ran at this step
  // FSDP only: this rank's communication, mean per step over the same steps as step_ms,
  // so that step_ms - data_ms - comm->exposed_ms is the step's computation.
  std::optional<StepComm> comm;
  // The device's memory (Backend::memory_stats: GPU memory on CUDA, the tensors' host
  // memory on the CPU): the most in use at any moment of the steps since the last report,
  // and what the device's allocator holds at this step's end, its cache included.
  int64_t peak_memory_bytes = 0;
  int64_t reserved_memory_bytes = 0;
};

// The delayed-scaling state of one cast of one fp8 linear (amax_histories.h).
struct AmaxHistoryRecord {
  std::string layer;           // "layers.0.attention.wq"
  std::string cast;            // Float8Linear::DelayedCasts::names(): "input", "weight", "grad_output"
  std::vector<float> history;  // oldest first
  float scale = 0;             // the scale the next cast uses (0: none yet)
  float range_use = 0;         // DelayedScaling::last_range_use(): > 1 saturated
};

// What one fp8 cast of one layer did at a report step: the numbers exported as metrics
// (deploy/METRICS.md, fp8_cast_*). This rank's view: activations and gradients differ
// per rank under FSDP; weights are cast with one global scale.
struct CastNumericsRecord {
  std::string layer;            // "layers.0.attention.wq"
  std::string tensor;           // tensor_kind_name(): "input", "weight", "grad_output"
  float amax = 0;               // largest |value| at the cast
  float scale = 0;              // the scale it used (axiswise: the smallest row scale)
  float range_use = 0;          // amax·scale / fp8 max: > 1 clipped
  float saturated_ratio = 0;    // fraction of values with |x·scale| beyond fp8 max
  float underflow_ratio = 0;    // fraction of values that were nonzero and became zero
};

struct TrainSummary {
  int64_t first_step = 1;
  int64_t last_step = 0;       // the last step completed
  bool stopped_early = false;  // asked to stop before the job's last step
  std::optional<double> first_loss, last_loss;
  std::optional<double> best_val_loss, last_val_loss;
  int64_t tokens = 0;          // trained in this run
  double seconds = 0;          // wall time of this run's steps, evaluations and checkpoints
  std::optional<std::filesystem::path> last_checkpoint;
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const TrainStart&) {}
  // Before each step queues any work (a profiler marks steps apart with it).
  virtual void on_step_start(int64_t /*step*/) {}
  virtual void on_step(const StepReport&) {}
  virtual void on_checkpoint(int64_t /*step*/, const std::filesystem::path& /*dir*/) {}
  // Delayed scaling only: every cast's amax history after `step`, at each log interval
  // and each checkpoint. Identical on every rank (amaxes are all-reduced each step).
  virtual void on_amax_histories(int64_t /*step*/, const std::vector<AmaxHistoryRecord>& /*histories*/) {}
  // Every fp8 recipe: each cast's numerics at a report step, right after on_step.
  virtual void on_cast_numerics(int64_t /*step*/, const std::vector<CastNumericsRecord>& /*casts*/) {}
  // Something worth a line in the log that does not stop training (a skipped damaged
  // checkpoint, say).
  virtual void on_warning(const std::string&) {}
  virtual void on_finish(const TrainSummary&) {}
};

}  // namespace fp8::engine
