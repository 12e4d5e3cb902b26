// AdaLN: y = norm(x) * (1 + scale) + shift in one pass, fp32 math and one rounding to x's dtype.
// norm is RMSNorm (x * rsqrt(mean(x^2) + eps)) or LayerNorm ((x - mean) * rsqrt(var + eps), biased variance),
// both without weight. The eager module chain rounds after the norm, after `1 + scale`, after the product and
// after the sum; this kernel rounds once and reads x once, writes y once.
#include <algorithm>

#include "adaln.h"
#include "common.cuh"

namespace ckt {
namespace {

// Vectors of x cached per thread: each brings its scale and shift vectors along, so 2 (not common.cuh's 4) keeps
// a thread's x, scale and shift in registers without spilling.
constexpr int kMaxCached = 2;

// One row per blockDim.x threads, rows stacked on threadIdx.y, on a persistent grid like rms_norm.cu: each block
// walks over row groups and loads the next group's x before reducing the current one. PER_THREAD > 0 keeps the row
// in registers as stored, and keeps the (scale, shift) row too while consecutive rows share it (per-sample
// modulation: every row of a sample reading the same row from L2 would make it a hot spot). PER_THREAD == 0
// streams rows too long for registers and reads x again for each pass (mostly from L2). LAYER computes the mean
// first, then the variance of (x - mean) from the same registers: two reductions.
template <typename T, int VEC, int PER_THREAD, bool LAYER>
__global__ void __launch_bounds__(max_row_threads(PER_THREAD)) adaln_kernel(const AdaLnArgs a) {
  using V = Vec<T, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  auto row_of = [&](int64_t group) { return group * blockDim.y + threadIdx.y; };
  auto x_of = [&](int64_t row) { return static_cast<const T*>(a.input) + row * a.input_stride; };

  V xv[kCached], next[kCached], scv[kCached], shv[kCached];
  int64_t cached_b = -1, cached_s = -1;  // the (sample, token) whose scale and shift are in scv/shv
  int64_t group = blockIdx.x;
  if constexpr (PER_THREAD > 0) {
    const int64_t row = row_of(group);
    if (row < a.rows) {
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { xv[i] = load_raw<VEC>(x_of(row) + col); });
    }
  }
#pragma unroll 1
  for (; group < groups; group += gridDim.x) {  // uniform across the block: every thread meets every barrier
    const int64_t row = row_of(group);
    const bool live = row < a.rows;
    const int64_t b = live ? row / a.tokens : 0, s = live ? row - b * a.tokens : 0;
    const T* sc = static_cast<const T*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
    const T* sh = static_cast<const T*>(a.shift) + b * a.shift_batch_stride + s * a.shift_token_stride;
    const T* x = x_of(row);
    float sum = 0.f;  // of x (LayerNorm's mean) or of x^2 (RMSNorm)
    if constexpr (PER_THREAD > 0) {
      const int64_t next_row = row_of(group + gridDim.x);
      if (group + gridDim.x < groups && next_row < a.rows) {  // prefetch: in flight during this row's reductions
        for_each_vector<PER_THREAD, VEC>(a.cols,
                                         [&](int i, int64_t col) { next[i] = load_raw<VEC>(x_of(next_row) + col); });
      }
      // A new (scale, shift) row only when it differs from the cached one (token strides of 0 ignore s).
      const int64_t key_s = a.scale_token_stride == 0 && a.shift_token_stride == 0 ? 0 : s;
      if (live && (b != cached_b || key_s != cached_s)) {
        for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
          scv[i] = load_raw<VEC>(sc + col);
          shv[i] = load_raw<VEC>(sh + col);
        });
        cached_b = b;
        cached_s = key_s;
      }
    }
    if (live) {
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
        if constexpr (PER_THREAD == 0) xv[0] = load_raw<VEC>(x + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float f = to_float(xv[i].e[k]);
          sum += LAYER ? f : f * f;
        }
      });
    }
    const float n_cols = static_cast<float>(a.cols);
    float mean = 0.f, inv;
    if constexpr (LAYER) {
      mean = row_sum(sum) / n_cols;
      float sum_sq = 0.f;  // of (x - mean)^2: no cancellation, unlike mean(x^2) - mean^2
      if (live) {
        for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
          if constexpr (PER_THREAD == 0) xv[0] = load_raw<VEC>(x + col);  // streaming: read the row again
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float d = to_float(xv[i].e[k]) - mean;
            sum_sq += d * d;
          }
        });
      }
      inv = rsqrtf(row_sum(sum_sq) / n_cols + a.eps);
    } else {
      inv = rsqrtf(row_sum(sum) / n_cols + a.eps);
    }

    if (live) {
      T* y = static_cast<T*>(a.out) + row * a.out_stride;
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
        if constexpr (PER_THREAD == 0) {
          xv[0] = load_raw<VEC>(x + col);
          scv[0] = load_raw<VEC>(sc + col);
          shv[0] = load_raw<VEC>(sh + col);
        }
        V out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float n = (to_float(xv[i].e[k]) - mean) * inv;
          out.e[k] = from_float<T>(n * (1.f + to_float(scv[i].e[k])) + to_float(shv[i].e[k]));
        }
        store_raw(y + col, out);
      });
    }
    if constexpr (PER_THREAD > 0) {
#pragma unroll
      for (int i = 0; i < PER_THREAD; ++i) xv[i] = next[i];
    }
  }
}

template <typename T, int VEC, int PER_THREAD, bool LAYER>
cudaError_t launch_shape(const AdaLnArgs& a, const RowShape& s, cudaStream_t stream) {
  constexpr auto kernel = adaln_kernel<T, VEC, PER_THREAD, LAYER>;
  const int64_t groups = (a.rows + s.rows - 1) / s.rows;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(groups, persistent_blocks<kernel>(s.threads * s.rows))));
  kernel<<<grid, dim3(s.threads, s.rows), 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, int VEC> cudaError_t launch(const AdaLnArgs& a, cudaStream_t stream) {
  const RowShape s = row_shape(a.cols / VEC, a.rows, sm_count(), kMaxCached);
  return dispatch_per_thread<kMaxCached>(s.per_thread, [&](auto per_thread) {
    constexpr int P = decltype(per_thread)::value;
    return a.layer_norm ? launch_shape<T, VEC, P, true>(a, s, stream) : launch_shape<T, VEC, P, false>(a, s, stream);
  });
}

}  // namespace

cudaError_t adaln(DType dtype, const AdaLnArgs& a, cudaStream_t stream) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vectorizable =
        vectors_fit<T>(a.cols, {a.out, a.input, a.scale, a.shift},
                       {a.out_stride, a.input_stride, a.scale_batch_stride, a.scale_token_stride, a.shift_batch_stride,
                        a.shift_token_stride});
    return vectorizable ? launch<T, kVec16<T>>(a, stream) : launch<T, 1>(a, stream);
  });
}

}  // namespace ckt
