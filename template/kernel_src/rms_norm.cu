// RMSNorm: y = x * rsqrt(mean(x^2) + eps) [* weight], fp32 math, one read of x and one write of y.
#include "rms_norm.h"

#include <algorithm>

#include "dispatch.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "vec.cuh"

namespace ckt {
namespace {

// One row per blockDim.x threads, rows stacked on threadIdx.y; each block walks over row groups gridDim.x apart
// (one group each unless the grid is PERSISTENT, see launch()). A persistent block loads its next group's row
// before reducing the current one; a one-group block does not even hold registers for it (76 -> 60 registers for
// bf16 on sm_90), so more blocks fit per SM. The weight is read with each row: it stays in L1, and registers are
// better spent on more resident rows (caching it per block measured up to 17% slower on an H200). PER_THREAD > 0
// keeps rows in registers (one read of x); PER_THREAD == 0 streams rows too long for registers and reads them
// twice (the second time mostly from L2). WEIGHT 0: none; 1: round to T, then multiply by the weight; 2: multiply
// in fp32 and round once.
template <typename T, int VEC, int PER_THREAD, int WEIGHT, bool PERSISTENT>
__global__ void __launch_bounds__(max_row_threads(PER_THREAD)) rms_norm_kernel(const RmsNormArgs a) {
  using V = Vec<T, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  constexpr int kNext = PERSISTENT && PER_THREAD > 0 ? PER_THREAD : 1;
  const T* w = static_cast<const T*>(a.weight);
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;

  // One vector of a row as the model sees it: x, or x + residual rounded to T (as the unfused model stores it).
  auto load = [&](int64_t row, int64_t col) {
    V v = load_raw<VEC>(static_cast<const T*>(a.input) + row * a.input_stride + col);
    if (a.residual) {
      const V r = load_raw<VEC>(static_cast<const T*>(a.residual) + row * a.residual_stride + col);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v.e[k] = from_float<T>(to_float(v.e[k]) + to_float(r.e[k]));
    }
    return v;
  };
  auto row_of = [&](int64_t group) { return group * blockDim.y + threadIdx.y; };

  V xv[kCached], next[kNext];
  int64_t group = blockIdx.x;
  if constexpr (PER_THREAD > 0) {
    const int64_t row = row_of(group);
    if (row < a.rows) for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { xv[i] = load(row, col); });
  }
#pragma unroll 1
  for (; group < groups; group += gridDim.x) {  // uniform across the block: every thread meets every barrier
    const int64_t row = row_of(group);
    const bool live = row < a.rows;
    T* res_out = a.residual_out ? static_cast<T*>(a.residual_out) + row * a.residual_out_stride : nullptr;
    float sum_sq = 0.f;
    if constexpr (PERSISTENT && PER_THREAD > 0) {
      const int64_t next_row = row_of(group + gridDim.x);
      if (group + gridDim.x < groups && next_row < a.rows) {  // prefetch: in flight during this row's reduction
        for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { next[i] = load(next_row, col); });
      }
    }
    if constexpr (PER_THREAD > 0) {
      if (live) {
        for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) sum_sq += to_float(xv[i].e[k]) * to_float(xv[i].e[k]);
        });
      }
    } else if (live) {
      for_each_vector<0, VEC>(a.cols, [&](int, int64_t col) {
        xv[0] = load(row, col);
        if (res_out) store_raw(res_out + col, xv[0]);  // reread in the second pass
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum_sq += to_float(xv[0].e[k]) * to_float(xv[0].e[k]);
      });
    }
    const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(a.cols) + a.eps);

    if (live) {
      T* y = static_cast<T*>(a.out) + row * a.out_stride;
      const T* src = res_out ? res_out : static_cast<const T*>(a.input) + row * a.input_stride;
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
        if constexpr (PER_THREAD == 0) {  // streaming: read the row again
          xv[0] = load_raw<VEC>(src + col);
        } else {
          if (res_out) store_raw(res_out + col, xv[i]);
        }
        V wv;
        if constexpr (WEIGHT != 0) wv = load_raw<VEC>(w + col);
        float out[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float n = to_float(xv[i].e[k]) * inv_rms;
          if constexpr (WEIGHT == 0) out[k] = n;
          if constexpr (WEIGHT == 1) out[k] = round_to<T>(n) * to_float(wv.e[k]);
          if constexpr (WEIGHT == 2) out[k] = n * to_float(wv.e[k]);
        }
        store_vec<VEC>(y + col, out);
      });
    }
    if constexpr (PERSISTENT && PER_THREAD > 0) {
#pragma unroll
      for (int i = 0; i < PER_THREAD; ++i) xv[i] = next[i];
    } else if constexpr (PER_THREAD > 0) {  // a one-group block: loads the next group (if any) only now
      const int64_t next_row = row_of(group + gridDim.x);
      if (group + gridDim.x < groups && next_row < a.rows) {
        for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { xv[i] = load(next_row, col); });
      }
    }
  }
}

