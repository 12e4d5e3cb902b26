// RMSNorm over the last dimension, optionally fused with the residual add of pre-norm decoders.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"

namespace ckt {

struct RmsNormArgs {
  void* out;
  const void* input;
  const void* weight;     // [cols], or nullptr for the form without weight
  void* residual_out;     // fused add: residual_out = input + residual, out = norm(residual_out);
  const void* residual;   // both nullptr otherwise
  int64_t rows, cols;     // normalized over `cols`; rows may be any strided 2-D view
  int64_t out_stride, input_stride, residual_out_stride, residual_stride;  // elements between rows
  float eps;
  bool single_rounding;   // weight applied in fp32 before the one rounding (torch.nn.RMSNorm); otherwise the
                          // normalized value is rounded to the input dtype first (transformers, diffusers)
};

cudaError_t rms_norm(DType dtype, const RmsNormArgs& args, cudaStream_t stream);

}  // namespace ckt
