// Helpers shared by every kernel in this folder: element types, 16-byte vectors, conversions, reductions
// and the launch shape of row-wise kernels. Deliberately free of torch headers: each .cu compiles in seconds,
// and all argument checking happens once, in torch-ext/torch_binding.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "config.h"

namespace ckt {

// Calls `launch(T{})` with the element type of `dtype`; only the compiled precisions are instantiated.
template <typename F> cudaError_t dispatch_dtype(DType dtype, F&& launch) {
  switch (dtype) {
#if CKT_WITH_FLOAT32
    case DType::Float32: return launch(float{});
#endif
#if CKT_WITH_FLOAT16
    case DType::Float16: return launch(__half{});
#endif
#if CKT_WITH_BFLOAT16
    case DType::BFloat16: return launch(__nv_bfloat16{});
#endif
    default: return cudaErrorInvalidValue;
  }
}

// Conversions go through intrinsics: torch builds compile with -D__CUDA_NO_HALF_OPERATORS__ and friends, so
// implicit half/bfloat16 <-> float conversions do not exist. All arithmetic happens in fp32 (which also makes
// bf16 storage correct on GPUs without bf16 arithmetic, such as the T4).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// The value a tensor of type T would hold: reproduces a model that casts back to its dtype mid-formula.
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// N elements moved by one memory instruction; N * sizeof(T) == 16 gives 128-bit loads and stores.
template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
  T e[N];
};
template <typename T> constexpr int kVec16 = 16 / sizeof(T);

// Vectors move as one integer of their size, and 16-byte ones through an explicit st.global.v4: under register
// pressure nvcc (13.0) splits a plain 16-byte store of half-precision elements into 4- and 2-byte stores. The
// "memory" clobber keeps the compiler from moving loads across a store, so kernels issue their loads first.
template <int BYTES> struct RawBits;
template <> struct RawBits<2> { using type = uint16_t; };
template <> struct RawBits<4> { using type = uint32_t; };
template <> struct RawBits<8> { using type = uint2; };
template <> struct RawBits<16> { using type = uint4; };
template <typename T, int N> using Raw = typename RawBits<sizeof(Vec<T, N>)>::type;

template <int N, typename T> __device__ __forceinline__ Vec<T, N> load_raw(const T* p) {
  const Raw<T, N> bits = *reinterpret_cast<const Raw<T, N>*>(p);
  Vec<T, N> v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

template <int N, typename T> __device__ __forceinline__ void store_raw(T* p, const Vec<T, N>& v) {
  Raw<T, N> bits;
  memcpy(&bits, &v, sizeof(bits));
  if constexpr (sizeof(bits) == 16) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(bits.x),
                 "r"(bits.y), "r"(bits.z), "r"(bits.w)
                 : "memory");
  } else {
    *reinterpret_cast<Raw<T, N>*>(p) = bits;
  }
}

template <int N, typename T> __device__ __forceinline__ void to_floats(const Vec<T, N>& v, float (&f)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = to_float(v.e[i]);
}

template <int N, typename T> __device__ __forceinline__ void load_vec(const T* p, float (&f)[N]) {
  to_floats(load_raw<N>(p), f);
}

template <int N, typename T> __device__ __forceinline__ void store_vec(T* p, const float (&f)[N]) {
  Vec<T, N> v;
#pragma unroll
  for (int i = 0; i < N; ++i) v.e[i] = from_float<T>(f[i]);
  store_raw(p, v);
}

// True when rows of `cols` elements of T, at these pointers and with these row strides (in elements), allow
// 16-byte vectors: whole vectors per row and every access 16-byte aligned. Null pointers (absent tensors) pass.
template <typename T>
bool vectors_fit(int64_t cols, std::initializer_list<const void*> pointers, std::initializer_list<int64_t> strides) {
  if (cols % kVec16<T> != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  for (int64_t stride : strides) {
    if (stride * static_cast<int64_t>(sizeof(T)) % 16 != 0) return false;
  }
  return true;
}

// Sums across the blockDim.x threads that share one row (blockDim.x is a power of two; rows are stacked along
// threadIdx.y), of N values at once so that N sums cost one pair of barriers. Up to a warp, shuffles only; wider
// rows combine per-warp partials through shared memory, one slot per warp of the block (at most 32). Every thread
// of the block must call it (it may synchronize); every thread gets its row's sums, in place.
template <int N> __device__ __forceinline__ void row_sums(float (&v)[N]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      if (offset < blockDim.x) v[n] += __shfl_xor_sync(0xffffffffu, v[n], offset);
    }
  }
  if (blockDim.x <= 32) return;

  __shared__ float partial[N][32];
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32, slot = threadIdx.y * warps;  // this row's warps
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) partial[n][slot + threadIdx.x / 32] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    v[n] = lane < warps ? partial[n][slot + lane] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], offset);
  }
}

__device__ __forceinline__ float row_sum(float v) {
  float sums[1] = {v};
  row_sums(sums);
  return sums[0];
}

// Hides where a cached vector came from, so the compiler converts it to fp32 again where it is used next instead
// of keeping the fp32 copies of an earlier pass live (in backward kernels, that doubles the registers per row).
template <typename T, int N> __device__ __forceinline__ void opaque(Vec<T, N>& v) {
  if constexpr (sizeof(v) % 4 == 0) {
    uint32_t words[sizeof(v) / 4];
    memcpy(words, &v, sizeof(v));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(v) / 4); ++i) asm volatile("" : "+r"(words[i]));
    memcpy(&v, words, sizeof(v));
  } else {  // one 2-byte element
    uint16_t bits;
    memcpy(&bits, &v, sizeof(v));
    asm volatile("" : "+h"(bits));
    memcpy(&v, &bits, sizeof(v));
  }
}
// The same for a pointer: loads through it after this point are not merged with the loads before it.
template <typename T> __device__ __forceinline__ void opaque(const T*& p) { asm volatile("" : "+l"(p)); }

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
// spills registers in rms_norm's fp16 kernel on sm_100; a streamed row's 1024 threads keep enough loads in flight.
template <int PER_THREAD, int VEC, typename F> __device__ __forceinline__ void for_each_vector(int64_t cols, F&& f) {
  if constexpr (PER_THREAD > 0) {
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

constexpr int64_t kMaxGridX = 2147483647;  // blocks along gridDim.x; grid-stride kernels cover the rest

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
  sum_rows_kernel<T><<<static_cast<unsigned>(blocks), 1024, 0, stream>>>(partial, rows, group_stride, row_stride,
                                                                         cols, out);
  return cudaGetLastError();
}

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

// Blocks of `threads` threads that fill the GPU once with `Kernel` (a persistent grid): resident blocks per SM, from
// the kernel's registers and shared memory, times the SMs. Looked up once per kernel and block size.
template <auto Kernel> int64_t persistent_blocks(int threads) {
  static int per_sm[11] = {};  // by log2(threads); a benign race at worst computes an entry twice
  int log2 = 0;
  while ((1 << log2) < threads && log2 < 10) ++log2;
  if (per_sm[log2] == 0) {
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, threads, 0);
    per_sm[log2] = blocks > 0 ? blocks : 1;
  }
  return static_cast<int64_t>(per_sm[log2]) * sm_count();
}

}  // namespace ckt
