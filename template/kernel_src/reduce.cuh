// Reductions: sums across the threads of a row (warp shuffles, then shared memory), per-thread column sums over
// many rows, and the deterministic sum of fp32 partial rows. ckt: cuda-kernel-template's kernel helpers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dispatch.cuh"
#include "launch.cuh"

namespace ckt {

// Steps of row_sums and row_sums_alternating. Butterfly sums of N values across the lanes of each group of `width`
// (a power of two, up to 32; the lanes past it hold other rows), or across the whole warp.
template <int N> __device__ __forceinline__ void group_sums(float (&v)[N], unsigned width) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      if (offset < width) v[n] += __shfl_xor_sync(0xffffffffu, v[n], offset);
    }
  }
}

template <int N> __device__ __forceinline__ void warp_sums(float (&v)[N]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] += __shfl_xor_sync(0xffffffffu, v[n], offset);
  }
}

// A row wider than a warp: each warp's lane 0 leaves its sums in `partial` (one slot per warp of the block, this
// row's warps from `slot` on); after the barrier between the two, every thread adds up its row's slots.
template <int N> __device__ __forceinline__ void store_warp_partials(const float (&v)[N], float (*partial)[32],
                                                                     int slot) {
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) partial[n][slot + threadIdx.x / 32] = v[n];
  }
}

template <int N>
__device__ __forceinline__ void add_warp_partials(float (&v)[N], const float (*partial)[32], int slot, int warps) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    v[n] = lane < warps ? partial[n][slot + lane] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], offset);
  }
}

// Sums across the blockDim.x threads that share one row (blockDim.x is a power of two; rows are stacked along
// threadIdx.y), of N values at once so that N sums cost one pair of barriers. Up to a warp, shuffles only; wider
// rows combine per-warp partials through shared memory, one slot per warp of the block (at most 32). Every thread
// of the block must call it (it may synchronize); every thread gets its row's sums, in place.
template <int N> __device__ __forceinline__ void row_sums(float (&v)[N]) {
  group_sums(v, blockDim.x);
  if (blockDim.x <= 32) return;

  __shared__ float partial[N][32];
  const int warps = blockDim.x / 32, slot = threadIdx.y * warps;  // this row's warps
  __syncthreads();                                                // the previous call's readers are done with `partial`
  store_warp_partials(v, partial, slot);
  __syncthreads();
  add_warp_partials(v, partial, slot, warps);
}

// Two sums across a fixed-width row of 2 to 16 whole warps (one row per block), for row_sums_alternating: the
// warp's first exchange swaps halves (lanes 0-15 keep the first sum, 16-31 the second), so that every further step
// is one shuffle; then lane n * kGroup + w reads sum n of warp w (kGroup: the warps rounded up to a power of two)
// and shuffles within groups of kGroup lanes add them up. Fewer instructions than every thread adding every warp's
// sums, which kept the RMSNorm backward issuing on 77% of its cycles (H200, 8192 x 4096 bf16, ncu, with the other
// changes of 2026-12-04 to that kernel: 41.8M -> 30.6M instructions, 55.3 -> 49.1 us; docs/benchmarks.md).
template <int THREADS> __device__ __forceinline__ void fixed_row_two_sums(float (&v)[2], float* partial) {
  constexpr int kWarps = THREADS / 32, kGroup = kWarps <= 2 ? 2 : kWarps <= 4 ? 4 : kWarps <= 8 ? 8 : 16;
  static_assert(THREADS % 32 == 0 && kWarps >= 2 && kWarps <= 16, "2 to 16 whole warps");
  const int lane = threadIdx.x % 32;
  const bool upper = lane >= 16;
  float sum = (upper ? v[1] : v[0]) + __shfl_xor_sync(0xffffffffu, upper ? v[0] : v[1], 16);
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane % 16 == 0) partial[(upper ? kGroup : 0) + threadIdx.x / 32] = sum;
  __syncthreads();
  sum = lane % kGroup < kWarps ? partial[lane] : 0.f;
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  v[0] = __shfl_sync(0xffffffffu, sum, 0);
  v[1] = __shfl_sync(0xffffffffu, sum, kGroup);
}

