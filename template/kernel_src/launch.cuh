// Launch shapes: row kernels' threads, rows and register cache, resident threads and blocks per SM (and so
// persistent grids) and dynamic shared memory (Divider, the index math of flat launches, is in rows.h). ckt:
// cuda-kernel-template's kernel helpers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <vector>

#include "rows.h"  // Divider: the index math of flat (elementwise) launches

namespace ckt {

// Launch shape of a row-wise kernel: `threads` per row (power of two), `rows` per block, `per_thread`
// vectors kept in registers by each thread so the row is read from memory once.
struct RowShape {
  int threads, rows, per_thread;
};

// Largest supported per-thread register cache, in vectors; longer rows take the streaming (two-read) path.
#ifndef CKT_ROW_VECTORS_PER_THREAD
#define CKT_ROW_VECTORS_PER_THREAD 4
#endif
constexpr int kMaxPerThread = CKT_ROW_VECTORS_PER_THREAD;
// Threads per block that rows shorter than a block share.
#ifndef CKT_ROW_BLOCK_THREADS
#define CKT_ROW_BLOCK_THREADS 256
#endif

// Threads an SM holds at once, for the minimum-blocks figure of __launch_bounds__ (ptxas rejects one that asks
// for more): 1024 on sm_75, 1536 on sm_86 / sm_87 / sm_89 / sm_12x, 2048 elsewhere (and in host code).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
constexpr int kMaxThreadsPerSm = 1024;
#elif defined(__CUDA_ARCH__) && \
    (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
constexpr int kMaxThreadsPerSm = 1536;
#else
constexpr int kMaxThreadsPerSm = 2048;
#endif

// Threads per block a row kernel caching `per_thread` vectors may use (its __launch_bounds__): a 1024-thread block
// leaves 64 registers per thread, too few for several cached 16-byte vectors, so those blocks stop at 512 threads.
constexpr int max_row_threads(int per_thread) { return per_thread >= 2 ? 512 : 1024; }
// Threads per block of the backward row kernels (they hold the input, its gradient and fp32 sums per thread), and
// the blocks of that size an SM must fit at once: caps them at 64 registers, so SMs keep 1024+ threads resident.
constexpr int kBackwardRowThreads = 512;
constexpr int kBackwardMinBlocks = 2;

// Picks the shape for rows of `vectors` vectors each. About four 16-byte loads per thread keep enough bytes in
// flight to saturate HBM; with few rows, each row is spread over more threads so that every SM gets work.
// A kernel that caches more than the row per vector (e.g. scale and shift too) passes a smaller `max_per_thread`;
// one that needs more registers per thread than a 1024-thread block leaves (backward kernels) a `max_threads` of 512.
inline RowShape row_shape(int64_t vectors, int64_t num_rows, int num_sms, int max_per_thread = kMaxPerThread,
                          int max_threads = 1024) {
  auto pow2_at_least = [](int64_t n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
  };
  auto rows_per_block = [](int threads) { return std::max(1, CKT_ROW_BLOCK_THREADS / threads); };
  auto blocks = [&](int threads) { return (num_rows + rows_per_block(threads) - 1) / rows_per_block(threads); };

  auto per_thread_at = [&](int threads) { return pow2_at_least((vectors + threads - 1) / threads); };
  auto fits = [&](int threads) { return threads <= max_row_threads(per_thread_at(threads)); };

  int threads = pow2_at_least((vectors + max_per_thread - 1) / max_per_thread);
  if (threads > max_threads) threads = max_threads;
  while (threads < max_threads && 2 * threads <= pow2_at_least(vectors) && blocks(threads) < 2 * num_sms &&
         fits(2 * threads)) {
    threads *= 2;
  }
  int per_thread = per_thread_at(threads);
  if (per_thread > max_per_thread || !fits(threads)) per_thread = 0;  // 0 selects the streaming path
  return {threads, rows_per_block(threads), per_thread};
}

// Calls `launch(std::integral_constant<int, P>{})` with P = the RowShape's per_thread (0: streaming path), so that
// a row kernel templated on its register cache is instantiated only for the sizes row_shape can pick
// (MAX_PER_THREAD: the `max_per_thread` given to row_shape).
template <int MAX_PER_THREAD = kMaxPerThread, typename F> cudaError_t dispatch_per_thread(int per_thread, F&& launch) {
  static_assert(MAX_PER_THREAD == 1 || MAX_PER_THREAD == 2 || MAX_PER_THREAD == 4, "register cache of 1, 2 or 4");
  if constexpr (MAX_PER_THREAD >= 4) {
    if (per_thread == 4) return launch(std::integral_constant<int, 4>{});
  }
  if constexpr (MAX_PER_THREAD >= 2) {
    if (per_thread == 2) return launch(std::integral_constant<int, 2>{});
  }
  if (per_thread == 1) return launch(std::integral_constant<int, 1>{});
  return launch(std::integral_constant<int, 0>{});
}

// Visits the vectors of a `cols`-element row that this thread owns, calling f(i, col) with `col` the vector's
// first element. PER_THREAD > 0: i is the vector's slot in the thread's register cache (unrolled, so the cache
// stays in registers); vectors past the row's end are skipped. PER_THREAD == 0 (streaming): a strided loop over
// the whole row with i == 0, the thread's one scratch slot. That loop is not unrolled: unrolled, ptxas (CUDA 13.0)
// spilled registers in a row-norm kernel's fp16 build for sm_100; a streamed row's 1024 threads keep enough loads
// in flight. THREADS > 0: a fixed-width launch (see row_threads), every vector visited without a bounds test.
template <int PER_THREAD, int VEC, int THREADS = 0, typename F>
__device__ __forceinline__ void for_each_vector(int64_t cols, F&& f) {
  if constexpr (THREADS > 0) {
    static_assert(PER_THREAD > 0, "a fixed-width row is cached in registers");
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i)
      f(i, static_cast<int64_t>((i * THREADS + static_cast<int>(threadIdx.x)) * VEC));
  } else if constexpr (PER_THREAD > 0) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      const int64_t col = (static_cast<int64_t>(i) * blockDim.x + threadIdx.x) * VEC;
      if (col < cols) f(i, col);
    }
  } else {
    const int64_t step = static_cast<int64_t>(blockDim.x) * VEC;
#pragma unroll 1
    for (int64_t col = threadIdx.x * VEC; col < cols; col += step) f(0, col);
  }
}

