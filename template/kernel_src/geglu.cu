// GEGLU: out = value * gelu(gate), value and gate being the two halves of the input's last dimension. Purely
// elementwise: one read of the input, one write of the output.
//
// Rounding follows diffusers' eager module, which runs F.gelu(gate) (fp32 math, result rounded to the dtype) and
// then value * that (fp32 product, rounded again): gelu(gate) is rounded to T before the multiply. The product
// of two bf16 or fp16 values is exact in fp32 (so the kernel takes them in pairs, mul_rounded: the same result in
// fewer instructions), and the output can differ from eager only where the fp32 GELU values themselves differ. The tanh
// form evaluates in ATen's order with tanhf. The erf form uses normal_cdf (below): its bf16 and fp16 results are
// eager's except next to a rounding tie, or, for gates below about -4 where ATen's 1 + erff loses digits, a few ulp
// nearer the exact value; its fp32 results are a few ulp from eager's.
#include "geglu.h"

#include <algorithm>

#include "dispatch.cuh"
#include "launch.cuh"
#include "vec.cuh"

namespace ckt {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxVectors = 0x7fffffff;  // vector indices of one launch stay below 2^31 (see Divider, rows.h)

// The standard normal CDF, Phi(x) = (1 + erf(x / sqrt(2))) / 2, in fp32. Phi(-|x|) is 2^q(|x|), q a degree-9
// polynomial fitted to log2 Phi(-a) on [0, 5.5] (weighted minimax: 0.9 unit roundoffs (2^-24) absolute and 7e-6
// relative in exact arithmetic; constant term -1, so that Phi(0) is 1/2 exactly), Phi(x) = 1 - Phi(-x) for x >= 0,
// and 0 below -6 (Phi(-6) < 1e-9; eager's 1 + erff is 0 below about -5.54). Extrapolated to [5.5, 6], the
// polynomial stays within 4.4e-4 of Phi(-a): a cut at -5.5 returned 0 for 7 fp16 gates in (-5.53, -5.5) where
// eager's GELU and the exact one round to nonzero fp16 values (gelu_tail.py in the template's kernel lab). Measured on
// an H200 with the cut at -5.5 (the template's kernel lab, geglu_lab.cu: every bf16 and fp16 value, 2^23 fp32 ones in
// [-12, 12]): x * normal_cdf(x) within 1.64 units of |x| + |gelu(x)| of exact, against 0.97 for ATen's 0.5 * x * (1 +
// erff(x / sqrt(2))), which loses its relative digits below -4 (1 + erff cancels) where this keeps them. 9 FMAs and one
// ex2.approx instead of erff's two polynomials, both evaluated (FSEL) in SIMT code: that arithmetic, not memory, held
// the bf16 forward at 14784 x 16384 to 195.5 us against 171.1 for the same bytes without a GELU; with normal_cdf it
// takes 171.2. NaN stays NaN and -inf gives NaN in x * normal_cdf(x), as in eager.
__device__ __forceinline__ float normal_cdf(float x) {
  constexpr float kEnd = 6.f;
  constexpr float c[] = {-1.000000000e+00f, -1.151107311e+00f, -4.591847658e-01f, -5.257572979e-02f, 7.180526387e-03f,
                         -2.184604964e-04f, -1.618822280e-04f, 3.889390428e-05f,  -3.990506684e-06f, 1.625102612e-07f};
  const float a = fminf(fabsf(x), kEnd);
  float q = c[9];
#pragma unroll
  for (int k = 8; k >= 0; --k) q = fmaf(q, a, c[k]);
  float tail;  // Phi(-|x|) = 2^q, q in [-29.9, -1]
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(tail) : "f"(q));
  tail = fabsf(x) > kEnd ? 0.f : tail;
  return x < 0.f ? tail : 1.f - tail;
}

// F.gelu in fp32: the exact erf form (x * Phi(x), normal_cdf), or approximate="tanh" (accurate tanhf, as ATen).
template <bool TANH> __device__ __forceinline__ float gelu(float x) {
  if constexpr (TANH) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float inner = kBeta * (x + kKappa * (x * x * x));
    return 0.5f * x * (1.f + tanhf(inner));
  } else {
    return x * normal_cdf(x);
  }
}

// d gelu / dx in fp32, in the order of ATen's GELU backward (the erf form's CDF from normal_cdf).
template <bool TANH> __device__ __forceinline__ float gelu_grad(float x) {
  if constexpr (TANH) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float x_sq = x * x;
    const float t = tanhf(kBeta * (x + kKappa * x_sq * x));
    const float left = 0.5f * x, right = 1.f + t;
    const float right_derivative = (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x_sq);
    return 0.5f * right + left * right_derivative;
  } else {
    constexpr float kBeta = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
    const float pdf = kBeta * expf(-0.5f * x * x);
    return normal_cdf(x) + x * pdf;
  }
}

