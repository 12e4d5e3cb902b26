// AdaLN: y = norm(x) * (1 + scale) + shift in one pass, fp32 math and one rounding to x's dtype.
// norm is RMSNorm (x * rsqrt(mean(x^2) + eps)) or LayerNorm ((x - mean) * rsqrt(var + eps), biased variance),
// both without weight. The eager module chain rounds after the norm, after `1 + scale`, after the product and
// after the sum; this kernel rounds once and reads x once, writes y once.
#include "adaln.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "dispatch.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rows.h"
#include "vec.cuh"

namespace ckt {
namespace {

// Vectors of x cached per thread: each brings its scale and shift vectors along, so 2 (not launch.cuh's
// kMaxPerThread, 4) keeps a thread's x, scale and shift in registers without spilling.
constexpr int kMaxCached = 2;

// Where row r, token s of sample b, of x, out or a gradient starts. Without MULTI every such tensor's rows fold
// into one stride (the binding then passes batch_stride == tokens * token_stride): r * token_stride, as contiguous
// rows always were. MULTI (a tensor whose batch and token strides do not fold, e.g. a transposed (S, B, D) one):
// b * batch_stride + s * token_stride.
template <bool MULTI>
__device__ __forceinline__ int64_t row_start(int64_t r, int64_t b, int64_t s, int64_t batch_stride,
                                             int64_t token_stride) {
  return MULTI ? b * batch_stride + s * token_stride : r * token_stride;
}

// A row's mean (LayerNorm; 0 for RMSNorm) and 1 / sqrt(variance + eps), from this thread's `sum` (of x for
// LayerNorm, of x^2 for RMSNorm). `reduce` adds a value up across the row's threads; LayerNorm's second pass calls
// `for_each_x(f)`, which must call f(x) for each of this thread's elements of the row.
template <bool LAYER, typename Reduce, typename ForEachX>
__device__ __forceinline__ void row_statistics(float sum, float n_cols, float eps, Reduce&& reduce,
                                               ForEachX&& for_each_x, float& mean, float& inv) {
  mean = 0.f;
  if constexpr (LAYER) {
    mean = reduce(sum) / n_cols;
    float sum_sq = 0.f;  // of (x - mean)^2: no cancellation, unlike mean(x^2) - mean^2
    for_each_x([&](float x) {
      const float d = x - mean;
      sum_sq += d * d;
    });
    inv = rsqrtf(reduce(sum_sq) / n_cols + eps);
  } else {
    inv = rsqrtf(reduce(sum) / n_cols + eps);
  }
}

// One row per blockDim.x threads. PER_THREAD > 0 keeps the row in registers as stored and fetches the row's
// scale and shift before the reductions, so that their latency overlaps the reductions' (loading them after
// would serialize each load behind the previous vector's store: `out` may alias them as far as the compiler
// knows). PER_THREAD == 0 streams rows too long for registers and reads x again for each pass (mostly from L2).
// LAYER computes the mean first, then the variance of (x - mean) from the same registers: two reductions.
// M, O: the types of scale and shift and of the output (T, or both fp32 beside a 2-byte T: see dispatch_mixed).
// THREADS > 0: a fixed-width launch (see row_threads, launch): one row of THREADS * PER_THREAD vectors per block,
// its sample tokens.div(row) in 32 bits (a.tokens as a Divider, read only then), one barrier per reduction.
template <typename T, typename M, typename O, int VEC, int PER_THREAD, bool LAYER, bool MULTI, int THREADS = 0>
__global__ void __launch_bounds__(THREADS > 0 ? THREADS : max_row_threads(PER_THREAD))
    adaln_kernel(const AdaLnArgs a, const Divider tokens) {
  using V = Vec<T, VEC>;
  const int64_t row = THREADS > 0 ? blockIdx.x : static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = THREADS > 0 || row < a.rows;  // threads of a missing row still take part in the reductions
  const int64_t r = live ? row : 0;
  const int64_t b = THREADS > 0 ? tokens.div(static_cast<uint32_t>(r)) : r / a.tokens, s = r - b * a.tokens;
  const T* x = static_cast<const T*>(a.input) + row_start<MULTI>(r, b, s, a.input_batch_stride, a.input_token_stride);
  const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
  const M* sh = static_cast<const M*>(a.shift) + b * a.shift_batch_stride + s * a.shift_token_stride;
  auto fetch = [](const auto* p) { return load_raw<VEC>(p); };

  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  V xv[kCached];
  Vec<M, VEC> scv[kCached], shv[kCached];
  float sum = 0.f;  // of x (LayerNorm's mean) or of x^2 (RMSNorm)
  if (live) {
    // Every load first, then their use: a load used in the same visit is waited for there, one vector at a time
    // (each visit is its own branch).
    if constexpr (PER_THREAD > 0) {
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        xv[i] = fetch(x + col);
        scv[i] = fetch(sc + col);
        shv[i] = fetch(sh + col);
      });
    }
    for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) xv[0] = fetch(x + col);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float f = to_float(xv[i].e[k]);
        sum += LAYER ? f : f * f;
      }
    });
  }
  float mean, inv;
  auto for_each_x = [&](auto f) {
    if (!live) return;
    for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) xv[0] = fetch(x + col);  // streaming: read the row again
