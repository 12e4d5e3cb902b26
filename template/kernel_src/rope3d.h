// LTX-Video 3-D rotary position embedding: diffusers' `apply_rotary_emb` (interleaved pairs over the full,
// un-split hidden width) with fp32 cos/sin tables, or with cos/sin generated in the kernel from the
// (frames, height, width) latent grid exactly as `LTXVideoRotaryPosEmbed` computes them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "config.h"

namespace ckt {

// The latent grid and LTXVideoRotaryPosEmbed's fp32 recipe for it. Token s = (f * height + h) * width + w has
// coordinates (f, h, w); along each axis g = ((index * mul1) * mul2) * inv_base (three fp32 roundings, the order
// of `grid * rope_interpolation_scale[i] * patch / base` on CUDA, where dividing by a number multiplies by its
// fp32 reciprocal; all ones when rope_interpolation_scale is None). Channel c < pad is the identity (cos 1,
// sin 0); otherwise pair j = (c - pad) / 2 rotates by freqs[j / 3] * (2 * g[j % 3] - 1). The factors and the
// frequencies live in device memory, made once per set of options by the caller (rope3d.py), so that a call
// passes one pointer instead of nine numbers through the dispatcher.
struct Rope3dGrid {
  // [kRope3dFactors + dim / 6] floats: mul1[3], mul2[3], inv_base[3] (frames, height, width), then
  // freqs[dim / 6] = (pi / 2) * theta ** linspace(0, 1, dim / 6)
  const float* params;
  int pad;  // dim % 6
  int32_t frames, height, width;
};
constexpr int kRope3dFactors = 9;

struct Rope3dArgs {
  // Up to two tensors (q and k) rotated by the same cos/sin in one launch; in[1] == nullptr for one tensor.
  void* out[2];
  const void* in[2];
  int64_t out_stride_b[2], out_stride_s[2], in_stride_b[2], in_stride_s[2];  // elements; last dim contiguous
  int64_t batch, seq, dim;                                                   // dim is even
  // fp32 tables [batch or 1, seq, dim] (batch stride 0 broadcasts one table over the batch), or nullptr to
  // generate them from `grid`.
  const float* cos;
  const float* sin;
  int64_t cos_stride_b, cos_stride_s, sin_stride_b, sin_stride_s;
  Rope3dGrid grid;
  // The transposed rotation (by -angle when both channels of a pair share cos/sin), the backward of the rotation:
  // out[2i] = x[2i] * cos[2i] + x[2i+1] * sin[2i+1], out[2i+1] = x[2i+1] * cos[2i+1] - x[2i] * sin[2i].
  bool transpose;
};

// out[2i] = x[2i] * cos[2i] - x[2i+1] * sin[2i], out[2i+1] = x[2i+1] * cos[2i+1] + x[2i] * sin[2i+1], in fp32
// with the products and the sum rounded as torch's eager ops round them, then one rounding to x's dtype.
cudaError_t rope3d(DType dtype, const Rope3dArgs& args, cudaStream_t stream);

// Writes the generator's fp32 tables for `grid`: cos/sin [seq, dim], rows `stride` floats apart.
struct Rope3dTableArgs {
  float* cos;
  float* sin;
  int64_t seq, dim, cos_stride, sin_stride;
  Rope3dGrid grid;
};

cudaError_t rope3d_cos_sin(const Rope3dTableArgs& args, cudaStream_t stream);

}  // namespace ckt
