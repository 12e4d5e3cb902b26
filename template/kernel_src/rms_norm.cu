// RMSNorm: y = x * rsqrt(mean(x^2) + eps) [* weight], fp32 math, one read of x and one write of y.
#include "rms_norm.h"

#include <algorithm>
#include <type_traits>

#include "dispatch.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "vec.cuh"

namespace ckt {
namespace {

// The forward's output of one vector x: n = x * inv_rms in fp32, then WEIGHT 0: n; 1: n rounded to T, times the
// weight w; 2: n times w; rounded to O. In one 2-byte type, WEIGHT 1 multiplies pairs of T (mul_rounded), as the
// fused add adds them (add_rounded): the same results in fewer instructions (sm_90 SASS, bf16 rows of 4096 on 256
// threads of 2 vectors: forward 246 -> 182 instructions, fused add 352 -> 226 and 44 -> 40 registers).
template <int WEIGHT, typename O, typename T, typename W, int VEC>
__device__ __forceinline__ Vec<O, VEC> normalized(const Vec<T, VEC>& x, float inv_rms, const Vec<W, VEC>& w) {
  Vec<O, VEC> y;
  if constexpr (WEIGHT == 1 && std::is_same_v<O, T> && std::is_same_v<W, T>) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) y.e[k] = from_float<T>(to_float(x.e[k]) * inv_rms);
    return mul_rounded(y, w);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float n = to_float(x.e[k]) * inv_rms;
      if constexpr (WEIGHT == 0) y.e[k] = from_float<O>(n);
      if constexpr (WEIGHT == 1) y.e[k] = from_float<O>(round_to<T>(n) * to_float(w.e[k]));
      if constexpr (WEIGHT == 2) y.e[k] = from_float<O>(n * to_float(w.e[k]));
    }
    return y;
  }
}