#pragma unroll
      for (int k = 0; k < VEC; ++k) f(to_float(xv[i].e[k]));
    });
  };
  int parity = 0;  // fixed width: one barrier per reduction (LayerNorm's two take parities 0, 1); the same sums
  auto reduce = [&](float v) {
    float sums[1] = {v};
    if constexpr (THREADS > 0) row_sums_alternating<1, THREADS>(sums, parity++);
    if constexpr (THREADS == 0) row_sums(sums);
    return sums[0];
  };
  const float n_cols = static_cast<float>(THREADS > 0 ? THREADS * PER_THREAD * VEC : a.cols);
  row_statistics<LAYER>(sum, n_cols, a.eps, reduce, for_each_x, mean, inv);
  if (!live) return;

  O* y = static_cast<O*>(a.out) + row_start<MULTI>(r, b, s, a.out_batch_stride, a.out_token_stride);
  for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
    if constexpr (PER_THREAD == 0) {
      xv[0] = fetch(x + col);
      scv[0] = fetch(sc + col);
      shv[0] = fetch(sh + col);
    }
    Vec<O, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float n = (to_float(xv[i].e[k]) - mean) * inv;
      out.e[k] = from_float<O>(n * (1.f + to_float(scv[i].e[k])) + to_float(shv[i].e[k]));
    }
    store_raw(y + col, out);
  });
}

// Many rows of 1-4K elements sharing their scale and shift, of widths without a fixed-width launch: one warp per
// row, x in its registers (N vectors per lane), statistics by shuffles only; scale and shift read after them, from
// L1, where a sample's rows keep them. H200: per-sample 2 x 7392 x 2048 bf16 from 51 to 43 us (before its fixed
// width); per-token modulation (all three tensors from HBM) stays faster on the block kernel (66 vs 77 us).
constexpr int kWarpRowBlock = 256;  // 8 rows per block

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T, typename M, typename O, int VEC, int N, bool LAYER, bool MULTI>
__global__ void __launch_bounds__(kWarpRowBlock) adaln_warp_kernel(const AdaLnArgs a) {
  using V = Vec<T, VEC>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kWarpRowBlock / 32);
  const float n_cols = static_cast<float>(a.cols);
