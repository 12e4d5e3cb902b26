// AdaLN modulation: y = norm(x) * (1 + scale) + shift, with RMSNorm or LayerNorm without affine weights.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"

namespace ckt {

struct AdaLnArgs {
  void* out;
  const void* input;
  const void* scale;   // element (b, s, col) of scale sits at b * scale_batch_stride + s * scale_token_stride + col;
  const void* shift;   // a token stride of 0 gives one (scale, shift) row per sample, a batch stride of 0 one for all
  int64_t rows, cols;  // rows = batch * tokens, normalized over `cols`
  int64_t tokens;      // tokens per sample: row r is token r % tokens of sample r / tokens
  // Element (b, s, col) of out and input, as of scale and shift: any strides (the last dimension contiguous). Rows
  // that fold into one stride pass batch_stride == tokens * token_stride (the kernels then take row * token_stride).
  int64_t out_batch_stride, out_token_stride, input_batch_stride, input_token_stride;      // elements
  int64_t scale_batch_stride, scale_token_stride, shift_batch_stride, shift_token_stride;  // elements
  float eps;
  bool layer_norm;  // LayerNorm (mean and biased variance) when true, RMSNorm otherwise; neither has a weight
};

// types: the input's, scale's and shift's (one type), and out's: all one type, or fp32 parameters and output beside
// a bfloat16 or float16 input (see DTypes in config.h).
cudaError_t adaln(const DTypes& types, const AdaLnArgs& args, cudaStream_t stream);

// Backward of y = norm(x) * (1 + scale) + shift. With n = norm(x), g = grad_out * (1 + scale) and inv the row's
// rsqrt(...): grad_input = inv * (g - n * mean(g * n)) for RMSNorm, inv * (g - mean(g) - n * mean(g * n)) for
// LayerNorm. The modulation gradients are grad_out * n (scale) and grad_out (shift); each is wanted or not (null),
// and comes out in one of two ways:
// - per row, nothing summed (a modulation with one row per row of x: per token, or a batch of one): the rows
//   straight into grad_scale / grad_shift, in the modulation's dtype, contiguous (row r at r * cols), by a row kernel;
// - summed in fp32 over chunks of `chunk_rows` consecutive tokens of one sample, one partial row per chunk (in
//   grad_scale_partial / grad_shift_partial): chunk c covers tokens [j * chunk_rows, min((j + 1) * chunk_rows,
//   tokens)) of sample c / chunks_per_sample, j = c % chunks_per_sample. The caller adds the partial rows up to the
//   shapes of scale and shift (chunk_rows 1: one row per token) with adaln_sum_partials.
// A launch takes one way: partial rows (either) or rows (either, or neither), not both.
struct AdaLnBackwardArgs {
  void* grad_input;
  void* grad_scale;           // [rows, cols] of scale's dtype, written by the row kernel; nullptr: not wanted
  void* grad_shift;           // same
  float* grad_scale_partial;  // [batch * chunks_per_sample, cols] fp32, written by the chunk kernel; or nullptr
  float* grad_shift_partial;  // same shape
  const void* grad_out;
  const void* input;
  const void* scale;  // addressed as in AdaLnArgs
  int64_t rows, cols, tokens, chunk_rows;
  int64_t grad_input_stride;                             // elements between rows (the binding allocates it)
  int64_t grad_out_batch_stride, grad_out_token_stride;  // elements, addressed as in AdaLnArgs
  int64_t input_batch_stride, input_token_stride;        // elements
  int64_t scale_batch_stride, scale_token_stride;        // elements
  float eps;
  bool layer_norm;
};

// chunk_rows for a per-sample (or shared) modulation: about eight chunks per SM, enough to fill the GPU.
int64_t adaln_backward_chunk_rows(int64_t rows, int64_t tokens);
// types: the input's (also grad_input), scale's and grad_out's (the forward output's), as for adaln.
cudaError_t adaln_backward(const DTypes& types, const AdaLnBackwardArgs& args, cudaStream_t stream);

// A scale or shift gradient from those partial rows, in one launch: out[g * cols + c] (dtype, the scale's or the
// shift's: float32 is taken whether or not it is a compiled precision) = sum over r < rows
// of partial[g * group_stride + r * row_stride + c], for g < groups; the strides pick the rows that fold into
// each element of the modulation's shape (per sample, per token, shared across the batch).
struct AdaLnPartialSums {
  void* out;
  const float* partial;
  int64_t groups, rows, group_stride, row_stride, cols;
};
cudaError_t adaln_sum_partials(DType dtype, const AdaLnPartialSums& args, cudaStream_t stream);

}  // namespace ckt
