// RoPE3D (LTX-Video): interleaved-pair rotation of [batch, seq, dim] hidden states by fp32 cos/sin, with the
// tables read from memory or generated in the kernel. One thread owns one (token, channel-vector) position for
// every batch entry it is given and for q and k alike, so each cos/sin value is loaded or computed once for all
// of them. Pure streaming: 16-byte loads of x and of the fp32 tables, every load issued before any store.
#include "rope3d.h"

#include "dispatch.cuh"
#include "launch.cuh"
#include "vec.cuh"

namespace ckt {
namespace {

constexpr int kThreads = 256;

// N consecutive elements into fp32: 16-byte vectors when VECTOR (N a multiple of kVec16<T>), scalars otherwise.
template <int N, bool VECTOR, typename T> __device__ __forceinline__ void load_n(const T* p, float (&f)[N]) {
  if constexpr (VECTOR) {
    constexpr int V = kVec16<T>;
    static_assert(N % V == 0, "vector loads need whole 16-byte vectors");
#pragma unroll
    for (int i = 0; i < N; i += V) {
      float part[V];
      load_vec<V>(p + i, part);
#pragma unroll
      for (int j = 0; j < V; ++j) f[i + j] = part[j];
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = to_float(p[i]);
  }
}

template <int N, bool VECTOR, typename T> __device__ __forceinline__ void store_n(T* p, const float (&f)[N]) {
  if constexpr (VECTOR) {
    constexpr int V = kVec16<T>;
    static_assert(N % V == 0, "vector stores need whole 16-byte vectors");
#pragma unroll
    for (int i = 0; i < N; i += V) {
      float part[V];
#pragma unroll
      for (int j = 0; j < V; ++j) part[j] = f[i + j];
      store_vec<V>(p + i, part);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = from_float<T>(f[i]);
  }
}

// The generator, in LTXVideoRotaryPosEmbed's fp32 operation order (every step rounded, never fused into an
// FMA) so that the angles are bit-identical to the ones diffusers computes on the GPU; sincosf is the accurate
// libdevice routine (no fast-math intrinsics): at |angle| up to ~1.6e4 rad an approximation would be useless.
// Fills cos/sin for the N channels starting at c0 (even) of token s; both channels of a pair share one angle.
template <int N>
__device__ __forceinline__ void generate(const Rope3dGrid& g, int64_t s, int c0, float (&co)[N], float (&si)[N]) {
  // Every load first, the factors and each pair's frequency: a small launch waits on one round of them, not on the
  // factors and then the frequencies (H200, one token of q and k: 2.77 -> 2.45 us; 32 registers either way for
  // bf16 on sm_90, where an early load of x beside them took 48, below full occupancy).
  float factor[kRope3dFactors], freq[N / 2];
#pragma unroll
  for (int i = 0; i < kRope3dFactors; ++i) factor[i] = __ldg(g.params + i);
#pragma unroll
  for (int p = 0; p < N; p += 2) {  // pair j = (c - pad) / 2 turns by freqs[j / 3]
    const int c = c0 + p;
    freq[p / 2] = c >= g.pad ? __ldg(g.params + kRope3dFactors + ((c - g.pad) >> 1) / 3) : 0.f;
  }
  const uint32_t width = static_cast<uint32_t>(g.width);
  const uint32_t plane = static_cast<uint32_t>(g.height) * width;
  const uint32_t token = static_cast<uint32_t>(s);  // seq = frames * height * width < 2^31 (checked by the caller)
  const uint32_t f = token / plane, hw = token - f * plane, h = hw / width, w = hw - h * width;
  const uint32_t index[3] = {f, h, w};
  float term[3];  // 2 * g - 1 per axis
#pragma unroll
  for (int axis = 0; axis < 3; ++axis) {
    float v = __uint2float_rn(index[axis]);  // torch.arange(n, dtype=float32)
    v = __fmul_rn(__fmul_rn(__fmul_rn(v, factor[axis]), factor[3 + axis]), factor[6 + axis]);
    term[axis] = __fsub_rn(__fmul_rn(v, 2.f), 1.f);
  }
#pragma unroll
  for (int p = 0; p < N; p += 2) {
    const int c = c0 + p;
    float cv = 1.f, sv = 0.f;  // the leading dim % 6 channels are the identity
    if (c >= g.pad) {
      const int j = (c - g.pad) >> 1, axis = j % 3;  // axes cycle frame, height, width
      const float t = axis == 0 ? term[0] : axis == 1 ? term[1] : term[2];
      sincosf(__fmul_rn(freq[p / 2], t), &sv, &cv);
    }
    co[p] = co[p + 1] = cv;
    si[p] = si[p + 1] = sv;
  }
}

// Thread (s, c0) handles batch entries [blockIdx.z * per_thread, ... + per_thread) of NX tensors; VEC channels
// each. Without GEN the tables are reloaded per batch entry unless both broadcast over the batch (stride 0).
template <typename T, int VEC, bool VECTOR, int NX, bool GEN>
__global__ void __launch_bounds__(kThreads) rope3d_kernel(const Rope3dArgs a, const int64_t per_thread) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (s >= a.seq || c0 >= a.dim) return;
  const int64_t b_begin = static_cast<int64_t>(blockIdx.z) * per_thread;
  const int64_t b_end = b_begin + per_thread < a.batch ? b_begin + per_thread : a.batch;

  float co[VEC], si[VEC];
  auto load_tables = [&](int64_t b) {
    load_n<VEC, VECTOR>(a.cos + b * a.cos_stride_b + s * a.cos_stride_s + c0, co);
    load_n<VEC, VECTOR>(a.sin + b * a.sin_stride_b + s * a.sin_stride_s + c0, si);
  };
  if constexpr (GEN) {
    generate<VEC>(a.grid, s, static_cast<int>(c0), co, si);
  } else {
    load_tables(b_begin);
  }
  const bool per_batch_tables = !GEN && (a.cos_stride_b != 0 || a.sin_stride_b != 0);

  for (int64_t b = b_begin; b < b_end; ++b) {
    if (per_batch_tables && b != b_begin) load_tables(b);
    float x[NX][VEC];
#pragma unroll
    for (int i = 0; i < NX; ++i) {  // all loads first: outputs may alias inputs, so no load may follow a store
      load_n<VEC, VECTOR>(static_cast<const T*>(a.in[i]) + b * a.in_stride_b[i] + s * a.in_stride_s[i] + c0, x[i]);
    }
#pragma unroll
    for (int i = 0; i < NX; ++i) {
      float y[VEC];
#pragma unroll
      for (int p = 0; p < VEC; p += 2) {
        // torch's eager order: x * cos and rotated(x) * sin rounded separately, then added (no FMA).
        if (a.transpose) {
          y[p] = __fadd_rn(__fmul_rn(x[i][p], co[p]), __fmul_rn(x[i][p + 1], si[p + 1]));
          y[p + 1] = __fadd_rn(__fmul_rn(x[i][p + 1], co[p + 1]), __fmul_rn(-x[i][p], si[p]));
        } else {
          y[p] = __fadd_rn(__fmul_rn(x[i][p], co[p]), __fmul_rn(-x[i][p + 1], si[p]));
          y[p + 1] = __fadd_rn(__fmul_rn(x[i][p + 1], co[p + 1]), __fmul_rn(x[i][p], si[p + 1]));
        }
      }
      store_n<VEC, VECTOR>(static_cast<T*>(a.out[i]) + b * a.out_stride_b[i] + s * a.out_stride_s[i] + c0, y);
    }
  }
}

template <int VEC, bool VECTOR>
__global__ void __launch_bounds__(kThreads) rope3d_table_kernel(const Rope3dTableArgs a) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (s >= a.seq || c0 >= a.dim) return;
  float co[VEC], si[VEC];
  generate<VEC>(a.grid, s, static_cast<int>(c0), co, si);
  store_n<VEC, VECTOR>(a.cos + s * a.cos_stride + c0, co);
  store_n<VEC, VECTOR>(a.sin + s * a.sin_stride + c0, si);
}

// Blocks of kThreads: a row's vectors along x (a power of two up to kThreads), tokens along y, and, along z,
// groups of batch entries. Batch entries that share their cos/sin go to one thread, unless that would leave
// too few threads to fill the GPU.
struct Launch {
  dim3 grid, block;
  int64_t per_thread;
  bool ok;
};

Launch launch_shape(int64_t seq, int64_t vectors, int64_t batch, bool shared_tables) {
  int tx = 1;
  while (tx < vectors && tx < kThreads) tx <<= 1;
  const int ty = kThreads / tx;
  const int64_t row_blocks = (seq + ty - 1) / ty, col_blocks = (vectors + tx - 1) / tx;
  int64_t groups = batch;
  if (shared_tables) {
    const int64_t threads = row_blocks * col_blocks * kThreads, wanted = static_cast<int64_t>(sm_count()) * 2048;
    groups = (wanted + threads - 1) / threads;
    if (groups > batch) groups = batch;
  }
  if (groups > 65535) groups = 65535;
  if (groups < 1) groups = 1;
  const int64_t per_thread = (batch + groups - 1) / groups;
  groups = (batch + per_thread - 1) / per_thread;
  Launch l;
  l.block = dim3(tx, ty);
  l.grid = dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks), static_cast<unsigned>(groups));
  l.per_thread = per_thread;
  l.ok = row_blocks <= 0x7fffffff && col_blocks <= 65535;
  return l;
}