#pragma unroll 1
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (kWarpRowBlock / 32) + threadIdx.x / 32; row < a.rows;
       row += warps) {
    const int64_t b = row / a.tokens, s = row - b * a.tokens;
    const T* x =
        static_cast<const T*>(a.input) + row_start<MULTI>(row, b, s, a.input_batch_stride, a.input_token_stride);
    const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
    const M* sh = static_cast<const M*>(a.shift) + b * a.shift_batch_stride + s * a.shift_token_stride;
    V xv[N];
    float sum = 0.f;  // of x (LayerNorm's mean) or of x^2 (RMSNorm)
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t col = (static_cast<int64_t>(i) * 32 + lane) * VEC;
      if (col < a.cols) {
        xv[i] = load_raw<VEC>(x + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += LAYER ? to_float(xv[i].e[k]) : to_float(xv[i].e[k]) * to_float(xv[i].e[k]);
      }
    }
    float mean, inv;
    auto for_each_x = [&](auto f) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if ((static_cast<int64_t>(i) * 32 + lane) * VEC < a.cols) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) f(to_float(xv[i].e[k]));
        }
      }
    };
    row_statistics<LAYER>(sum, n_cols, a.eps, warp_sum, for_each_x, mean, inv);
    O* y = static_cast<O*>(a.out) + row_start<MULTI>(row, b, s, a.out_batch_stride, a.out_token_stride);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t col = (static_cast<int64_t>(i) * 32 + lane) * VEC;
      if (col < a.cols) {
        const Vec<M, VEC> scv = load_raw<VEC>(sc + col), shv = load_raw<VEC>(sh + col);
        Vec<O, VEC> out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float n = (to_float(xv[i].e[k]) - mean) * inv;
          out.e[k] = from_float<O>(n * (1.f + to_float(scv.e[k])) + to_float(shv.e[k]));
        }
        store_raw(y + col, out);
      }
    }
  }
}

template <typename T, typename M, typename O, int VEC, bool MULTI>
cudaError_t launch_any_width(const AdaLnArgs& a, cudaStream_t stream) {
  const int64_t vectors = a.cols / VEC;
  const bool shared_modulation = a.scale_token_stride == 0 && a.shift_token_stride == 0;
  if (shared_modulation && vectors > 4 * 32 && vectors <= 16 * 32 && a.rows >= 16 * static_cast<int64_t>(sm_count())) {
    auto warp_rows = [&](auto n) {
      constexpr int N = decltype(n)::value;
      auto run = [&](auto layer) {
        constexpr auto kernel = adaln_warp_kernel<T, M, O, VEC, N, decltype(layer)::value, MULTI>;
        const int64_t blocks = (a.rows + kWarpRowBlock / 32 - 1) / (kWarpRowBlock / 32);
        const int64_t persistent = int64_t{resident_blocks(kernel, kWarpRowBlock, 0)} * sm_count();
        const dim3 grid(static_cast<unsigned>(std::min(blocks, persistent)));
        kernel<<<grid, kWarpRowBlock, 0, stream>>>(a);
        return cudaGetLastError();
      };
      return a.layer_norm ? run(std::true_type{}) : run(std::false_type{});
    };
    return vectors <= 8 * 32 ? warp_rows(std::integral_constant<int, 8>{})
                             : warp_rows(std::integral_constant<int, 16>{});
  }
  const RowShape s = row_shape(vectors, a.rows, sm_count(), kMaxCached);
  const dim3 block(s.threads, s.rows);
  const dim3 grid(static_cast<unsigned>((a.rows + s.rows - 1) / s.rows));
  return dispatch_per_thread<kMaxCached>(s.per_thread, [&](auto per_thread) {
    constexpr int P = decltype(per_thread)::value;
    if (a.layer_norm) {
      adaln_kernel<T, M, O, VEC, P, true, MULTI><<<grid, block, 0, stream>>>(a, Divider());
    } else {
      adaln_kernel<T, M, O, VEC, P, false, MULTI><<<grid, block, 0, stream>>>(a, Divider());
    }
    return cudaGetLastError();
  });
}

// Rows of common DiT widths (1536: SD3, Wan 1.3B; 2048: LTX-Video; 3072: Flux; 4096: LTX-Video 13B) take a fixed-
// width launch, here and in the backward (adaln_lab.cu, H200, bf16 per sample 2 x 7392 x 2048: 34.1 us, the warp
// kernel 41.9, a copy 32.6).
template <typename T, typename M, typename O, int VEC, bool MULTI>
cudaError_t launch(const AdaLnArgs& a, cudaStream_t stream) {
  auto fixed = [&](auto threads) {
    constexpr int kThreads = decltype(threads)::value;
    return a.layer_norm ? adaln_kernel<T, M, O, VEC, kMaxCached, true, MULTI, kThreads>
                        : adaln_kernel<T, M, O, VEC, kMaxCached, false, MULTI, kThreads>;
  };
  auto any_width = [&] { return launch_any_width<T, M, O, VEC, MULTI>(a, stream); };
  return launch_fixed_rows<kMaxCached, VEC, !MULTI, 1536, 2048, 3072, 4096>(a, stream, fixed, any_width);
}

