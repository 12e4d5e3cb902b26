// Element types: dispatch over the dtypes config.h compiles, and conversions to and from fp32.
// ckt: cuda-kernel-template's kernel helpers, free of torch headers (each .cu compiles in seconds; arguments are
// checked once, in torch-ext/<stem>.cpp and torch-ext/checks.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// Calls `launch(T{}, P{}, O{})` with the element types of `types` (input, parameters, output): all three the
// input's type, or, beside a bfloat16 or float16 input, fp32 parameters (a model kept in fp32, run under autocast)
// with an fp32 output or one of the input's type. `launch` refuses, with `if constexpr` (so that nothing is
// instantiated), the combinations it does not take. Only the compiled input types are instantiated.
template <typename F> cudaError_t dispatch_mixed(const DTypes& types, F&& launch) {
  return dispatch_dtype(types.input, [&](auto tag) {
    using T = decltype(tag);
    const DType param = types.param, out = types.out;
    if (param == types.input && out == types.input) return launch(T{}, T{}, T{});
    if constexpr (!std::is_same_v<T, float>) {
      if (param == DType::Float32 && out == DType::Float32) return launch(T{}, float{}, float{});
      if (param == DType::Float32 && out == types.input) return launch(T{}, float{}, T{});
    }
    return cudaErrorInvalidValue;
  });
}

// Conversions go through intrinsics: torch builds compile with -D__CUDA_NO_HALF_OPERATORS__ and friends, so
// implicit half/bfloat16 <-> float conversions do not exist. Arithmetic happens in fp32 (which also makes bf16
// storage correct on GPUs without bf16 arithmetic, such as the T4), except where a sum or product of two 2-byte
// values rounds the same as a packed 2-byte instruction (vec.cuh: add_rounded, mul_rounded).
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

}  // namespace ckt
