// RMSNorm: y = x * rsqrt(mean(x^2) + eps) [* weight], fp32 math, one read of x and one write of y.
#include "common.cuh"
#include "rms_norm.h"

namespace ckt {
namespace {

// One row per blockDim.x threads. PER_THREAD > 0 keeps the row in registers as stored (one read from memory) and
// loads the weight before the first store; PER_THREAD == 0 streams rows too long for registers and reads them
// twice (the second time mostly from L2).
template <typename T, int VEC, int PER_THREAD>
__global__ void __launch_bounds__(max_row_threads(PER_THREAD)) rms_norm_kernel(const RmsNormArgs a) {
  using V = Vec<T, VEC>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < a.rows;  // threads of a missing row still take part in the reduction's barriers
  const int64_t r = live ? row : 0;
  const T* x = static_cast<const T*>(a.input) + r * a.input_stride;
  const T* res = a.residual ? static_cast<const T*>(a.residual) + r * a.residual_stride : nullptr;
  T* res_out = a.residual_out ? static_cast<T*>(a.residual_out) + r * a.residual_out_stride : nullptr;

  // One vector of the row as the model sees it: x, or x + residual rounded to T (as the unfused model stores it).
  auto load = [&](int64_t col) {
    V v = load_raw<VEC>(x + col);
    if (res) {
      const V rv = load_raw<VEC>(res + col);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v.e[k] = from_float<T>(to_float(v.e[k]) + to_float(rv.e[k]));
    }
    return v;
  };

  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  V xv[kCached];
  float sum_sq = 0.f;
  if (live) {
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      xv[i] = load(col);
      if (PER_THREAD == 0 && res_out) store_raw(res_out + col, xv[i]);  // streaming: reread in the second pass
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += to_float(xv[i].e[k]) * to_float(xv[i].e[k]);
    });
  }
  const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(a.cols) + a.eps);
  if (!live) return;

  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.out) + r * a.out_stride;
  const T* src = res_out ? res_out : x;  // this thread wrote res_out itself, so it reads its own values
  // The second pass, specialized per weight mode (0: none, 1: round then weight, 2: weight then one rounding) so
  // that each variant keeps its own registers.
  auto normalize = [&](auto weight_mode) {
    constexpr int kMode = decltype(weight_mode)::value;
    V wv[kCached];
    if constexpr (kMode != 0 && PER_THREAD > 0) {
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { wv[i] = load_raw<VEC>(w + col); });
    }
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) {  // streaming: read the row (and the weight) again
        xv[0] = load_raw<VEC>(src + col);
        if constexpr (kMode != 0) wv[0] = load_raw<VEC>(w + col);
      } else {
        if (res_out) store_raw(res_out + col, xv[i]);
      }
      float out[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float n = to_float(xv[i].e[k]) * inv_rms;
        if constexpr (kMode == 0) out[k] = n;
        if constexpr (kMode == 1) out[k] = round_to<T>(n) * to_float(wv[i].e[k]);
        if constexpr (kMode == 2) out[k] = n * to_float(wv[i].e[k]);
      }
      store_vec<VEC>(y + col, out);
    });
  };
  if (!w) {
    normalize(std::integral_constant<int, 0>{});
  } else if (!a.single_rounding) {
    normalize(std::integral_constant<int, 1>{});
  } else {
    normalize(std::integral_constant<int, 2>{});
  }
}

template <typename T, int VEC> cudaError_t launch(const RmsNormArgs& a, cudaStream_t stream) {
  const RowShape s = row_shape(a.cols / VEC, a.rows, sm_count());
  const dim3 block(s.threads, s.rows);
  const dim3 grid(static_cast<unsigned>((a.rows + s.rows - 1) / s.rows));
  return dispatch_per_thread(s.per_thread, [&](auto per_thread) {
    rms_norm_kernel<T, VEC, decltype(per_thread)::value><<<grid, block, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t rms_norm(DType dtype, const RmsNormArgs& a, cudaStream_t stream) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const int bytes = V * sizeof(T);
    const bool vectorizable =
        a.cols % V == 0 && aligned(a.out, bytes) && aligned(a.input, bytes) && aligned(a.weight, bytes) &&
        aligned(a.residual, bytes) && aligned(a.residual_out, bytes) &&
        aligned(a.out_stride * sizeof(T), bytes) && aligned(a.input_stride * sizeof(T), bytes) &&
        aligned(a.residual_stride * sizeof(T), bytes) && aligned(a.residual_out_stride * sizeof(T), bytes);
    return vectorizable ? launch<T, V>(a, stream) : launch<T, 1>(a, stream);
  });
}

}  // namespace ckt