// One row per blockDim.x threads, rows stacked on threadIdx.y, one row group per block (no loop over groups: in a
// loop the compiler hoists the weight, the same for every row, out of it and holds it in fp32, 96 registers instead
// of 63 for bf16). PER_THREAD > 0 keeps rows in registers (one read of x); PER_THREAD == 0 streams rows too
// long for registers and reads them twice (the second time mostly from L2). The plain norm loads its weight
// vectors with x, before the reduction, so that their latency hides behind it (loaded after it, each waits behind
// the previous vector's store; H200, 8192 x 4096 bf16: 38.9 -> 37.3 us, the time of a device copy of the same
// bytes). So does the fused add (H200, bf16 rows of 4096, tests/kernel_lab under ncu, the weight read after the
// reduction though prefetched into L2 -> loaded with the row: 1 row 3.62 -> 2.98 us, 2048 rows 21.5 -> 19.9; the
// lab's timing of 8192 rows, before -> now: 68.9 -> 70.6, its 72 registers instead of 63 fit fewer blocks).
// WEIGHT 0: none; 1: round to T, then multiply by the weight; 2: multiply in fp32 and round once. FUSED: the input is
// x + residual rounded to T (as the unfused model stores it), also written out. MULTI: a tensor's rows take several
// levels of RowOffsets (e.g. the transposed q of a per-head norm); otherwise every row starts at row * stride.
// W, O: the weight's and the output's types (T, or fp32 beside a 2-byte T; see dispatch_mixed); the residual and
// its sum are T. THREADS > 0: a fixed-width launch (see row_threads: rows of exactly THREADS * PER_THREAD vectors,
// no bounds tests).
template <typename T, typename W, typename O, int VEC, int PER_THREAD, int WEIGHT, bool FUSED, bool MULTI, int THREADS>
__global__ void __launch_bounds__(THREADS >= 32 ? THREADS : max_row_threads(PER_THREAD))
    rms_norm_kernel(const RmsNormArgs a) {
  using V = Vec<T, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  constexpr bool kWeightFirst = WEIGHT != 0 && PER_THREAD > 0;
  const W* w = static_cast<const W*>(a.weight);

  using B = Raw<T, VEC>;                         // the residual's vectors wait as raw bits (see load_bits)
  auto add_residual = [](V& x, const B& bits) {  // x + residual, rounded to T as the unfused model stores it
    x = add_rounded(x, from_bits<T, VEC>(bits));
  };

  auto sum_of_squares = [](const V& v) {
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum += to_float(v.e[k]) * to_float(v.e[k]);
    return sum;
  };

  V xv[kCached];
  Vec<W, VEC> wv[kCached];
  B rv[FUSED ? kCached : 1];
  {
    const int64_t group = int64_t{blockIdx.y} * gridDim.x + blockIdx.x;
    const int64_t row = group * rows_per_block<THREADS>() + row_slot<THREADS>();
    const bool live = row < a.rows;  // threads of a missing row still take part in the reduction's barriers
    T* res_out = FUSED ? static_cast<T*>(a.residual_out) + a.residual_out_rows.offset<MULTI>(row) : nullptr;
    float sum_sq = 0.f;
    if (live) {
      // Every load of the row is issued before the first is used: a load followed by its use in the same visit
      // waits for it there, one vector at a time (the visits are separate branches).
      const T* x = static_cast<const T*>(a.input) + a.input_rows.offset<MULTI>(row);
      const T* r = FUSED ? static_cast<const T*>(a.residual) + a.residual_rows.offset<MULTI>(row) : nullptr;
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        xv[i] = load_raw<VEC>(x + col);
        if constexpr (FUSED) rv[i] = load_bits<VEC>(r + col);
        if constexpr (kWeightFirst) wv[i] = load_raw<VEC>(w + col);
        if constexpr (PER_THREAD == 0) {
          if constexpr (FUSED) {
            add_residual(xv[0], rv[0]);
            store_raw(res_out + col, xv[0]);  // reread in the second pass
          }
          sum_sq += sum_of_squares(xv[0]);
        }
      });
      if constexpr (PER_THREAD > 0) {
        for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
          if constexpr (FUSED) {  // the sum is stored now, so that its stores drain during the reduction
            add_residual(xv[i], rv[i]);
            store_raw(res_out + col, xv[i]);
          }
          sum_sq += sum_of_squares(xv[i]);
          opaque(xv[i]);  // converted again where used: no fp32 copy of the row held across the reduction
        });
      }
    }
    float sums[1] = {sum_sq};
    row_sums_alternating<1, THREADS>(sums, 0);  // one call per block: one barrier
    // The mean as torch's mean kernel takes it (and the backward): times 1 / cols, a constant in fixed-width
    // launches. Divided by cols, the row waited after the barrier on an int64 conversion, a reciprocal and the
    // division's refinement (about 15 instructions in the SASS).
    const float inv_cols = THREADS > 0 ? 1.f / (THREADS * kCached * VEC) : 1.f / static_cast<float>(a.cols);
    const float inv_rms = rsqrtf(sums[0] * inv_cols + a.eps);
    if (!live) return;

    O* y = static_cast<O*>(a.out) + a.out_rows.offset<MULTI>(row);
    const T* src = FUSED ? res_out : static_cast<const T*>(a.input) + a.input_rows.offset<MULTI>(row);
    for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
      if constexpr (PER_THREAD == 0) xv[0] = load_raw<VEC>(src + col);  // streaming: read the row again
      if constexpr (WEIGHT != 0 && !kWeightFirst) wv[i] = load_raw<VEC>(w + col);
      if constexpr (kWeightFirst) opaque(wv[i]);  // (likewise for the weight)
      store_raw(y + col, normalized<WEIGHT, O>(xv[i], inv_rms, wv[i]));
    });
  }
}

// Per-head rows (Qwen3's q_norm and k_norm: 128 elements of a 2-byte type, 16 vectors; rows of one level, no fused
// add): 16 threads per row, one vector each, 2 rows per thread with every load of both issued first, the weight's
// vector loaded once per thread; blocks of 8 row slots x 2 rows. Against the general kernel's shape for them (4
// threads of 4 vectors, 64 rows stacked per block, the weight read again for each row) on an H200
// (tests/kernel_lab/rms_norm_lab.cu, bf16, cold L2): 32768 x 128 9.31 -> 7.97 us (a copy of the same rows 8.35),
// 262144 x 128 37.86 -> 36.93 (copy 35.46), 65536 x 128 13.38 -> 13.18, and against the general kernel's plan for
// fewer rows (16 threads of one vector), 4096 x 128 4.58 -> 4.48. Blocks of 128 threads rather than 256, at the
// same occupancy: 262144 x 128 38.05 -> 36.48 us, 65536 x 128 13.76 -> 13.09, 32768 x 128 8.29 -> 8.06 (lab, same
// run, docs/benchmarks.md 2026-12-04); more rows per thread (4 or 8, at the occupancy their registers allow) were
// no faster. WEIGHT: as in normalized().
constexpr int kHeadLanes = 16, kHeadRowsPerThread = 2, kHeadBlock = 128;
constexpr int kHeadRowsPerBlock = kHeadBlock / kHeadLanes * kHeadRowsPerThread;
// Blocks an SM must hold at once: as many as its threads allow (sm_80 / sm_90: 16, at 32 registers, no spills). At
// the 34 registers ptxas took unbounded, 3/4 of them fit, and 32768 rows ran in two waves on an H200: lab 9.28 ->
// 7.94 us, bench.py (torch.profiler) 6.53 -> 5.49 us, 0.85x -> 1.01x torch.compile (docs/benchmarks.md, 2026-12-02
// (heads)). sm_100 is left unbounded: ptxas spilled at 32 registers there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200
constexpr int kHeadMinBlocks = 1;
#else
constexpr int kHeadMinBlocks = kMaxThreadsPerSm / kHeadBlock;
#endif

