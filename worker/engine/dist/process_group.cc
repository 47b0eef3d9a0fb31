#include "worker/engine/dist/process_group.h"

namespace fp8::engine::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";  // an out-of-range value cast into the enum
}

}  // namespace fp8::engine::dist
