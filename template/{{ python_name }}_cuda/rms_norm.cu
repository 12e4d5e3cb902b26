// RMSNorm: y = x * rsqrt(mean(x^2) + eps) [* weight], fp32 math, one read of x and one write of y.
#include "common.cuh"
#include "rms_norm.h"

namespace ckt {
namespace {

// One row per blockDim.x threads. PER_THREAD > 0 keeps the row in registers (one read from memory);
// PER_THREAD == 0 streams rows too long for registers and reads them twice (the second time mostly from L2).
template <typename T, int VEC, int PER_THREAD>
__global__ void __launch_bounds__(1024) rms_norm_kernel(const RmsNormArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < a.rows;  // threads of a missing row still take part in the reduction's barriers
  const int64_t r = live ? row : 0;
  const T* x = static_cast<const T*>(a.input) + r * a.input_stride;
  const T* res = a.residual ? static_cast<const T*>(a.residual) + r * a.residual_stride : nullptr;
  T* res_out = a.residual_out ? static_cast<T*>(a.residual_out) + r * a.residual_out_stride : nullptr;

  // Loads one vector of the (residual-added) row; the sum is rounded to T as the unfused model stores it.
  auto load = [&](int64_t col, float (&v)[VEC]) {
    load_vec<VEC>(x + col, v);
    if (res) {
      float rv[VEC];
      load_vec<VEC>(res + col, rv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = round_to<T>(v[k] + rv[k]);
      store_vec<VEC>(res_out + col, v);
    }
  };

  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  float v[kCached][VEC];
  float sum_sq = 0.f;
  if (live) {
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      load(col, v[i]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum_sq += v[i][k] * v[i][k];
    });
  }
  const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(a.cols) + a.eps);
  if (!live) return;

  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.out) + r * a.out_stride;
  auto normalize_store = [&](int64_t col, float (&v)[VEC]) {
    float wv[VEC];
    if (w) load_vec<VEC>(w + col, wv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float n = v[k] * inv_rms;
      v[k] = !w ? n : a.single_rounding ? n * wv[k] : round_to<T>(n) * wv[k];
    }
    store_vec<VEC>(y + col, v);
  };
  const T* src = res_out ? res_out : x;  // this thread wrote res_out itself, so it reads its own values
  for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
    if constexpr (PER_THREAD == 0) load_vec<VEC>(src + col, v[0]);  // streaming: read the row again
    normalize_store(col, v[i]);
  });
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