template <typename T, int WEIGHT>
__global__ void __launch_bounds__(kHeadBlock, kHeadMinBlocks) rms_norm_head_kernel(const RmsNormArgs a) {
  constexpr int VEC = kVec16<T>;
  using V = Vec<T, VEC>;
  const int64_t col = (threadIdx.x % kHeadLanes) * VEC;
  const int64_t group = int64_t{blockIdx.y} * gridDim.x + blockIdx.x;
  const int64_t first = group * kHeadRowsPerBlock + threadIdx.x / kHeadLanes;  // rows first + r * slots
  constexpr int kSlots = kHeadBlock / kHeadLanes;
  constexpr float kInvCols = 1.f / (kHeadLanes * VEC);  // a power of two: exactly sums[0] / a.cols
  V w;
  Raw<T, VEC> bits[kHeadRowsPerThread] = {};  // the rows as raw bits (see load_bits): a missing row reads as zeros
  if constexpr (WEIGHT != 0) w = load_raw<VEC>(static_cast<const T*>(a.weight) + col);
#pragma unroll
  for (int r = 0; r < kHeadRowsPerThread; ++r) {
    const int64_t row = first + r * kSlots;
    if (row < a.rows) bits[r] = load_bits<VEC>(static_cast<const T*>(a.input) + a.input_rows.offset<false>(row) + col);
  }
#pragma unroll
  for (int r = 0; r < kHeadRowsPerThread; ++r) {
    const int64_t row = first + r * kSlots;
    const V x = from_bits<T, VEC>(bits[r]);
    float sums[1] = {0.f};  // a missing row's lanes sum zeros: their shuffles stay among themselves
#pragma unroll
    for (int k = 0; k < VEC; ++k) sums[0] += to_float(x.e[k]) * to_float(x.e[k]);
    opaque_bits(bits[r]);  // converted again where used: no fp32 copy of the row held across the reduction
    group_sums(sums, kHeadLanes);
    if (row >= a.rows) continue;
    const float inv_rms = rsqrtf(sums[0] * kInvCols + a.eps);
    if constexpr (WEIGHT != 0) opaque(w);  // (likewise for the weight, the same for both rows)
    const V y = normalized<WEIGHT, T>(from_bits<T, VEC>(bits[r]), inv_rms, w);
    store_raw(static_cast<T*>(a.out) + a.out_rows.offset<false>(row) + col, y);
  }
}

