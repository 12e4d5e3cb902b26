// 16-byte vectors: raw loads and stores, their fp32 conversion, whether a tensor allows them, and keeping cached
// vectors opaque to the compiler. ckt: cuda-kernel-template's kernel helpers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "dispatch.cuh"
#include "rows.h"

namespace ckt {

// N elements moved by one memory instruction; N * sizeof(T) == 16 gives 128-bit loads and stores.
template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
  T e[N];
};
template <typename T> constexpr int kVec16 = 16 / sizeof(T);

// Vectors move as one integer of their size, and 16-byte ones through an explicit st.global.v4: under register
// pressure nvcc (13.0) splits a plain 16-byte store of half-precision elements into 4- and 2-byte stores. The
// "memory" clobber keeps the compiler from moving loads across a store, so kernels issue their loads first.
template <int BYTES> struct RawBits;
template <> struct RawBits<2> {
  using type = uint16_t;
};
template <> struct RawBits<4> {
  using type = uint32_t;
};
template <> struct RawBits<8> {
  using type = uint2;
};
template <> struct RawBits<16> {
  using type = uint4;
};
// 32 bytes (8 fp32 elements beside a 2-byte input's 16-byte vector: an fp32 weight, modulation or output) move as
// two 16-byte pieces, aligned to 16 bytes only: the rows guarantee no more (vectors_fit).
struct alignas(16) Bits32 {
  uint4 lo, hi;
};
template <> struct RawBits<32> {
  using type = Bits32;
};
template <typename T, int N> using Raw = typename RawBits<sizeof(Vec<T, N>)>::type;

// A vector as raw bits and back. Row caches held across a reduction keep them as bits: as arrays of T, ptxas
// allocated and spilled them in 2-byte pieces, and a spill right after a load waits for it.
template <int N, typename T> __device__ __forceinline__ Raw<T, N> load_bits(const T* p) {
  return *reinterpret_cast<const Raw<T, N>*>(p);
}

// The same for data that nothing writes while the kernel runs (read-only inputs): through the non-coherent path
// (ld.global.nc), which the compiler may schedule more freely.
template <int N, typename T> __device__ __forceinline__ Raw<T, N> load_bits_readonly(const T* p) {
  using B = Raw<T, N>;
  const B* q = reinterpret_cast<const B*>(p);
  if constexpr (sizeof(B) == 32) {
    const uint4* u = reinterpret_cast<const uint4*>(p);
    return B{__ldg(u), __ldg(u + 1)};
  } else {
    return __ldg(q);
  }
}

template <typename T, int N> __device__ __forceinline__ Vec<T, N> from_bits(const Raw<T, N>& bits) {
  Vec<T, N> v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

template <int N, typename T> __device__ __forceinline__ Vec<T, N> load_raw(const T* p) {
  return from_bits<T, N>(load_bits<N>(p));
}

__device__ __forceinline__ void store_16_bytes(void* p, const uint4& bits) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(bits.x), "r"(bits.y),
               "r"(bits.z), "r"(bits.w)
               : "memory");
}

template <int N, typename T> __device__ __forceinline__ void store_raw(T* p, const Vec<T, N>& v) {
  Raw<T, N> bits;
  memcpy(&bits, &v, sizeof(bits));
  if constexpr (sizeof(bits) == 32) {
    store_16_bytes(p, bits.lo);
    store_16_bytes(p + N / 2, bits.hi);
  } else if constexpr (sizeof(bits) == 16) {
    store_16_bytes(p, bits);
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

// Elementwise a + b and a * b of two vectors of T, rounded to T: what torch's add and mul of two tensors of T give
// (their fp32 result, rounded once). 2-byte types take two elements per instruction (add / mul .rn on bf16x2 or
// f16x2; fma.rn.bf16x2 on sm_80-89; through fp32 on sm_75): correctly rounded, so the same results as the fp32 form.
// The fp32 product of two 2-byte values is exact; their fp32 sum may not be, but rounding it to T rounds as the
// exact sum would (fp32's 24 bits are at least 2p + 2 for bf16's p = 8 and fp16's 11: double rounding is innocuous;
// every fp16 pair checked on the CPU, docs/benchmarks.md). The fp32 form converts each element to fp32 and back.
template <typename T> constexpr bool kPairs = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T> using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

template <bool MUL, typename T, int N>
__device__ __forceinline__ Vec<T, N> rounded_op(const Vec<T, N>& a, const Vec<T, N>& b) {
  Vec<T, N> r;
  if constexpr (kPairs<T> && N % 2 == 0) {
    Pair<T> pa[N / 2], pb[N / 2];
    memcpy(pa, &a, sizeof(a));
    memcpy(pb, &b, sizeof(b));
#pragma unroll
    for (int i = 0; i < N / 2; ++i) pa[i] = MUL ? __hmul2_rn(pa[i], pb[i]) : __hadd2_rn(pa[i], pb[i]);
    memcpy(&r, pa, sizeof(r));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_float(a.e[i]), y = to_float(b.e[i]);
      r.e[i] = from_float<T>(MUL ? x * y : x + y);
    }
  }
  return r;
}
template <typename T, int N> __device__ __forceinline__ Vec<T, N> add_rounded(const Vec<T, N>& a, const Vec<T, N>& b) {
  return rounded_op<false>(a, b);
}
template <typename T, int N> __device__ __forceinline__ Vec<T, N> mul_rounded(const Vec<T, N>& a, const Vec<T, N>& b) {
  return rounded_op<true>(a, b);
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

// The same for tensors addressed through RowOffsets: every level's stride a whole number of vectors.
template <typename T>
bool vectors_fit(int64_t cols, std::initializer_list<const void*> pointers, std::initializer_list<RowOffsets> rows) {
  if (!vectors_fit<T>(cols, pointers, std::initializer_list<int64_t>{})) return false;
  for (const RowOffsets& r : rows) {
    if (!r.strides_multiple_of(kVec16<T>)) return false;
  }
  return true;
}

// Hides where a cached value came from (its bits pass through an empty asm), so the compiler converts it to fp32
// again where it is used next instead of keeping the fp32 copies of an earlier pass live (in backward kernels, that
// doubles the registers per row). For raw bits (Raw<T, N>, see load_bits) and for vectors.
template <typename B> __device__ __forceinline__ void opaque_bits(B& bits) {
  if constexpr (sizeof(B) % 4 == 0) {
    uint32_t words[sizeof(B) / 4];
    memcpy(words, &bits, sizeof(B));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(B) / 4); ++i) asm volatile("" : "+r"(words[i]));
    memcpy(&bits, words, sizeof(B));
  } else {  // one 2-byte element
    uint16_t half;
    memcpy(&half, &bits, sizeof(B));
    asm volatile("" : "+h"(half));
    memcpy(&bits, &half, sizeof(B));
  }
}
template <typename T, int N> __device__ __forceinline__ void opaque(Vec<T, N>& v) { opaque_bits(v); }
// The same for a pointer: loads through it after this point are not merged with the loads before it.
template <typename T> __device__ __forceinline__ void opaque(const T*& p) { asm volatile("" : "+l"(p)); }

}  // namespace ckt