// The output seen as `total` vectors of VEC elements, row-major. Each thread owns UNROLL of them, kThreads apart
// (coalesced), and issues all its loads (value and gate, and the output's gradient when BACKWARD) before any
// arithmetic. The raw vectors live in registers, so bytes in flight per SM are bounded by the register file
// either way; what decides the speed is how many warps overlap one warp's GELU arithmetic with the others'
// loads. The forward keeps one vector pair per thread, so that as many blocks as the SM holds stay resident (8,
// within 32 registers, on an H200: 221 -> 192 us erf and 211 -> 176 us tanh at 14784 x 16384 bf16, against 4
// blocks of 2 pairs each). The backward, with a third tensor, keeps 2 per thread at <= 64 registers (4 blocks),
// as does the scalar path (8 elements per thread). BACKWARD writes the value and gate gradients at the input's
// positions. Without MULTI every row starts at row * stride (the pointers start at this launch's first row);
// MULTI (a tensor whose rows take several levels of RowOffsets) finds each vector's row start from its row number,
// first_row + the row within this launch.
template <typename T, int VEC, int UNROLL, bool TANH, bool BACKWARD, bool MULTI>
__global__ void __launch_bounds__(kThreads, BACKWARD || VEC == 1 ? 4 : kMaxThreadsPerSm / kThreads)
    geglu_kernel(const GegluArgs a, const Divider per_row, uint32_t total, int64_t first_row) {
  using V = Vec<T, VEC>;
  const T* in = static_cast<const T*>(a.input);
  const T* grad_out = static_cast<const T*>(a.grad_out);
  T* out = static_cast<T*>(a.out);
  const uint32_t first = blockIdx.x * (kThreads * UNROLL) + threadIdx.x;

  V value[UNROLL], gate[UNROLL], grad[BACKWARD ? UNROLL : 1];
  int64_t dst[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const uint32_t v = first + u * kThreads;
    if (v < total) {
      const uint32_t local = per_row.div(v);
      const int64_t col = static_cast<int64_t>(v - local * per_row.d) * VEC;
      const int64_t row = MULTI ? first_row + local : local;
      const T* src = in + a.input_rows.offset<MULTI>(row) + col;
      value[u] = load_raw<VEC>(src);
      gate[u] = load_raw<VEC>(src + a.inner);
      if constexpr (BACKWARD) grad[u] = load_raw<VEC>(grad_out + a.grad_out_rows.offset<MULTI>(row) + col);
      dst[u] = a.out_rows.offset<MULTI>(row) + col;
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (first + u * kThreads < total) {
      V act, d_gate;  // act: F.gelu's output tensor, gelu(gate) rounded to T
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float g = to_float(gate[u].e[k]);
        act.e[k] = from_float<T>(gelu<TANH>(g));
        if constexpr (BACKWARD) {
          d_gate.e[k] = from_float<T>(to_float(grad[u].e[k]) * to_float(value[u].e[k]) * gelu_grad<TANH>(g));
        }
      }
      // The value's gradient dy * act (backward) or the output value * act: products of two T (mul_rounded).
      V y;
      if constexpr (BACKWARD) {
        y = mul_rounded(grad[u], act);
      } else {
        y = mul_rounded(value[u], act);
      }
      store_raw(out + dst[u], y);
      if constexpr (BACKWARD) store_raw(out + dst[u] + a.inner, d_gate);
    }
  }
}

template <typename T, int VEC, bool TANH, bool BACKWARD, bool MULTI>
cudaError_t launch(const GegluArgs& a, cudaStream_t stream) {
  // 16-byte vectors: 1 (forward) or 2 (backward) x (value + gate [+ grad]) in flight per thread; scalars: 8. The
  // MULTI backward keeps 1 (with the row math of three tensors, 2 spilled in bf16 builds).
  constexpr int kUnroll = VEC > 1 ? (BACKWARD && !MULTI ? 2 : 1) : 8;
  constexpr int64_t kPerBlock = int64_t{kThreads} * kUnroll;
  const int64_t per_row = a.inner / VEC;
  if (per_row > kMaxVectors) return cudaErrorInvalidValue;
  const int64_t rows_per_launch = kMaxVectors / per_row;  // more rows than this take several launches
  const Divider divider(static_cast<uint32_t>(per_row));
  for (int64_t row = 0; row < a.rows; row += rows_per_launch) {
    GegluArgs part = a;
    part.rows = std::min(rows_per_launch, a.rows - row);
    if constexpr (!MULTI) {
      part.input = static_cast<const T*>(a.input) + row * a.input_rows.stride[0];
      part.out = static_cast<T*>(a.out) + row * a.out_rows.stride[0];
      if constexpr (BACKWARD) part.grad_out = static_cast<const T*>(a.grad_out) + row * a.grad_out_rows.stride[0];
    }
    const int64_t total = part.rows * per_row;
    const auto blocks = static_cast<unsigned>((total + kPerBlock - 1) / kPerBlock);
    geglu_kernel<T, VEC, kUnroll, TANH, BACKWARD, MULTI>
        <<<blocks, kThreads, 0, stream>>>(part, divider, static_cast<uint32_t>(total), row);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t geglu(DType dtype, const GegluArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.inner == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    // Whole vectors per half also align the gate half, which starts `inner` elements after the value half.
    const bool vectorizable =
        vectors_fit<T>(a.inner, {a.out, a.input, a.grad_out}, {a.out_rows, a.input_rows, a.grad_out_rows});
    auto run = [&](auto vec, auto multi) {
      constexpr int N = decltype(vec)::value;
      constexpr bool M = decltype(multi)::value;
      if (a.grad_out) return a.tanh ? launch<T, N, true, true, M>(a, stream) : launch<T, N, false, true, M>(a, stream);
      return a.tanh ? launch<T, N, true, false, M>(a, stream) : launch<T, N, false, false, M>(a, stream);
    };
    auto run_vec = [&](auto multi) {
      return vectorizable ? run(std::integral_constant<int, V>{}, multi) : run(std::integral_constant<int, 1>{}, multi);
    };
    const bool multi = RowOffsets::any_multi_level({a.out_rows, a.input_rows, a.grad_out_rows});
    return multi ? run_vec(std::true_type{}) : run_vec(std::false_type{});
  });
}

}  // namespace ckt
