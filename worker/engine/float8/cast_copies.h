// CastCopies: the fp8 copies a layer's cast writes (codes, transposed codes, dequantized
// values), the bulk of a layer's memory. Layers of one shape and config can share them
// where no two hold their casts at once (SharedCastCopies): under full activation
// checkpointing a block's casts are read only from its recomputed forward to the end of
// its backward, one block after another, so every block's wq can share one set, every
// block's wk another, and so on. Sharing changes where the copies live, never their values.
#pragma once

#include <memory>
#include <vector>

#include "worker/engine/float8/backend_buffer.h"

namespace fp8::engine {

struct CastCopies {
  explicit CastCopies(Backend& backend) : out(backend), out_t(backend), dequantized(backend) {}
  BackendBuffer out;          // fp8 codes as stored
  BackendBuffer out_t;        // fp8 codes transposed
  BackendBuffer dequantized;  // the codes' values in the compute dtype, for a mixed GEMM
};

// The copies of the i-th cast of every layer created with it (Float8Linear::create), made on
// first request. Needed only while creating: each layer keeps its copies alive.
class SharedCastCopies {
 public:
  explicit SharedCastCopies(Backend& backend) : backend_(&backend) {}
  std::shared_ptr<CastCopies> of_cast(size_t i) {
    while (copies_.size() <= i) copies_.push_back(std::make_shared<CastCopies>(*backend_));
    return copies_[i];
  }

 private:
  Backend* backend_;
  std::vector<std::shared_ptr<CastCopies>> copies_;
};

}  // namespace fp8::engine