template <typename T, int VEC, int PER_THREAD, int WEIGHT, bool PERSISTENT>
cudaError_t launch_shape(const RmsNormArgs& a, const RowShape& s, cudaStream_t stream) {
  constexpr auto kernel = rms_norm_kernel<T, VEC, PER_THREAD, WEIGHT, PERSISTENT>;
  const dim3 block(s.threads, s.rows);
  const int64_t groups = (a.rows + s.rows - 1) / s.rows;
  const int64_t blocks = PERSISTENT ? std::min<int64_t>(groups, persistent_blocks<kernel>(s.threads * s.rows)) : groups;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks, kMaxGridX)));
  kernel<<<grid, block, 0, stream>>>(a);
  return cudaGetLastError();
}

// Launch configuration, from measurements on an H200 (bf16/fp16/fp32 rows of 2048-4096): the plain norm runs best
// with one block per row group (no persistent grid) and 16-byte vectors cached 4 per thread for 2-byte types, 2 for
// fp32 (more threads per row); the fused add, which moves twice the bytes per row, with a persistent grid (each
// block prefetching its next row) and 2 per thread.
template <typename T, int VEC> cudaError_t launch(const RmsNormArgs& a, cudaStream_t stream) {
  const bool fused = a.residual != nullptr;
  const int max_per_thread = fused || sizeof(T) == 4 ? 2 : 4;
  const RowShape s = row_shape(a.cols / VEC, a.rows, sm_count(), max_per_thread);
  auto launch_weight = [&](auto persistent) {
    return dispatch_per_thread(s.per_thread, [&](auto per_thread) {
      constexpr int P = decltype(per_thread)::value;
      constexpr bool kPersistent = decltype(persistent)::value;
      if (!a.weight) return launch_shape<T, VEC, P, 0, kPersistent>(a, s, stream);
      if (a.single_rounding) return launch_shape<T, VEC, P, 2, kPersistent>(a, s, stream);
      return launch_shape<T, VEC, P, 1, kPersistent>(a, s, stream);
    });
  };
  return fused ? launch_weight(std::true_type{}) : launch_weight(std::false_type{});
}