// Backward where nothing is summed (a modulation with one row per row of x, or no modulation gradient wanted): the
// forward's layout, one row per blockDim.x threads, rows stacked on threadIdx.y, one row group per block (no loop
// over rows: see rms_norm_kernel). PER_THREAD > 0 issues every load of the row (x, grad_out, scale) before the
// first use and keeps them as raw bits (see load_bits), hidden from the compiler across the reductions so that they
// are converted again where used; the row's grad_input, grad_scale and grad_shift are written straight in T (M for
// the modulation's), no fp32 scratch. PER_THREAD == 0 streams rows too long for registers and reads them again for
// each pass. MULTI: as in adaln_kernel (row_start). M: scale's and shift's type; G: grad_out's, the forward
// output's (M, as kAdaLnTypes requires). THREADS > 0: a fixed-width launch, as adaln_kernel's.
template <typename T, typename M, typename G, int VEC, int PER_THREAD, bool LAYER, bool MULTI, int THREADS = 0>
__global__ void __launch_bounds__(THREADS > 0 ? THREADS : max_row_threads(PER_THREAD))
    adaln_backward_rows_kernel(const AdaLnBackwardArgs a, const Divider tokens) {
  static_assert(std::is_same_v<M, G>, "grad_shift is grad_out itself");
  using V = Vec<T, VEC>;
  using B = Raw<T, VEC>;
  using BM = Raw<M, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  const int64_t group = THREADS > 0 ? blockIdx.x : int64_t{blockIdx.y} * gridDim.x + blockIdx.x;
  const int64_t row = THREADS > 0 ? group : group * blockDim.y + threadIdx.y;
  const bool live = THREADS > 0 || row < a.rows;  // threads of a missing row still take part in the reductions
  const int64_t r = live ? row : 0;
  const int64_t b = THREADS > 0 ? tokens.div(static_cast<uint32_t>(r)) : r / a.tokens, s = r - b * a.tokens;
  const T* x = static_cast<const T*>(a.input) + row_start<MULTI>(r, b, s, a.input_batch_stride, a.input_token_stride);
  const G* dy =
      static_cast<const G*>(a.grad_out) + row_start<MULTI>(r, b, s, a.grad_out_batch_stride, a.grad_out_token_stride);
  const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
  B xb[kCached];
  BM gb[kCached], sb[kCached];
  auto load = [&](int i, int64_t col) {
    xb[i] = load_bits_readonly<VEC>(x + col);
    gb[i] = load_bits_readonly<VEC>(dy + col);
    sb[i] = load_bits_readonly<VEC>(sc + col);
  };
  // x and g = grad_out * (1 + scale), the gradient reaching norm(x), of cached vector i.
  auto unpack = [&](int i, float (&xf)[VEC], float (&g)[VEC]) {
    const V xv = from_bits<T, VEC>(xb[i]);
    const Vec<M, VEC> gv = from_bits<M, VEC>(gb[i]), sv = from_bits<M, VEC>(sb[i]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      xf[k] = to_float(xv.e[k]);
      g[k] = to_float(gv.e[k]) * (1.f + to_float(sv.e[k]));
    }
  };

  float sums[3] = {0.f, 0.f, 0.f};  // of g * x, of x (LayerNorm) or x^2 (RMSNorm), of g
  if (live) {
    if constexpr (PER_THREAD > 0) for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, load);
    for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) load(0, col);
      float xf[VEC], g[VEC];
      unpack(i, xf, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        sums[0] += g[k] * xf[k];
        sums[1] += LAYER ? xf[k] : xf[k] * xf[k];
        sums[2] += g[k];
      }
      if constexpr (PER_THREAD > 0) {
        opaque_bits(xb[i]);
        opaque_bits(gb[i]);
        opaque_bits(sb[i]);
      }
    });
  }
  if constexpr (THREADS > 0) row_sums_alternating<3, THREADS>(sums, 0);  // one reduction for the three
  if constexpr (THREADS == 0) row_sums(sums);
  const float n_cols = static_cast<float>(THREADS > 0 ? THREADS * PER_THREAD * VEC : a.cols);
  float mean = 0.f, mean_g = 0.f, inv;
  if constexpr (LAYER) {
    mean = sums[1] / n_cols;
    mean_g = sums[2] / n_cols;
    float sum_sq = 0.f;  // of (x - mean)^2, as the forward computes it
    if (live) {
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        if constexpr (PER_THREAD == 0) xb[0] = load_bits_readonly<VEC>(x + col);
        const V xv = from_bits<T, VEC>(xb[i]);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = to_float(xv.e[k]) - mean;
          sum_sq += d * d;
        }
        if constexpr (PER_THREAD > 0) opaque_bits(xb[i]);
      });
    }
    float sq[1] = {sum_sq};
    if constexpr (THREADS > 0) row_sums_alternating<1, THREADS>(sq, 1);
    if constexpr (THREADS == 0) row_sums(sq);
    inv = rsqrtf(sq[0] / n_cols + a.eps);
  } else {
    inv = rsqrtf(sums[1] / n_cols + a.eps);
  }
  if (!live) return;
  // mean(g * n) with n = (x - mean) * inv; RMSNorm has mean = mean_g = 0.
  const float mean_gn = inv * (sums[0] / n_cols - mean * mean_g);

  T* dx = static_cast<T*>(a.grad_input) + row * a.grad_input_stride;
  M* dscale = a.grad_scale ? static_cast<M*>(a.grad_scale) + row * a.cols : nullptr;
  M* dshift = a.grad_shift ? static_cast<M*>(a.grad_shift) + row * a.cols : nullptr;
  for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
    if constexpr (PER_THREAD == 0) load(0, col);
    float xf[VEC], g[VEC], out[VEC], ds[VEC];
    unpack(i, xf, g);
    const Vec<M, VEC> gv = from_bits<M, VEC>(gb[i]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float n = (xf[k] - mean) * inv;
      out[k] = inv * (g[k] - mean_g - n * mean_gn);
      ds[k] = to_float(gv.e[k]) * n;
    }
    store_vec<VEC>(dx + col, out);
    if (dscale) store_vec<VEC>(dscale + col, ds);
    if (dshift) store_raw(dshift + col, gv);  // grad_out itself
  });
}

