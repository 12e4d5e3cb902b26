// RMSNorm over the last dimension, optionally fused with the residual add of pre-norm decoders.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"
#include "rows.h"

namespace ckt {

// Field order is a speed choice: a kernel reads its parameters through the constant cache in 64-byte lines, and a
// decode-size launch waits on every line it misses. In this order the forward reads two lines (the sizes, eps and
// pointers first, then the row offsets), both before its reduction; with the pointers first it read four, two of
// them (cols, out's row stride, eps) first after the barrier (H100, ncu, bf16 rows of 4096: 1 row 3.30 -> 3.25 us,
// 8 rows 3.41 -> 3.34, 128 rows 3.82 -> 3.78; docs/benchmarks.md, 2026-12-06 (decode, parameters)). Set fields by
// name.
struct RmsNormArgs {
  int64_t rows, cols;  // normalized over `cols`
  float eps;
  bool single_rounding;  // weight applied in fp32 before the one rounding (torch.nn.RMSNorm); otherwise the
                         // normalized value is rounded to the input dtype first (transformers, diffusers)
  void* out;
  const void* input;
  const void* weight;               // [cols], or nullptr for the form without weight
  RowOffsets input_rows, out_rows;  // where each tensor's rows start
  void* residual_out;               // fused add: residual_out = input + residual, out = norm(residual_out);
  const void* residual;             // both nullptr otherwise
  RowOffsets residual_out_rows, residual_rows;
};

// types: the input's (also residual and residual_out), the weight's and out's; see DTypes (config.h).
cudaError_t rms_norm(const DTypes& types, const RmsNormArgs& args, cudaStream_t stream);

// Backward of y = rms_norm(x) [* weight]: grad_input = inv * (g - x * inv^2 * mean(g * x)) with g = grad_out
// [* weight] and inv = rsqrt(mean(x^2) + eps), plus grad_residual when given (the fused add's second output
// feeds it). The weight's gradient, sum over rows of grad_out * norm(x), is accumulated in fp32, one partial row per
// block of the launch (in `weight_grad_partial`, scratch the caller allocates), then added up into `weight_grad`
// (a launch of one block writes `weight_grad` straight).
struct RmsNormBackwardArgs {
  void* grad_input;
  void* weight_grad;           // [cols], the weight's dtype; nullptr without weight
  float* weight_grad_partial;  // [rms_norm_backward_partial_rows(...), cols] fp32 scratch; nullptr without weight
  const void* grad_out;
  const void* input;          // the normalized input (for the fused add: input + residual)
  const void* weight;         // [cols], or nullptr
  const void* grad_residual;  // or nullptr
  int64_t rows, cols;
  int64_t grad_input_stride;                                 // elements between rows (the binding allocates grad_input)
  RowOffsets grad_out_rows, input_rows, grad_residual_rows;  // any layout (grad_out: e.g. from a transpose)
  float eps;
  bool single_rounding;  // as in RmsNormArgs: whether norm(x) was rounded before the weight multiply
};

// types: the input's (also grad_input and grad_residual), the weight's and grad_out's (the forward output's).
int64_t rms_norm_backward_partial_rows(const DTypes& types, const RmsNormBackwardArgs& args);
cudaError_t rms_norm_backward(const DTypes& types, const RmsNormBackwardArgs& args, cudaStream_t stream);

}  // namespace ckt