// The same with one barrier instead of two, for a caller that alternates `parity` (0, 1, 0, ...) between
// consecutive calls: each call writes the half of the shared slots that the previous call did not read from.
// THREADS: see row_threads (a fixed-width launch: a multiple of 32, up to 1024). Two sums over 2-16 warps: see
// fixed_row_two_sums. Otherwise a fixed width of whole warps has one row per block: every thread reads its row's
// warp sums itself (16-byte broadcast reads, four running sums) instead of a second round of five dependent
// shuffles (the chain a lone row waits for is shorter: the forward's decode-size launches).
template <int N, int THREADS = 0> __device__ __forceinline__ void row_sums_alternating(float (&v)[N], int parity) {
  __shared__ __align__(16) float partial[2][N][32];
  if constexpr (N == 2 && THREADS >= 64 && THREADS <= 512) {
    fixed_row_two_sums<THREADS>(v, &partial[parity][0][0]);
    return;
  }
  const int threads = row_threads<THREADS>();
  if (threads < 32) {
    group_sums(v, threads);
    return;
  }
  warp_sums(v);  // whole warps: no test per step
  if (threads == 32) return;

  const int warps = threads / 32, slot = row_slot<THREADS>() * warps;  // this row's warps
  store_warp_partials(v, partial[parity], slot);
  __syncthreads();
  if constexpr (THREADS >= 64) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float sums[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int w = 0; w < THREADS / 32; ++w) sums[w % 4] += partial[parity][n][w];
      v[n] = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    }
  } else {
    add_warp_partials(v, partial[parity], slot, warps);
  }
}

__device__ __forceinline__ float row_sum(float v) {
  float sums[1] = {v};
  row_sums(sums);
  return sums[0];
}

// fp32 sums, over many rows, of the columns a thread owns (the elements for_each_vector gives it): for
// register-cached rows (PER_THREAD > 0) in shared memory, each vector's VEC sums padded to VEC + 1 floats so that
// the lanes of a warp fall in different banks (unpadded, every access was an 8-way bank conflict); for streamed rows
// straight in the global fp32 row they belong to. Each element belongs to one thread: no races.
template <int PER_THREAD, int VEC> struct ColumnSums {
  float* shared;  // this thread's sums in its row slot of slot_floats(blockDim.x) floats (PER_THREAD > 0)
  float* global;  // the row the sums end up in (PER_THREAD == 0: also where they are added up)
  __device__ __forceinline__ ColumnSums(float* slot, float* row)
      : shared(slot + threadIdx.x * (VEC + 1)), global(row) {}
  __host__ __device__ static constexpr size_t slot_floats(int threads) {
    return PER_THREAD > 0 ? size_t{PER_THREAD} * threads * (VEC + 1) : 0;
  }
  // Element k of the thread's vector i (see for_each_vector), at column col + k.
  __device__ __forceinline__ float& at(int i, int64_t col, int k) const {
    if constexpr (PER_THREAD > 0) {
      return shared[i * static_cast<int>(blockDim.x) * (VEC + 1) + k];
    } else {
      return global[col + k];
    }
  }
};

namespace {
// See sum_rows. 32 columns per block; its 32 warps take every 32nd row and their sums are added in warp order, so
// the result does not depend on timing. Declared in an unnamed namespace: each .cu gets its own copy.
template <typename T>
__global__ void __launch_bounds__(1024) sum_rows_kernel(const float* partial, int64_t rows, int64_t group_stride,
                                                        int64_t row_stride, int64_t cols, T* out) {
  __shared__ float warp_sums[32][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = (cols + 31) / 32, group = blockIdx.x / tiles, col = (blockIdx.x % tiles) * 32 + lane;
  float sum = 0.f;
  if (col < cols) {
    const float* p = partial + group * group_stride + col;
#pragma unroll 4
    for (int64_t r = warp; r < rows; r += 32) sum += p[r * row_stride];
  }
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && col < cols) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < 32; ++w) total += warp_sums[w][lane];
    out[group * cols + col] = from_float<T>(total);
  }
}
}  // namespace

// Adds up fp32 partial sums (a backward kernel's per-block weight-gradient rows) into `groups` rows of T in one
// launch: out[g * cols + c] = sum over r < rows of partial[g * group_stride + r * row_stride + c]. Deterministic.
template <typename T>
cudaError_t sum_rows(const float* partial, int64_t groups, int64_t rows, int64_t group_stride, int64_t row_stride,
                     int64_t cols, T* out, cudaStream_t stream) {
  const int64_t blocks = groups * ((cols + 31) / 32);
  if (blocks == 0) return cudaSuccess;
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  sum_rows_kernel<T>
      <<<static_cast<unsigned>(blocks), 1024, 0, stream>>>(partial, rows, group_stride, row_stride, cols, out);
  return cudaGetLastError();
}

}  // namespace ckt