template <typename T, int VEC, bool VECTOR> cudaError_t launch(const Rope3dArgs& a, cudaStream_t stream) {
  const bool gen = a.cos == nullptr, two = a.in[1] != nullptr;
  const bool shared = gen || (a.cos_stride_b == 0 && a.sin_stride_b == 0);
  const Launch l = launch_shape(a.seq, a.dim / VEC, a.batch, shared);
  if (!l.ok) return cudaErrorInvalidConfiguration;
  if (gen) {
    if (!two) return cudaErrorInvalidValue;  // the generator is only exposed for q and k together
    rope3d_kernel<T, VEC, VECTOR, 2, true><<<l.grid, l.block, 0, stream>>>(a, l.per_thread);
  } else if (two) {
    rope3d_kernel<T, VEC, VECTOR, 2, false><<<l.grid, l.block, 0, stream>>>(a, l.per_thread);
  } else {
    rope3d_kernel<T, VEC, VECTOR, 1, false><<<l.grid, l.block, 0, stream>>>(a, l.per_thread);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t rope3d(DType dtype, const Rope3dArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.seq == 0 || a.dim == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    // x moves in vectors of V elements, the fp32 cos/sin in the matching one or two 16-byte vectors.
    bool vectorizable =
        vectors_fit<float>(a.dim, {a.cos, a.sin}, {a.cos_stride_b, a.cos_stride_s, a.sin_stride_b, a.sin_stride_s});
    for (int i = 0; i < 2 && a.in[i] != nullptr; ++i) {
      const std::initializer_list<int64_t> strides = {a.in_stride_b[i], a.in_stride_s[i], a.out_stride_b[i],
                                                      a.out_stride_s[i]};
      vectorizable = vectorizable && vectors_fit<T>(a.dim, {a.in[i], a.out[i]}, strides);
    }
    return vectorizable ? launch<T, V, true>(a, stream) : launch<T, 2, false>(a, stream);
  });
}

cudaError_t rope3d_cos_sin(const Rope3dTableArgs& a, cudaStream_t stream) {
  if (a.seq == 0 || a.dim == 0) return cudaSuccess;
  constexpr int V = kVec16<float>;
  const bool vectorizable = vectors_fit<float>(a.dim, {a.cos, a.sin}, {a.cos_stride, a.sin_stride});
  const Launch l = launch_shape(a.seq, a.dim / (vectorizable ? V : 2), 1, true);
  if (!l.ok) return cudaErrorInvalidConfiguration;
  if (vectorizable) {
    rope3d_table_kernel<V, true><<<l.grid, l.block, 0, stream>>>(a);
  } else {
    rope3d_table_kernel<2, false><<<l.grid, l.block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace ckt