// Backward with summed modulation gradients (per sample, shared by the batch): one block per chunk of tokens
// sharing a modulation row, one row at a time across the block's threads. Each thread keeps its vectors of x and
// grad_out in registers (PER_THREAD > 0; the streaming path reads rows twice) and sums its columns of the wanted
// scale and shift gradients over the chunk in fp32, in shared memory (as register arrays they halved the resident
// blocks), or straight in the block's partial rows when streaming; each column belongs to one thread, so there is no
// race. scale is read from L1 where it is used (see opaque()). MULTI: as in adaln_kernel (row_start). M: scale's
// type; G: grad_out's (the forward output's); see adaln_kernel.
template <typename T, typename M, typename G, int VEC, int PER_THREAD, bool LAYER, bool MULTI>
__global__ void __launch_bounds__(kBackwardRowThreads, kBackwardMinBlocks)
    adaln_backward_kernel(const AdaLnBackwardArgs a) {
  using V = Vec<T, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  const int64_t chunks_per_sample = (a.tokens + a.chunk_rows - 1) / a.chunk_rows;
  const int64_t chunk = blockIdx.x, b = chunk / chunks_per_sample;
  const int64_t first = (chunk - b * chunks_per_sample) * a.chunk_rows;
  const int64_t last = first + a.chunk_rows < a.tokens ? first + a.chunk_rows : a.tokens;
  float* const dscale_partial = a.grad_scale_partial ? a.grad_scale_partial + chunk * a.cols : nullptr;
  float* const dshift_partial = a.grad_shift_partial ? a.grad_shift_partial + chunk * a.cols : nullptr;
  using Sums = ColumnSums<PER_THREAD, VEC>;
  extern __shared__ float sums_smem[];  // scale and shift gradient sums (PER_THREAD > 0)
  const Sums dscale{sums_smem, dscale_partial};
  const Sums dshift{sums_smem + Sums::slot_floats(blockDim.x), dshift_partial};
  // Shared-memory sums are kept whether wanted or not (cheaper than a test); only the wanted are written out.
  for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if (PER_THREAD > 0 || dscale_partial) dscale.at(i, col, k) = 0.f;
      if (PER_THREAD > 0 || dshift_partial) dshift.at(i, col, k) = 0.f;
    }
  });

  V xv[kCached];
  Vec<G, VEC> gv[kCached];
