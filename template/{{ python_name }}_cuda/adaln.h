// AdaLN modulation: y = norm(x) * (1 + scale) + shift, with RMSNorm or LayerNorm without affine weights.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"

namespace ckt {

struct AdaLnArgs {
  void* out;
  const void* input;
  const void* scale;  // element (b, s, col) of scale sits at b * scale_batch_stride + s * scale_token_stride + col;
  const void* shift;  // a token stride of 0 gives one (scale, shift) row per sample, a batch stride of 0 one for all
  int64_t rows, cols;  // rows = batch * tokens, normalized over `cols`; rows may be any strided 2-D view
  int64_t tokens;      // tokens per sample: row r is token r % tokens of sample r / tokens
  int64_t out_stride, input_stride;  // elements between rows
  int64_t scale_batch_stride, scale_token_stride, shift_batch_stride, shift_token_stride;  // elements
  float eps;
  bool layer_norm;  // LayerNorm (mean and biased variance) when true, RMSNorm otherwise; neither has a weight
};

cudaError_t adaln(DType dtype, const AdaLnArgs& args, cudaStream_t stream);

}  // namespace ckt
