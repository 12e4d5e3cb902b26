// GEGLU as in diffusers' `GEGLU` module, applied to the output of its projection: the last dimension of the
// input is [value | gate] (first half value, second half gate) and out = value * gelu(gate).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"
#include "rows.h"

namespace ckt {

struct GegluArgs {
  void* out;             // [rows, inner]; backward: the input's gradient [rows, 2 * inner]
  const void* input;     // [rows, 2 * inner]: value in columns [0, inner), gate in [inner, 2 * inner)
  const void* grad_out;  // backward only: the output's gradient [rows, inner]; nullptr otherwise
  int64_t rows, inner;   // the last dimension is contiguous
  RowOffsets out_rows, input_rows, grad_out_rows;  // where each tensor's rows start
  bool tanh;                                       // GELU's tanh approximation instead of the exact erf form
};

// Forward: out = value * gelu(gate). Backward (grad_out set): out = [grad_out * gelu(gate) | grad_out * value *
// gelu'(gate)], the gradients of value and gate, computed in fp32 and rounded once each.
cudaError_t geglu(DType dtype, const GegluArgs& args, cudaStream_t stream);

}  // namespace ckt
