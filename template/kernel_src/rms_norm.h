// RMSNorm over the last dimension, optionally fused with the residual add of pre-norm decoders.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"
#include "rows.h"

namespace ckt {

struct RmsNormArgs {
  void* out;
  const void* input;
  const void* weight;    // [cols], or nullptr for the form without weight
  void* residual_out;    // fused add: residual_out = input + residual, out = norm(residual_out);
  const void* residual;  // both nullptr otherwise
  int64_t rows, cols;    // normalized over `cols`
  RowOffsets out_rows, input_rows, residual_out_rows, residual_rows;  // where each tensor's rows start
  float eps;
  bool single_rounding;  // weight applied in fp32 before the one rounding (torch.nn.RMSNorm); otherwise the
                         // normalized value is rounded to the input dtype first (transformers, diffusers)
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