#pragma unroll 1
  for (int64_t s = first; s < last; ++s) {
    const int64_t row = b * a.tokens + s;
    const T* x =
        static_cast<const T*>(a.input) + row_start<MULTI>(row, b, s, a.input_batch_stride, a.input_token_stride);
    const G* dy = static_cast<const G*>(a.grad_out) +
                  row_start<MULTI>(row, b, s, a.grad_out_batch_stride, a.grad_out_token_stride);
    const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
    auto load = [&](int i, int64_t col) {
      xv[i] = load_raw<VEC>(x + col);
      gv[i] = load_raw<VEC>(dy + col);
    };
    auto g_at = [&](int i, int64_t col, float (&g)[VEC]) {  // the gradient reaching norm(x): grad_out * (1 + scale)
      const Vec<M, VEC> scv = load_raw<VEC>(sc + col);
#pragma unroll
      for (int k = 0; k < VEC; ++k) g[k] = to_float(gv[i].e[k]) * (1.f + to_float(scv.e[k]));
    };
    float sum_x = 0.f, sum_g = 0.f, sum_gx = 0.f;  // sum_x: of x (LayerNorm) or x^2 (RMSNorm)
    // Every load first, then their use (see adaln_kernel).
    if constexpr (PER_THREAD > 0) for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) { load(i, col); });
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) load(i, col);
      float g[VEC];
      g_at(i, col, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float xf = to_float(xv[i].e[k]);
        sum_x += LAYER ? xf : xf * xf;
        sum_g += g[k];
        sum_gx += g[k] * xf;
      }
      opaque(xv[i]);
      opaque(gv[i]);
    });
    opaque(sc);
    const float n_cols = static_cast<float>(a.cols);
    float mean = 0.f, inv, mean_g = 0.f;
    float sums[3] = {sum_gx, sum_x, sum_g};  // one reduction (one pair of barriers) for the three
    row_sums(sums);
    sum_gx = sums[0];
    if constexpr (LAYER) {
      mean = sums[1] / n_cols;
      mean_g = sums[2] / n_cols;
      float sum_sq = 0.f;  // of (x - mean)^2, as the forward computes it
      for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
        if constexpr (PER_THREAD == 0) xv[0] = load_raw<VEC>(x + col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = to_float(xv[i].e[k]) - mean;
          sum_sq += d * d;
        }
      });
      inv = rsqrtf(row_sum(sum_sq) / n_cols + a.eps);
    } else {
      inv = rsqrtf(sums[1] / n_cols + a.eps);
    }
    // mean(g * n) with n = (x - mean) * inv; RMSNorm has mean = mean_g = 0.
    const float mean_gn = inv * (sum_gx / n_cols - mean * mean_g);

    T* dx = static_cast<T*>(a.grad_input) + row * a.grad_input_stride;
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) load(0, col);
      float g[VEC], out[VEC];
      g_at(i, col, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float n = (to_float(xv[i].e[k]) - mean) * inv, dyf = to_float(gv[i].e[k]);
        out[k] = inv * (g[k] - mean_g - n * mean_gn);
        if (PER_THREAD > 0 || dscale_partial) dscale.at(i, col, k) += dyf * n;
        if (PER_THREAD > 0 || dshift_partial) dshift.at(i, col, k) += dyf;
      }
      store_vec<VEC>(dx + col, out);
    });
  }
  if constexpr (PER_THREAD > 0) {  // this thread's columns, from shared memory to the block's partial rows
    for_each_vector<PER_THREAD, VEC>(a.cols, [&](int i, int64_t col) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        if (dscale_partial) dscale_partial[col + k] = dscale.at(i, col, k);
        if (dshift_partial) dshift_partial[col + k] = dshift.at(i, col, k);
      }
    });
  }
}