// Launch configuration, from measurements on an H200 (tests/kernel_lab, docs/benchmarks.md): one block per row
// group, 16-byte vectors cached up to 4 per thread for 2-byte types, 2 for fp32 (more threads per row). The fused
// add runs the same way: a persistent grid whose blocks prefetched their next row measured 8-21% slower. Rows of
// common widths whose tensors have one level of rows take a fixed-width launch: 2-byte rows of 2048, 3072, 4096,
// 5120 or 8192 elements (4 vectors per thread; 2, on twice the threads, for up to 16 rows per SM, 4 fused), fp32
// rows of 2048 or 4096 (2 per thread), and per-head rows of 128 2-byte elements (rms_norm_head_kernel; fused with an
// add, 4 threads of 4 vectors stacked, where the general plan gives them that shape: with few rows it spreads them
// over more threads); in one type (input, weight and output alike), the models' case.
template <typename T, typename W, typename O, int VEC> cudaError_t launch(const RmsNormArgs& a, cudaStream_t stream) {
  constexpr bool kOneType = std::is_same_v<W, T> && std::is_same_v<O, T>;
  constexpr int kFixedPerThread = sizeof(T) == 4 ? 2 : 4;
  if (!kOneType && !a.weight) return cudaErrorInvalidValue;  // without a weight, the output has the input's type
  const int sms = sm_count();
  RowShape s = row_shape(a.cols / VEC, a.rows, sms, kFixedPerThread);
  if (s.threads >= 64) s.rows = 1;  // rows of 64+ threads: one per block measured 1-3% faster than stacking them
  auto run = [&](auto fused, auto multi, auto threads, auto fixed_per_thread) {
    constexpr bool kFused = decltype(fused)::value, kMulti = decltype(multi)::value;
    constexpr int kThreads = decltype(threads)::value, kPerThread = decltype(fixed_per_thread)::value;
    const RowShape shape = kThreads > 0 ? RowShape{kThreads, kThreads < 32 ? s.rows : 1, kPerThread} : s;
    const dim3 block(shape.threads, shape.rows);
    const dim3 grid = group_grid((a.rows + shape.rows - 1) / shape.rows);
    auto go = [&](auto per_thread) {
      constexpr int P = decltype(per_thread)::value;
      if (!a.weight) {
        if constexpr (kOneType) {
          rms_norm_kernel<T, T, T, VEC, P, 0, kFused, kMulti, kThreads><<<grid, block, 0, stream>>>(a);
        }
      } else if (a.single_rounding) {
        rms_norm_kernel<T, W, O, VEC, P, 2, kFused, kMulti, kThreads><<<grid, block, 0, stream>>>(a);
      } else {
        rms_norm_kernel<T, W, O, VEC, P, 1, kFused, kMulti, kThreads><<<grid, block, 0, stream>>>(a);
      }
      return cudaGetLastError();
    };
    if constexpr (kThreads > 0) {
      return go(fixed_per_thread);
    } else {
      return dispatch_per_thread(shape.per_thread, go);
    }
  };
  constexpr std::integral_constant<int, kFixedPerThread> kFixed{};
  constexpr std::integral_constant<int, kFixedPerThread / 2> kHalf{};
  auto run_fused = [&](auto multi, auto threads, auto per_thread) {
    return a.residual ? run(std::true_type{}, multi, threads, per_thread)
                      : run(std::false_type{}, multi, threads, per_thread);
  };
  constexpr std::integral_constant<int, 0> kAnyWidth{};
  if (RowOffsets::any_multi_level({a.out_rows, a.input_rows, a.residual_rows, a.residual_out_rows})) {
    return run_fused(std::true_type{}, kAnyWidth, kFixed);
  }
  auto fixed = [&](auto threads) {
    constexpr int kThreads = decltype(threads)::value;
    if constexpr (kThreads * kFixedPerThread == kHeadLanes && sizeof(T) == 2) {  // per-head rows (of 128)
      if (!a.residual) {
        const dim3 grid = group_grid((a.rows + kHeadRowsPerBlock - 1) / kHeadRowsPerBlock);
        const auto kernel = !a.weight           ? rms_norm_head_kernel<T, 0>
                            : a.single_rounding ? rms_norm_head_kernel<T, 2>
                                                : rms_norm_head_kernel<T, 1>;
        kernel<<<grid, kHeadBlock, 0, stream>>>(a);
        return cudaGetLastError();
      }
    }
    if (kThreads > 0 && kThreads < 32 && s.threads != kThreads) return run_fused(std::false_type{}, kAnyWidth, kFixed);
    // Up to 16 rows per SM (4 for the fused add): twice the threads per row, each with half the vectors (rows of
    // 4096: 256 threads of 2 vectors instead of 128 of 4), so that each warp's chain of loads, conversions and
    // stores is half as long; with few rows an SM holds too few warps to hide it. The fused add takes it too, in
    // place of row_shape's 512 threads of one vector (the lab's kernels of the two shapes were level in its
    // CUDA-graph replay at 1-8 rows). H100, ncu, bf16 rows of 4096, 256 x 2 against 128 x 4 (docs/benchmarks.md,
    // 2026-12-06 (store early)): 1 row 3.22 against 3.39 us, 128 rows 3.68 against 3.81, 2048 rows 11.26 against
    // 11.68, 4096 level (20.18 against 20.14); fused add 1 row 3.63 against 3.70, 512 rows 7.50 against 7.89, but
    // 1024 rows 11.87 against 11.58 and 2048 rows 20.34 against 20.18. Measured at rows of 4096 only: the other
    // fixed widths follow the same rule.
    if constexpr (kThreads >= 32 && 2 * kThreads <= 1024 && kFixedPerThread == 4) {
      if (a.rows <= (a.residual ? 4 : 16) * sms) {
        return run_fused(std::false_type{}, std::integral_constant<int, 2 * kThreads>{}, kHalf);
      }
    }
    return run_fused(std::false_type{}, threads, kFixed);
  };
  if constexpr (kOneType && VEC > 1 && sizeof(T) == 2) {
    return dispatch_fixed_width<kFixedPerThread, 4, 64, 96, 128, 160, 256>(a.cols / VEC, fixed);
  } else if constexpr (kOneType && VEC > 1) {
    return dispatch_fixed_width<kFixedPerThread, 256, 512>(a.cols / VEC, fixed);
  } else {
    return run_fused(std::false_type{}, kAnyWidth, kFixed);
  }
}