// The threads of a row and the row's slot in its block. THREADS == 0: blockDim.x threads per row, rows stacked on
// threadIdx.y, any row width. THREADS > 0, a fixed-width launch: rows of exactly THREADS * PER_THREAD * VEC
// elements, so that the index math folds into constants (a row kernel is a chain of load -> reduction -> store,
// which every instruction of general-shape addressing lengthens); blockDim == (THREADS, 1) for whole warps, and
// rows narrower than a warp (THREADS a power of two below 32) stacked on threadIdx.y.
template <int THREADS> __device__ __forceinline__ int row_threads() {
  return THREADS > 0 ? THREADS : static_cast<int>(blockDim.x);
}
template <int THREADS> __device__ __forceinline__ int row_slot() { return THREADS >= 32 ? 0 : threadIdx.y; }
template <int THREADS> __device__ __forceinline__ int rows_per_block() {
  return THREADS >= 32 ? 1 : static_cast<int>(blockDim.y);
}

// Fixed-width launches (see row_threads): a row kernel caching PER_THREAD vectors per thread lists the widths it
// has, as threads per row (WIDTHS: multiples of 32 up to 1024, or powers of two below 32). Calls
// `launch(std::integral_constant<int, THREADS>{})` with THREADS == vectors / PER_THREAD when that is one of them,
// THREADS == 0 otherwise (any width).
template <int PER_THREAD, int... WIDTHS, typename F> cudaError_t dispatch_fixed_width(int64_t vectors, F&& launch) {
  static_assert((((WIDTHS % 32 == 0 && WIDTHS <= 1024) || (WIDTHS < 32 && (WIDTHS & (WIDTHS - 1)) == 0)) && ...),
                "whole warps (one row per block) or a power of two below 32 (rows stacked)");
  cudaError_t result = cudaSuccess;
  auto take = [&](auto threads) {  // launches when the row is THREADS * PER_THREAD vectors wide
    return vectors == int64_t{decltype(threads)::value} * PER_THREAD && (result = launch(threads), true);
  };
  return (take(std::integral_constant<int, WIDTHS>{}) || ...) ? result : launch(std::integral_constant<int, 0>{});
}