// Backward: one row per blockDim.x threads, rows stacked on threadIdx.y, a grid-stride loop over row groups. Each
// thread keeps its row's x and grad_out vectors in registers (PER_THREAD > 0; the streaming path reads them
// twice) and adds its columns of the weight gradient, over all the rows it visits, into fp32 sums of its own
// (ColumnSums); each block writes one partial row, which the caller adds up. The weight is read from L1 where it
// is used: registers go to the cached rows, so that two 512-thread blocks fit per SM (see opaque()).
template <typename T, int VEC, int PER_THREAD, int WEIGHT>
__global__ void __launch_bounds__(kBackwardRowThreads, kBackwardMinBlocks)
    rms_norm_backward_kernel(const RmsNormBackwardArgs a) {
  using V = Vec<T, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  // Weight-gradient sums: register-cached rows keep them per row slot in shared memory (as register arrays they
  // cost the kernel half its resident blocks) and add the slots up at the end; the streaming path (one row per
  // block) adds straight into the block's partial row.
  using Sums = ColumnSums<PER_THREAD, VEC>;
  extern __shared__ float dw_smem[];
  const int slot_floats = static_cast<int>(Sums::slot_floats(blockDim.x));
  float* const dw_partial = WEIGHT != 0 ? a.weight_grad_partial + int64_t{blockIdx.x} * a.cols : nullptr;
  const Sums dw{dw_smem + threadIdx.y * slot_floats, dw_partial};
  if constexpr (WEIGHT != 0) {
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) dw.at(i, col, k) = 0.f;
    });
  }

  V xv[kCached], gv[kCached];
#pragma unroll 1
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {  // uniform: every thread meets every barrier
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const T* x = static_cast<const T*>(a.input) + row * a.input_stride;
    const T* dy = static_cast<const T*>(a.grad_out) + a.grad_out_rows.offset(row);
    const T* w = static_cast<const T*>(a.weight);
    auto load = [&](int i, int64_t col) {
      xv[i] = load_raw<VEC>(x + col);
      gv[i] = load_raw<VEC>(dy + col);
    };
    auto g_at = [&](int i, int64_t col, float (&g)[VEC]) {  // the gradient reaching norm(x)
      to_floats(gv[i], g);
      if constexpr (WEIGHT != 0) {
        const V wv = load_raw<VEC>(w + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) g[k] *= to_float(wv.e[k]);
      }
    };
    float sums[2] = {0.f, 0.f};  // sum of x^2, sum of g * x
    if (live) {
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
        load(i, col);
        float g[VEC];
        g_at(i, col, g);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xf = to_float(xv[i].e[k]);
          sums[0] += xf * xf;
          sums[1] += g[k] * xf;
        }
        opaque(xv[i]);
        opaque(gv[i]);
      });
    }
    opaque(w);
    row_sums(sums);
    const float n_cols = static_cast<float>(a.cols);
    const float inv = rsqrtf(sums[0] / n_cols + a.eps);
    const float coef = inv * inv * inv * (sums[1] / n_cols);  // grad_input = inv * g - x * coef
    if (!live) continue;

    T* dx = static_cast<T*>(a.grad_input) + row * a.grad_input_stride;
    const T* dres = a.grad_residual ? static_cast<const T*>(a.grad_residual) + row * a.grad_residual_stride : nullptr;
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) load(0, col);
      float extra[VEC] = {};
      if (dres) load_vec<VEC>(dres + col, extra);
      float g[VEC], out[VEC];
      g_at(i, col, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xf = to_float(xv[i].e[k]);
        out[k] = inv * g[k] - xf * coef + extra[k];
        if constexpr (WEIGHT != 0) {
          const float n = WEIGHT == 1 ? round_to<T>(xf * inv) : xf * inv;  // the value the weight multiplied
          dw.at(i, col, k) += to_float(gv[i].e[k]) * n;
        }
      }
      store_vec<VEC>(dx + col, out);
    });
  }
  if constexpr (WEIGHT != 0 && PER_THREAD > 0) {  // the block's row slots, added up into its partial row
    __syncthreads();
    if (threadIdx.y == 0) {
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float* slots = &dw.at(i, col, k);
          float sum = 0.f;
          for (int slot = 0; slot < static_cast<int>(blockDim.y); ++slot) sum += slots[slot * slot_floats];
          dw_partial[col + k] = sum;
        }
      });
    }
  }
}

// Vectors of x and grad_out cached per thread, plus the weight-gradient sums: 2, not 4.
constexpr int kBackwardCached = 2;

// Resident threads per SM the backward aims for: each holds two rows' worth of 16-byte loads in flight; more
// blocks would only multiply the partial rows to add up.
constexpr int kBackwardThreadsPerSm = 1024;