// Backward launch limits: up to 1024 threads per row, one 16-byte vector each of x and grad_out per thread (plus
// the next row's, in flight), 64 registers per thread; about 1024 resident threads per SM (more blocks would only
// multiply the partial rows to add up).
constexpr int kGradThreads = 1024;
// Beside an fp32 grad_out (the gradient of an fp32 output), whose double-buffered vectors take twice the registers of
// a 2-byte one, 64 registers spilled: those kernels stop at 512 threads per block (128 registers).
template <typename T, typename G> constexpr int grad_threads() { return sizeof(G) > sizeof(T) ? 512 : kGradThreads; }
constexpr int kGradCached = 1;
constexpr int kGradThreadsPerSm = 1024;
// Whether a fixed-width backward may keep its row in fp32 across the reduction (see rms_norm_backward_kernel):
// measured on sm_90; ptxas (CUDA 13.0) spilled 44-76 bytes of those kernels for sm_100.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr bool kGradRowInFp32 = false;
#else
constexpr bool kGradRowInFp32 = true;
#endif

// Backward: one row per blockDim.x threads, rows stacked on threadIdx.y, each block walking row groups gridDim.x
// apart (a persistent grid). PER_THREAD > 0: a thread keeps its vector of x and of grad_out in registers and loads
// the next group's while this one's sums are reduced; the weight under its columns and its columns of the weight
// gradient (fp32 sums over every row it visits) stay in registers too, and at the end the block's row slots are
// added up through shared memory into one partial row per block, which the caller adds up (sum_rows; a launch of
// one block writes the gradient itself). Cached vectors are kept as raw bits: as arrays of T, ptxas spilled them in
// 2-byte pieces, and a spill right after a prefetch waits for it. Every input is read through the read-only path
// (load_bits_readonly). PER_THREAD == 0 (rows too long for registers; one row per block): reads x and grad_out
// twice and adds straight into the block's partial row. MULTI: as in rms_norm_kernel. THREADS > 0: a fixed-width
// launch (see row_threads: one row of exactly THREADS vectors per block, no strided levels). H200, 8192 x 4096
// bf16 in tests/kernel_lab: 74.9 us before the read-only loads, one step per loop iteration and 16-byte partial
// rows, 63.1 after; under ncu, 55.3 us and 41.8M instructions before the two sums' reduction by fixed_row_two_sums,
// the row kept in fp32 and the residual gradient's own loop, 49.1 us and 30.6M after (docs/benchmarks.md).
template <typename T, typename W, typename G, int VEC, int PER_THREAD, int WEIGHT, bool MULTI, int THREADS>
__global__ void __launch_bounds__(THREADS > 0 ? THREADS : grad_threads<T, G>(),
                                  THREADS > 0 ? grad_threads<T, G>() / THREADS : 1)
    rms_norm_backward_kernel(const RmsNormBackwardArgs a) {
  static_assert(THREADS == 0 || THREADS >= 32, "fixed-width backward rows are whole warps, one per block");
  using B = Raw<T, VEC>;  // rows are cached as raw bits (see load_bits)
  using BG = Raw<G, VEC>;
  constexpr int kCached = PER_THREAD > 0 ? PER_THREAD : 1;
  const int64_t rows_per_group = rows_per_block<THREADS>();
  const int64_t groups = (a.rows + rows_per_group - 1) / rows_per_group;
  const W* w = static_cast<const W*>(a.weight);
  float* const dw_partial = WEIGHT != 0 ? a.weight_grad_partial + int64_t{blockIdx.x} * a.cols : nullptr;
  const float inv_cols = 1.f / static_cast<float>(a.cols);

  float dw[kCached][VEC];  // PER_THREAD > 0: this thread's columns of the weight gradient
  for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if constexpr (PER_THREAD > 0) dw[i][k] = 0.f;
      if constexpr (WEIGHT != 0 && PER_THREAD == 0) dw_partial[col + k] = 0.f;
    }
  });
  auto x_of = [&](int64_t row) { return static_cast<const T*>(a.input) + a.input_rows.offset<MULTI>(row); };
  auto dy_of = [&](int64_t row) { return static_cast<const G*>(a.grad_out) + a.grad_out_rows.offset<MULTI>(row); };
  auto load_group = [&](int64_t group, B(&xs)[kCached], BG(&gs)[kCached]) {  // PER_THREAD > 0
    const int64_t row = group * rows_per_group + row_slot<THREADS>();
    if (group >= groups || row >= a.rows) return;
    const T* x = x_of(row);
    const G* dy = dy_of(row);
    for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
      xs[i] = load_bits_readonly<VEC>(x + col);
      gs[i] = load_bits_readonly<VEC>(dy + col);
    });
  };
  Raw<W, VEC> w_bits[kCached];  // PER_THREAD > 0: the weight under this thread's columns, the same for every row
  if constexpr (WEIGHT != 0 && PER_THREAD > 0) {
    for_each_vector<PER_THREAD, VEC, THREADS>(
        a.cols, [&](int i, int64_t col) { w_bits[i] = load_bits_readonly<VEC>(w + col); });
  }
  // The weight under vector i (ones without a weight), and the gradient reaching norm(x), dy [* w].
  auto weight_at = [&](int i, int64_t col) {
    if constexpr (WEIGHT != 0) return PER_THREAD > 0 ? from_bits<W, VEC>(w_bits[i]) : load_raw<VEC>(w + col);
    return Vec<W, VEC>{};
  };
  auto weighted = [&](float dy, const Vec<W, VEC>& wv, int k) {
    if constexpr (WEIGHT != 0) return dy * to_float(wv.e[k]);
    return dy;
  };

  // One row group: its x and grad_out in (xv, gv) (PER_THREAD > 0), the next group's loaded into (x_next, g_next)
  // first, so that those loads are in flight during this group's reduction and stores. The row's x and grad_out
  // are converted to fp32 once and kept across the reduction (xs, dys) in fixed-width launches, except beside a
  // weight wider than the input; there, in the general launch (1024 threads of 64 registers) and on sm_100, whose
  // registers leave no room for them (ptxas spilled), they are converted again after it. PER_THREAD == 0: one vector
  // at a time, read twice.
  constexpr bool kKeepFloats = kGradRowInFp32 && THREADS > 0 && sizeof(W) <= sizeof(T);
  auto step = [&](int parity, int64_t group, B(&xv)[kCached], BG(&gv)[kCached], B(&x_next)[kCached],
                  BG(&g_next)[kCached]) {
    if constexpr (PER_THREAD > 0) load_group(group + gridDim.x, x_next, g_next);
    const int64_t row = group * rows_per_group + row_slot<THREADS>();
    const bool live = row < a.rows;
    const T* x = x_of(row);
    const G* dy = dy_of(row);
    float xs[kCached][VEC], dys[kCached][VEC];  // kKeepFloats: the row in fp32, across the reduction
    auto load_bits_of = [&](int64_t col) {      // PER_THREAD == 0: vector 0 is loaded where used
      if constexpr (PER_THREAD == 0) {
        xv[0] = load_bits_readonly<VEC>(x + col);
        gv[0] = load_bits_readonly<VEC>(dy + col);
      }
    };
    float sums[2] = {0.f, 0.f};  // sum of x^2, sum of g * x
    if (live) {
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        load_bits_of(col);
        const Vec<T, VEC> xi = from_bits<T, VEC>(xv[i]);
        const Vec<G, VEC> gi = from_bits<G, VEC>(gv[i]);
        const Vec<W, VEC> wv = weight_at(i, col);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xf = to_float(xi.e[k]), df = to_float(gi.e[k]);
          sums[0] += xf * xf;
          sums[1] += weighted(df, wv, k) * xf;
          if constexpr (kKeepFloats) {
            xs[i][k] = xf;
            dys[i][k] = df;
          }
        }
      });
    }
    row_sums_alternating<2, THREADS>(sums, parity);
    const float inv = rsqrtf(sums[0] * inv_cols + a.eps);
    const float coef = inv * inv * inv * (sums[1] * inv_cols);  // grad_input = inv * g - x * coef
    if (!live) return;
    T* dx = static_cast<T*>(a.grad_input) + row * a.grad_input_stride;
    const T* dres =
        a.grad_residual ? static_cast<const T*>(a.grad_residual) + a.grad_residual_rows.offset<MULTI>(row) : nullptr;
    // The fused add's other gradient, when there is one: where the row is kept in fp32, in a copy of this loop of
    // its own (its adds and their predicates cost ~8% of the loop's instructions otherwise; elsewhere the two copies
    // spilled registers).
    auto finish = [&](auto with_residual) {
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        if constexpr (!kKeepFloats) load_bits_of(col);
        const Vec<T, VEC> xi = from_bits<T, VEC>(xv[i]);
        const Vec<G, VEC> gi = from_bits<G, VEC>(gv[i]);
        const Vec<W, VEC> wv = weight_at(i, col);
        auto x_at = [&](int k) {
          if constexpr (kKeepFloats) return xs[i][k];
          return to_float(xi.e[k]);
        };
        auto dy_at = [&](int k) {
          if constexpr (kKeepFloats) return dys[i][k];
          return to_float(gi.e[k]);
        };
        B extra{};  // the fused add's other gradient, kept as raw bits (as floats, bf16 builds spilled)
        if (decltype(with_residual)::value && dres) extra = load_bits_readonly<VEC>(dres + col);
        const Vec<T, VEC> ev = from_bits<T, VEC>(extra);
        float out[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          out[k] = inv * weighted(dy_at(k), wv, k) - x_at(k) * coef;
          if constexpr (decltype(with_residual)::value) out[k] += to_float(ev.e[k]);
          if constexpr (WEIGHT != 0) {
            const float n = WEIGHT == 1 ? round_to<T>(x_at(k) * inv) : x_at(k) * inv;  // what the weight multiplied
            const float d = dy_at(k) * n;
            if constexpr (PER_THREAD > 0) dw[i][k] += d;
            if constexpr (PER_THREAD == 0) dw_partial[col + k] += d;
          }
        }
        store_vec<VEC>(dx + col, out);
      });
    };
    if (kKeepFloats && !dres) {
      finish(std::false_type{});
    } else {
      finish(std::true_type{});  // (tests dres per vector)
    }
  };

  // One step per iteration, the next group's vectors moved into place at its end, when they have had the whole
  // step to arrive. (Two steps per iteration alternating the buffers, which needs no move, doubled the loop's code
  // and ran slower: H200, 8192 x 4096 bf16, see docs/benchmarks.md.)
  B xv[kCached], x_next[kCached];
  BG gv[kCached], g_next[kCached];
  if constexpr (PER_THREAD > 0) load_group(blockIdx.x, xv, gv);
  int parity = 0;