// One backward launch with the register cache P (0: streaming). The cached rows' gradient sums take 2 x
// slot_floats floats of shared memory per block: up to 72 KiB (2-byte types, 512 threads per row, D up to 8192);
// a GPU that cannot give that much runs the streaming kernel instead.
template <typename T, typename M, typename G, int VEC, int P, bool MULTI>
cudaError_t launch_backward_shape(const AdaLnBackwardArgs& a, const RowShape& s, int64_t chunks, cudaStream_t stream) {
  const auto kernel = a.layer_norm ? adaln_backward_kernel<T, M, G, VEC, P, true, MULTI>
                                   : adaln_backward_kernel<T, M, G, VEC, P, false, MULTI>;
  const size_t smem = 2 * sizeof(float) * ColumnSums<P, VEC>::slot_floats(s.threads);
  if constexpr (P > 0) {
    if (!allow_shared_memory(kernel, smem)) return launch_backward_shape<T, M, G, VEC, 0, MULTI>(a, s, chunks, stream);
  }
  const dim3 grid(static_cast<unsigned>(chunks)), block(s.threads);  // one row at a time per block
  kernel<<<grid, block, smem, stream>>>(a);
  return cudaGetLastError();
}

// The row kernel's launch: the forward's shapes (row_shape with two cached vectors per thread, of x, grad_out and
// scale each), one row group per block, and its fixed widths (adaln_lab.cu, H200, bf16 per token 2 x 7392 x 2048,
// dx and dscale: 75.87 us, against 83.26 for two rows of any width per block and 75.62 for a copy of the bytes).
template <typename T, typename M, typename G, int VEC, bool MULTI>
cudaError_t launch_backward_rows(const AdaLnBackwardArgs& a, cudaStream_t stream) {
  auto fixed = [&](auto threads) {
    constexpr int kThreads = decltype(threads)::value;
    return a.layer_norm ? adaln_backward_rows_kernel<T, M, G, VEC, kMaxCached, true, MULTI, kThreads>
                        : adaln_backward_rows_kernel<T, M, G, VEC, kMaxCached, false, MULTI, kThreads>;
  };
  auto any_width = [&] {
    const RowShape s = row_shape(a.cols / VEC, a.rows, sm_count(), kMaxCached);
    return dispatch_per_thread<kMaxCached>(s.per_thread, [&](auto per_thread) {
      constexpr int P = decltype(per_thread)::value;
      const auto kernel = a.layer_norm ? adaln_backward_rows_kernel<T, M, G, VEC, P, true, MULTI>
                                       : adaln_backward_rows_kernel<T, M, G, VEC, P, false, MULTI>;
      kernel<<<group_grid((a.rows + s.rows - 1) / s.rows), dim3(s.threads, s.rows), 0, stream>>>(a, Divider());
      return cudaGetLastError();
    });
  };
  return launch_fixed_rows<kMaxCached, VEC, !MULTI, 1536, 2048, 3072, 4096>(a, stream, fixed, any_width);
}

template <typename T, typename M, typename G, int VEC, bool MULTI>
cudaError_t launch_backward(const AdaLnBackwardArgs& a, cudaStream_t stream) {
  if (!a.grad_scale_partial && !a.grad_shift_partial) return launch_backward_rows<T, M, G, VEC, MULTI>(a, stream);
  const int64_t chunks = (a.rows / a.tokens) * ((a.tokens + a.chunk_rows - 1) / a.chunk_rows);
  const RowShape s = row_shape(a.cols / VEC, chunks, sm_count(), kMaxCached, kBackwardRowThreads);
  return dispatch_per_thread<kMaxCached>(s.per_thread, [&](auto per_thread) {
    return launch_backward_shape<T, M, G, VEC, decltype(per_thread)::value, MULTI>(a, s, chunks, stream);
  });
}

}  // namespace