// The backward launch: block shape, vector width, grid and the kernel with its shared memory, shared by the launch
// and by the count of partial rows the caller must allocate.
struct BackwardPlan {
  RowShape shape;
  bool vectorized;
  int64_t blocks;
  size_t smem;
  void (*kernel)(RmsNormBackwardArgs);
};

template <typename T, int VEC> void pick_backward_kernel(const RmsNormBackwardArgs& a, BackwardPlan& plan) {
  dispatch_per_thread<kBackwardCached>(plan.shape.per_thread, [&](auto per_thread) {
    constexpr int P = decltype(per_thread)::value;
    if (!a.weight) {
      plan.kernel = rms_norm_backward_kernel<T, VEC, P, 0>;
    } else {
      plan.kernel = a.single_rounding ? rms_norm_backward_kernel<T, VEC, P, 2> : rms_norm_backward_kernel<T, VEC, P, 1>;
    }
    const size_t slot_floats = ColumnSums<P, VEC>::slot_floats(plan.shape.threads);
    plan.smem = a.weight ? sizeof(float) * plan.shape.rows * slot_floats : 0;  // at most 36 KiB
    return cudaSuccess;
  });
}

template <typename T> BackwardPlan backward_plan(const RmsNormBackwardArgs& a) {
  BackwardPlan plan{};
  plan.vectorized = vectors_fit<T>(a.cols, {a.grad_input, a.grad_out, a.input, a.weight, a.grad_residual},
                                   {a.grad_input_stride, a.grad_out_rows.stride, a.grad_out_rows.group_stride,
                                    a.input_stride, a.grad_residual_stride});
  const int vec = plan.vectorized ? kVec16<T> : 1;
  plan.shape = row_shape(a.cols / vec, a.rows, sm_count(), kBackwardCached, kBackwardRowThreads);
  if (plan.shape.per_thread == 0) plan.shape.rows = 1;  // a streamed row adds into its block's partial row
  plan.vectorized ? pick_backward_kernel<T, kVec16<T>>(a, plan) : pick_backward_kernel<T, 1>(a, plan);
  const int threads = plan.shape.threads * plan.shape.rows;
  int fit = 0;  // blocks that are resident at once with the kernel's registers and shared memory
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, plan.kernel, threads, plan.smem);
  const int64_t per_sm = std::max(1, std::min(fit, kBackwardThreadsPerSm / threads));
  const int64_t groups = (a.rows + plan.shape.rows - 1) / plan.shape.rows;
  plan.blocks = std::max<int64_t>(1, std::min(groups, per_sm * sm_count()));
  return plan;
}

}  // namespace

int64_t rms_norm_backward_partial_rows(DType dtype, const RmsNormBackwardArgs& a) {
  int64_t rows = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    const auto plan = backward_plan<decltype(tag)>(a);
    rows = plan.blocks;
    return cudaSuccess;
  });
  return rows;
}

cudaError_t rms_norm_backward(DType dtype, const RmsNormBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto plan = backward_plan<T>(a);
    const dim3 block(plan.shape.threads, plan.shape.rows), grid(static_cast<unsigned>(plan.blocks));
    plan.kernel<<<grid, block, plan.smem, stream>>>(a);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || !a.weight) return err;
    return sum_rows(a.weight_grad_partial, 1, plan.blocks, 0, a.cols, a.cols, static_cast<T*>(a.weight_grad), stream);
  });
}

cudaError_t rms_norm(DType dtype, const RmsNormArgs& a, cudaStream_t stream) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vectorizable = vectors_fit<T>(a.cols, {a.out, a.input, a.weight, a.residual, a.residual_out},
                                             {a.out_stride, a.input_stride, a.residual_stride, a.residual_out_stride});
    return vectorizable ? launch<T, kVec16<T>>(a, stream) : launch<T, 1>(a, stream);
  });
}

}  // namespace ckt