#pragma unroll 1
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x, parity ^= 1) {  // uniform across the block
    step(parity, group, xv, gv, x_next, g_next);
    if (PER_THREAD > 0 && group + gridDim.x < groups) {
#pragma unroll
      for (int i = 0; i < kCached; ++i) {
        xv[i] = x_next[i];
        gv[i] = g_next[i];
      }
    }
  }
  if constexpr (WEIGHT != 0 && PER_THREAD > 0) {  // the block's row slots, added up into its partial row
    extern __shared__ float slots[];  // [blockDim.y - 1][PER_THREAD * VEC][blockDim.x]: a warp's lanes side by side
    const int threads = row_threads<THREADS>();
    auto slot = [&](int y, int i, int k) -> float& {
      return slots[((y - 1) * kCached * VEC + i * VEC + k) * threads + threadIdx.x];
    };
    if (row_slot<THREADS>() > 0) {
#pragma unroll
      for (int i = 0; i < kCached; ++i) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) slot(threadIdx.y, i, k) = dw[i][k];
      }
    }
    if (rows_per_group > 1) __syncthreads();
    if (row_slot<THREADS>() == 0) {
      for_each_vector<PER_THREAD, VEC, THREADS>(a.cols, [&](int i, int64_t col) {
        float sum[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          sum[k] = dw[i][k];
          for (int y = 1; y < rows_per_group; ++y) sum[k] += slot(y, i, k);
        }
        if (gridDim.x == 1) {  // one block (e.g. a decode step): its sums are the gradient, no sum_rows launch
          store_vec<VEC>(static_cast<W*>(a.weight_grad) + col, sum);
        } else {  // (vectors: element by element, a warp's stores touched 8 times the sectors)
          store_vec<VEC>(dw_partial + col, sum);
        }
      });
    }
  }
}

