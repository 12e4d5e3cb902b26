// Kernel lab for AdaLN (see rms_norm_lab.cu and run.sh): the shipped forward and the same kernels at other launch
// shapes, cold L2, next to a copy of the same bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "adaln.cu"
#include "lab.cuh"

using bf16 = __nv_bfloat16;
static char* flush_buf;

// PLAIN: pointers hidden from the compiler (plain loads, not the read-only path); TWO_BARRIERS: row_sum's
// reduction instead of the one-barrier one.
template <int TPR, int PT, bool PLAIN = false, bool TWO_BARRIERS = false>
__global__ void __launch_bounds__(TPR)
    cand(const bf16* __restrict__ x, const bf16* __restrict__ sc, const bf16* __restrict__ sh, bf16* __restrict__ y,
         int cols, unsigned tokens, int64_t bstride, int64_t tstride, float eps) {
  if constexpr (PLAIN) {
    asm volatile("" : "+l"(x));
    asm volatile("" : "+l"(sc));
    asm volatile("" : "+l"(sh));
  }
  const unsigned row = blockIdx.x, b = row / tokens, s = row - b * tokens;
  const int tid = threadIdx.x;
  const bf16* xr = x + int64_t{row} * cols;
  const int64_t m = b * bstride + s * tstride;
  uint4 xv[PT], sv[PT], hv[PT];
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    xv[i] = *reinterpret_cast<const uint4*>(xr + (i * TPR + tid) * 8);
    sv[i] = *reinterpret_cast<const uint4*>(sc + m + (i * TPR + tid) * 8);
    hv[i] = *reinterpret_cast<const uint4*>(sh + m + (i * TPR + tid) * 8);
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const bf16* e = reinterpret_cast<const bf16*>(&xv[i]);
#pragma unroll
    for (int k = 0; k < 8; ++k) ss += __bfloat162float(e[k]) * __bfloat162float(e[k]);
  }
  if constexpr (TWO_BARRIERS) {
    ss = ckt::row_sum(ss);
  } else {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ float part[TPR / 32];
    if constexpr (TPR > 32) {
      if (tid % 32 == 0) part[tid / 32] = ss;
      __syncthreads();
      ss = 0.f;
#pragma unroll
      for (int k = 0; k < TPR / 32; ++k) ss += part[k];
    }
  }
  const float inv = rsqrtf(ss / cols + eps);
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const bf16 *e = reinterpret_cast<const bf16*>(&xv[i]), *f = reinterpret_cast<const bf16*>(&sv[i]),
               *g = reinterpret_cast<const bf16*>(&hv[i]);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      oe[k] =
          __float2bfloat16_rn(__bfloat162float(e[k]) * inv * (1.f + __bfloat162float(f[k])) + __bfloat162float(g[k]));
    *reinterpret_cast<uint4*>(y + int64_t{row} * cols + (i * TPR + tid) * 8) = o;
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--version") return 0;
  CK(cudaMalloc(&flush_buf, kFlushBytes));
  const int64_t max_elems = int64_t{2} * 7392 * 2048;
  bf16 *x, *y, *sc, *sh, *ref;
  CK(cudaMalloc(&x, max_elems * 2));
  CK(cudaMalloc(&y, max_elems * 2));
  CK(cudaMalloc(&ref, max_elems * 2));
  CK(cudaMalloc(&sc, max_elems * 2));
  CK(cudaMalloc(&sh, max_elems * 2));
  {
    std::vector<bf16> h(max_elems);
    for (int64_t i = 0; i < max_elems; ++i) h[i] = __float2bfloat16_rn(float((i * 7919) % 2003) / 1001.f - 1.f);
    CK(cudaMemcpy(x, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < max_elems; ++i) h[i] = __float2bfloat16_rn(float((i * 104729) % 1009) / 2018.f - 0.25f);
    CK(cudaMemcpy(sc, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sh, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
  }
  struct Case {
    int64_t batch, tokens;
    int cols;
    bool per_token;
  };
  for (const Case c : {Case{2, 4096, 2048, false}, Case{2, 7392, 2048, false}, Case{2, 4096, 2048, true}}) {
    const int64_t rows = c.batch * c.tokens, n = rows * c.cols;
    ckt::AdaLnArgs a{};
    a.out = y;
    a.input = x;
    a.scale = sc;
    a.shift = sh;
    a.rows = rows;
    a.cols = c.cols;
    a.tokens = c.tokens;
    a.out_token_stride = a.input_token_stride = c.cols;
    a.out_batch_stride = a.input_batch_stride = c.tokens * c.cols;
    a.scale_batch_stride = a.shift_batch_stride = c.per_token ? c.tokens * c.cols : c.cols;
    a.scale_token_stride = a.shift_token_stride = c.per_token ? c.cols : 0;
    a.eps = 1e-6f;
    const double bytes = (c.per_token ? 4.0 : 2.0) * n * 2;
    auto line = [&](const char* name, float us, bool check) {
      bool same = true;
      if (check) {
        std::vector<uint16_t> got(n), want(n);
        CK(cudaMemcpy(got.data(), y, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(want.data(), ref, n * 2, cudaMemcpyDeviceToHost));
        same = got == want;
      }
      std::printf("%-34s %ldx%ldx%d %s %8.2f us %6.0f GB/s %s\n", name, (long)c.batch, (long)c.tokens, c.cols,
                  c.per_token ? "token " : "sample", us, bytes / us / 1e3, same ? "" : "MISMATCH");
    };
    line("memcpy same bytes",
         time_us([&] { CK(cudaMemcpyAsync(y, x, size_t(n * 2), cudaMemcpyDeviceToDevice)); }, flush_buf),
         false);  // x to y only: the per-token form moves twice these bytes
    CK(ckt::adaln(ckt::DType::BFloat16, a, 0));
    CK(cudaMemcpy(ref, y, n * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemset(y, 0xff, n * 2));
    line("shipped", time_us([&] { CK(ckt::adaln(ckt::DType::BFloat16, a, 0)); }, flush_buf), true);
    // The warp kernel on a full grid (one block per 8 rows) instead of a persistent one.
    {
      CK(cudaMemset(y, 0xff, n * 2));
      const unsigned grid = static_cast<unsigned>((rows + 7) / 8);
      line("warp kernel, full grid",
           time_us([&] { ckt::adaln_warp_kernel<bf16, 8, 8, false, false><<<grid, 256>>>(a); }, flush_buf), true);
    }
    auto c2 = [&](auto kernel, int tpr, int pt) {
      if (tpr * pt * 8 != c.cols) return;
      CK(cudaMemset(y, 0xff, n * 2));
      const float us = time_us(
          [&] {
            kernel<<<static_cast<unsigned>(rows), tpr>>>(x, sc, sh, y, c.cols, static_cast<unsigned>(c.tokens),
                                                         a.scale_batch_stride, a.scale_token_stride, 1e-6f);
          },
          flush_buf);
      char name[64];
      static int variant = 0;  // the order of the calls below
      std::snprintf(name, sizeof name, "candidate t%d p%d v%d", tpr, pt, variant++ % 6);
      line(name, us, true);
    };
    c2(cand<128, 2>, 128, 2);
    c2(cand<128, 2, true>, 128, 2);
    c2(cand<128, 2, false, true>, 128, 2);
    c2(cand<128, 2, true, true>, 128, 2);
    c2(cand<256, 1>, 256, 1);
    c2(cand<64, 4>, 64, 4);
    // The block kernel at a few shapes.
    for (int threads : {64, 128, 256}) {
      for (int rpb : {1, 2, 4}) {
        const int pt = c.cols / 8 / threads;
        if (pt != 1 && pt != 2) continue;
        CK(cudaMemset(y, 0xff, n * 2));
        const dim3 block(threads, rpb);
        const unsigned grid = static_cast<unsigned>((rows + rpb - 1) / rpb);
        const float us = time_us(
            [&] {
              if (pt == 2)
                ckt::adaln_kernel<bf16, 8, 2, false, false><<<grid, block>>>(a);
              else
                ckt::adaln_kernel<bf16, 8, 1, false, false><<<grid, block>>>(a);
            },
            flush_buf);
        char name[64];
        std::snprintf(name, sizeof name, "block kernel t%d p%d r%d", threads, pt, rpb);
        line(name, us, true);
      }
    }
  }
  std::printf("done\n");
  return 0;
}