int64_t adaln_backward_chunk_rows(int64_t rows, int64_t tokens) {
  const int64_t wanted = 8 * static_cast<int64_t>(sm_count());  // 1024 resident threads per SM for D = 2048
  return std::max<int64_t>(1, std::min(tokens, (rows + wanted - 1) / wanted));
}

// The combinations of types AdaLN takes: all the input's, or fp32 scale, shift and output (see dispatch_mixed).
template <typename T, typename M, typename O> constexpr bool kAdaLnTypes = std::is_same_v<M, O>;

cudaError_t adaln_backward(const DTypes& types, const AdaLnBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  if (a.tokens <= 0 || a.chunk_rows <= 0 || a.rows % a.tokens != 0) return cudaErrorInvalidValue;
  const bool partial = a.grad_scale_partial || a.grad_shift_partial, rows = a.grad_scale || a.grad_shift;
  if (partial && rows) return cudaErrorInvalidValue;  // one way per launch (see AdaLnBackwardArgs)
  return dispatch_mixed(types, [&](auto t, auto m, auto g) {
    using T = decltype(t);
    using M = decltype(m);
    using G = decltype(g);
    if constexpr (!kAdaLnTypes<T, M, G>) {
      return cudaErrorInvalidValue;
    } else {
      const bool vectorizable =
          vectors_fit<T>(a.cols, {a.grad_input, a.grad_out, a.input, a.scale, a.grad_scale, a.grad_shift},
                         {a.grad_input_stride, a.grad_out_batch_stride, a.grad_out_token_stride, a.input_batch_stride,
                          a.input_token_stride, a.scale_batch_stride, a.scale_token_stride});
      const bool multi = a.input_batch_stride != a.tokens * a.input_token_stride ||
                         a.grad_out_batch_stride != a.tokens * a.grad_out_token_stride;
      if (vectorizable) {
        return multi ? launch_backward<T, M, G, kVec16<T>, true>(a, stream)
                     : launch_backward<T, M, G, kVec16<T>, false>(a, stream);
      }
      return multi ? launch_backward<T, M, G, 1, true>(a, stream) : launch_backward<T, M, G, 1, false>(a, stream);
    }
  });
}

cudaError_t adaln_sum_partials(DType dtype, const AdaLnPartialSums& a, cudaStream_t stream) {
  if (dtype == DType::Float32) {  // compiled or not: an fp32 scale or shift beside a 2-byte input has its gradient
    return sum_rows(a.partial, a.groups, a.rows, a.group_stride, a.row_stride, a.cols, static_cast<float*>(a.out),
                    stream);
  }
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return sum_rows(a.partial, a.groups, a.rows, a.group_stride, a.row_stride, a.cols, static_cast<T*>(a.out), stream);
  });
}

cudaError_t adaln(const DTypes& types, const AdaLnArgs& a, cudaStream_t stream) {
  return dispatch_mixed(types, [&](auto t, auto m, auto o) {
    using T = decltype(t);
    using M = decltype(m);
    using O = decltype(o);
    if constexpr (!kAdaLnTypes<T, M, O>) {
      return cudaErrorInvalidValue;
    } else {
      const bool vectorizable =
          vectors_fit<T>(a.cols, {a.out, a.input, a.scale, a.shift},
                         {a.out_batch_stride, a.out_token_stride, a.input_batch_stride, a.input_token_stride,
                          a.scale_batch_stride, a.scale_token_stride, a.shift_batch_stride, a.shift_token_stride});
      const bool multi = a.input_batch_stride != a.tokens * a.input_token_stride ||
                         a.out_batch_stride != a.tokens * a.out_token_stride;
      if (vectorizable) {
        return multi ? launch<T, M, O, kVec16<T>, true>(a, stream) : launch<T, M, O, kVec16<T>, false>(a, stream);
      }
      return multi ? launch<T, M, O, 1, true>(a, stream) : launch<T, M, O, 1, false>(a, stream);
    }
  });
}

}  // namespace ckt