// The backward launch: block shape, vector width, grid and the kernel with its shared memory, shared by the launch
// and by the count of partial rows the caller must allocate.
struct BackwardPlan {
  RowShape shape;
  int64_t blocks;
  size_t smem;
  void (*kernel)(RmsNormBackwardArgs);
};

template <typename T, typename W, typename G, int VEC, bool MULTI, int THREADS>
void pick_backward_kernel(const RmsNormBackwardArgs& a, BackwardPlan& plan) {
  dispatch_per_thread<kGradCached>(plan.shape.per_thread, [&](auto per_thread) {
    constexpr int P = decltype(per_thread)::value;
    if constexpr (THREADS == 0 || P > 0) {  // (a fixed-width row is always cached)
      if (!a.weight) {
        if constexpr (std::is_same_v<W, T> && std::is_same_v<G, T>) {
          plan.kernel = rms_norm_backward_kernel<T, T, T, VEC, P, 0, MULTI, THREADS>;  // no weight: the output is T
        }
      } else if (a.single_rounding) {
        plan.kernel = rms_norm_backward_kernel<T, W, G, VEC, P, 2, MULTI, THREADS>;
      } else {
        plan.kernel = rms_norm_backward_kernel<T, W, G, VEC, P, 1, MULTI, THREADS>;
      }
    }
    const size_t slots = a.weight && P > 0 ? size_t(plan.shape.rows - 1) * plan.shape.threads * P * VEC : 0;
    plan.smem = sizeof(float) * slots;  // at most 255 * 8 floats: 8 KB
    return cudaSuccess;
  });
}