constexpr int64_t kMaxGridX = 2147483647;  // blocks along gridDim.x; grid-stride kernels cover the rest

// The grid of a kernel that takes one row group per block, group = blockIdx.y * gridDim.x + blockIdx.x: along x
// up to kMaxGridX blocks, then rows of them along y (blocks past the last group find no live row).
inline dim3 group_grid(int64_t groups) {
  const int64_t y = (groups + kMaxGridX - 1) / kMaxGridX;
  return dim3(static_cast<unsigned>((groups + y - 1) / y), static_cast<unsigned>(y));
}

// A row kernel's launch at fixed widths (see row_threads): rows of one of ELEMENTS... elements, with 16-byte vectors
// (VEC > 1) and FIXED (e.g. rows one stride apart), each of them a block of the grid's x dimension, take
// fixed(std::integral_constant<int, THREADS>{}), the kernel for THREADS = elements / (PER_THREAD * VEC), launched one
// row per block as kernel(a, Divider(a.tokens)) (a.tokens: rows per sample, so that the kernel finds a row's sample
// in 32 bits); any_width() launches the other rows. `a`: the kernel's arguments, with rows, cols and tokens.
template <int PER_THREAD, int VEC, bool FIXED, int... ELEMENTS, typename Args, typename Fixed, typename AnyWidth>
cudaError_t launch_fixed_rows(const Args& a, cudaStream_t stream, Fixed&& fixed, AnyWidth&& any_width) {
  if constexpr (VEC > 1 && FIXED) {
    if (0 < a.tokens && a.tokens <= a.rows && a.rows <= kMaxGridX) {
      return dispatch_fixed_width<PER_THREAD, ELEMENTS / (PER_THREAD * VEC)...>(a.cols / VEC, [&](auto threads) {
        constexpr int kThreads = decltype(threads)::value;
        if constexpr (kThreads == 0) {
          return any_width();
        } else {
          const auto kernel = fixed(threads);
          kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a, Divider(static_cast<uint32_t>(a.tokens)));
          return cudaGetLastError();
        }
      });
    }
  }
  return any_width();
}

// SMs of the current device. Launch plans read it, so the binding's device guard must be in place first: it makes
// the tensors' GPU current (on a machine of several GPUs the current device may be another one).
inline int sm_count() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms > 0 ? sms : 1;
}

// Lets `kernel` take `bytes` of dynamic shared memory: above the default 48 KiB a kernel must opt in, up to the
// GPU's own limit (227 KiB on Hopper, 64 KiB on a T4). False when the GPU has less.
template <typename Kernel> bool allow_shared_memory(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return true;
  int device = 0, limit = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (bytes > static_cast<size_t>(limit)) return false;
  const int wanted = static_cast<int>(bytes);
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wanted) == cudaSuccess;
}

// Blocks of `threads` threads with `smem` bytes of dynamic shared memory that one SM holds at once running `kernel`
// (at least 1), for launch plans made on every call (times sm_count(): the grid of a persistent kernel, one that
// fills the GPU once and loops over its rows). The occupancy query runs once per kernel, block size and shared
// memory, on the first device that launches it, and its answer is kept for all devices: right for a machine of
// identical GPUs; on a mix of models, the others' grids may be sized off their occupancy (only the speed changes,
// never the result).
template <typename Kernel> int resident_blocks(Kernel kernel, int threads, size_t smem) {
  struct Known {
    Kernel kernel;
    int threads;
    size_t smem;
    int blocks;
  };
  static std::mutex mutex;
  static std::vector<Known> known;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Known& k : known) {
    if (k.kernel == kernel && k.threads == threads && k.smem == smem) return k.blocks;
  }
  int blocks = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem);
  known.push_back({kernel, threads, smem, std::max(blocks, 1)});
  return known.back().blocks;
}

}  // namespace ckt