template <typename T, typename W, typename G> BackwardPlan backward_plan(const RmsNormBackwardArgs& a) {
  BackwardPlan plan{};
  const bool vectorized =
      vectors_fit<T>(a.cols, {a.grad_input, a.grad_out, a.input, a.weight, a.weight_grad, a.grad_residual},
                     {a.grad_input_stride}) &&
      vectors_fit<T>(a.cols, {}, {a.grad_out_rows, a.input_rows, a.grad_residual_rows});
  const int vec = vectorized ? kVec16<T> : 1;
  plan.shape = row_shape(a.cols / vec, a.rows, sm_count(), kGradCached, grad_threads<T, G>());
  if (plan.shape.per_thread == 0) plan.shape.rows = 1;  // a streamed row adds into its block's partial row
  const bool multi = RowOffsets::any_multi_level({a.grad_out_rows, a.input_rows, a.grad_residual_rows});
  if (vectorized && !multi) {  // rows of 1024-4096 2-byte elements (512-2048 fp32) take a fixed-width launch
    dispatch_fixed_width<1, 128, 256, 384, 512>(a.cols / kVec16<T>, [&](auto threads) {
      constexpr int kThreads = decltype(threads)::value;
      if constexpr (kThreads > 0) plan.shape = RowShape{kThreads, 1, 1};
      pick_backward_kernel<T, W, G, kVec16<T>, false, kThreads>(a, plan);
      return cudaSuccess;
    });
  } else if (vectorized) {
    pick_backward_kernel<T, W, G, kVec16<T>, true, 0>(a, plan);
  } else {
    multi ? pick_backward_kernel<T, W, G, 1, true, 0>(a, plan) : pick_backward_kernel<T, W, G, 1, false, 0>(a, plan);
  }
  if (!plan.kernel) return plan;  // a combination of types the kernels do not take (see dispatch_mixed)
  const int threads = plan.shape.threads * plan.shape.rows;
  // blocks that are resident at once with the kernel's registers and shared memory
  const int fit = resident_blocks(plan.kernel, threads, plan.smem);
  const int64_t per_sm = std::max(1, std::min(fit, kGradThreadsPerSm / threads));
  const int64_t groups = (a.rows + plan.shape.rows - 1) / plan.shape.rows;
  plan.blocks = std::max<int64_t>(1, std::min(groups, per_sm * sm_count()));
  return plan;
}

}  // namespace

int64_t rms_norm_backward_partial_rows(const DTypes& types, const RmsNormBackwardArgs& a) {
  int64_t rows = 0;
  dispatch_mixed(types, [&](auto t, auto w, auto g) {
    rows = backward_plan<decltype(t), decltype(w), decltype(g)>(a).blocks;
    return cudaSuccess;
  });
  return rows;
}

cudaError_t rms_norm_backward(const DTypes& types, const RmsNormBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_mixed(types, [&](auto t, auto w, auto g) {
    using T = decltype(t);
    using W = decltype(w);
    const auto plan = backward_plan<T, W, decltype(g)>(a);
    if (!plan.kernel) return cudaErrorInvalidValue;
    const dim3 block(plan.shape.threads, plan.shape.rows), grid(static_cast<unsigned>(plan.blocks));
    plan.kernel<<<grid, block, plan.smem, stream>>>(a);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || !a.weight || (plan.blocks == 1 && plan.shape.per_thread > 0)) return err;
    return sum_rows(a.weight_grad_partial, 1, plan.blocks, 0, a.cols, a.cols, static_cast<W*>(a.weight_grad), stream);
  });
}

cudaError_t rms_norm(const DTypes& types, const RmsNormArgs& a, cudaStream_t stream) {
  return dispatch_mixed(types, [&](auto t, auto w, auto o) {
    using T = decltype(t);
    using W = decltype(w);
    using O = decltype(o);
    // 16-byte vectors of T; an fp32 weight or output beside them moves in 32-byte vectors (two 16-byte accesses)
    const bool vectorizable = vectors_fit<T>(a.cols, {a.out, a.input, a.weight, a.residual, a.residual_out},
                                             {a.out_rows, a.input_rows, a.residual_rows, a.residual_out_rows});
    return vectorizable ? launch<T, W, O, kVec16<T>>(a, stream) : launch<T, W, O, 1>(a, stream);
  });
}

}  // namespace ckt
