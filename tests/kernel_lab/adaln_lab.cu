// Kernel lab for AdaLN (see rms_norm_lab.cu and run.sh): the shipped forward (and the path it took before its
// fixed-width launch), lean candidates and the shipped kernels at other launch shapes, cold L2, next to a copy of
// the same bytes, each checked against float64 (forward_ok); then the per-token backward (bwd_main): before (fp32
// partial rows and casts), the shipped row kernel at several shapes and a fixed-shape candidate.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adaln.cu"
#include "lab.cuh"

using bf16 = __nv_bfloat16;
constexpr ckt::DTypes kBf16{ckt::DType::BFloat16, ckt::DType::BFloat16, ckt::DType::BFloat16};  // all bf16
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

// Candidate backward, per-token RMSNorm modulation, bf16: rows of exactly PT * TPR * 8 elements, one row per block,
// fixed shape and no strides (the lean form of the shipped row kernel). Writes grad_input and grad_scale.
template <int TPR, int PT>
__global__ void __launch_bounds__(TPR, 1024 / TPR)  // 64 registers: 1024 threads per SM, as the shipped kernel
    cand_bwd(const bf16* __restrict__ x, const bf16* __restrict__ dy, const bf16* __restrict__ sc,
             bf16* __restrict__ dx, bf16* __restrict__ dsc, float eps) {
  constexpr int cols = PT * TPR * 8;
  const int64_t base = int64_t{blockIdx.x} * cols;
  const int tid = threadIdx.x;
  uint4 xv[PT], gv[PT], sv[PT];
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const int64_t at = base + (i * TPR + tid) * 8;
    xv[i] = *reinterpret_cast<const uint4*>(x + at);
    gv[i] = *reinterpret_cast<const uint4*>(dy + at);
    sv[i] = *reinterpret_cast<const uint4*>(sc + at);
  }
  float s0 = 0.f, s1 = 0.f;  // sum x^2, sum g * x
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const bf16 *e = reinterpret_cast<const bf16*>(&xv[i]), *g = reinterpret_cast<const bf16*>(&gv[i]),
               *f = reinterpret_cast<const bf16*>(&sv[i]);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float xf = __bfloat162float(e[k]);
      s0 += xf * xf;
      s1 += __bfloat162float(g[k]) * (1.f + __bfloat162float(f[k])) * xf;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s0 += __shfl_xor_sync(0xffffffffu, s0, o);
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
  }
  if constexpr (TPR > 32) {
    __shared__ float part[2][TPR / 32];
    if (tid % 32 == 0) {
      part[0][tid / 32] = s0;
      part[1][tid / 32] = s1;
    }
    __syncthreads();
    s0 = s1 = 0.f;
#pragma unroll
    for (int k = 0; k < TPR / 32; ++k) {
      s0 += part[0][k];
      s1 += part[1][k];
    }
  }
  const float inv = rsqrtf(s0 / cols + eps), coef = inv * inv * inv * (s1 / cols);
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const bf16 *e = reinterpret_cast<const bf16*>(&xv[i]), *g = reinterpret_cast<const bf16*>(&gv[i]),
               *f = reinterpret_cast<const bf16*>(&sv[i]);
    uint4 o, d;
    bf16 *oe = reinterpret_cast<bf16*>(&o), *de = reinterpret_cast<bf16*>(&d);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float xf = __bfloat162float(e[k]), gf = __bfloat162float(g[k]);
      oe[k] = __float2bfloat16_rn(inv * gf * (1.f + __bfloat162float(f[k])) - xf * coef);
      de[k] = __float2bfloat16_rn(gf * xf * inv);
    }
    const int64_t at = base + (i * TPR + tid) * 8;
    *reinterpret_cast<uint4*>(dx + at) = o;
    *reinterpret_cast<uint4*>(dsc + at) = d;
  }
}

// fp32 -> bf16, what `.to()` did to each partial gradient before.
__global__ void cast_kernel(const float* __restrict__ in, bf16* __restrict__ out, int64_t n) {
  const int64_t i = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    const float4 v = *reinterpret_cast<const float4*>(in + i);
    out[i] = __float2bfloat16_rn(v.x);
    out[i + 1] = __float2bfloat16_rn(v.y);
    out[i + 2] = __float2bfloat16_rn(v.z);
    out[i + 3] = __float2bfloat16_rn(v.w);
  }
}

// The per-token RMSNorm backward, 2 x tokens x 2048 bf16: grad_input and grad_scale (grad_shift is grad_out itself
// in the shipped autograd formula; one line also writes it, as the op does when asked).
static void bwd_main(bf16* x, bf16* dy, bf16* sc) {
  const int cols = 2048;
  const float eps = 1e-6f;
  for (const int64_t tokens : {int64_t{7392}, int64_t{4096}}) {
    const int64_t rows = 2 * tokens, n = rows * cols;
    bf16 *dx, *dsc, *dsh, *dx_ref, *dsc_ref;
    float *ps, *ph;
    CK(cudaMalloc(&dx, n * 2));
    CK(cudaMalloc(&dsc, n * 2));
    CK(cudaMalloc(&dsh, n * 2));
    CK(cudaMalloc(&dx_ref, n * 2));
    CK(cudaMalloc(&dsc_ref, n * 2));
    CK(cudaMalloc(&ps, n * 4));
    CK(cudaMalloc(&ph, n * 4));
    ckt::AdaLnBackwardArgs a{};
    a.grad_input = dx;
    a.grad_out = dy;
    a.input = x;
    a.scale = sc;
    a.rows = rows;
    a.cols = cols;
    a.tokens = tokens;
    a.chunk_rows = 1;
    a.grad_input_stride = a.grad_out_token_stride = a.input_token_stride = cols;
    a.grad_out_batch_stride = a.input_batch_stride = tokens * cols;
    a.scale_batch_stride = tokens * cols;
    a.scale_token_stride = cols;
    a.eps = eps;
    // The shipped output, checked against a float64 host reference on sampled rows; every line below is compared
    // with it (MISMATCH: a bit differs; the candidate: more than 2 bf16 roundings of the row's largest gradient).
    ckt::AdaLnBackwardArgs shipped = a;
    shipped.grad_scale = dsc;
    CK(ckt::adaln_backward(kBf16, shipped, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(dx_ref, dx, n * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(dsc_ref, dsc, n * 2, cudaMemcpyDeviceToDevice));
    double worst = 0;
    {
      std::vector<uint16_t> hx(n), hg(n), hs(n), hdx(n), hds(n);
      CK(cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hg.data(), dy, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hs.data(), sc, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hdx.data(), dx_ref, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hds.data(), dsc_ref, n * 2, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < rows; r += rows / 41) {
        const int64_t o = r * cols;
        double ss = 0, sgn = 0, big_dx = 0, big_ds = 0;
        for (int c = 0; c < cols; ++c) ss += double(host_bf(hx[o + c])) * host_bf(hx[o + c]);
        const double inv = 1.0 / std::sqrt(ss / cols + eps);
        std::vector<double> want_dx(cols), want_ds(cols);
        for (int c = 0; c < cols; ++c) {
          sgn += host_bf(hg[o + c]) * (1.0 + host_bf(hs[o + c])) * host_bf(hx[o + c]) * inv;
        }
        for (int c = 0; c < cols; ++c) {
          const double nv = host_bf(hx[o + c]) * inv, g = host_bf(hg[o + c]) * (1.0 + host_bf(hs[o + c]));
          want_dx[c] = inv * (g - nv * sgn / cols);
          want_ds[c] = host_bf(hg[o + c]) * nv;
          big_dx = std::max(big_dx, std::abs(want_dx[c]));
          big_ds = std::max(big_ds, std::abs(want_ds[c]));
        }
        for (int c = 0; c < cols; ++c) {
          const double e1 = std::abs(host_bf(hdx[o + c]) - want_dx[c]) / big_dx;
          const double e2 = std::abs(host_bf(hds[o + c]) - want_ds[c]) / big_ds;
          worst = std::max({worst, e1, e2, std::isfinite(host_bf(hdx[o + c])) ? 0.0 : 1e9});
        }
      }
    }
    std::printf("backward 2x%ldx%d per token: shipped vs float64 on sampled rows: %.1e of the row's largest %s\n",
                (long)tokens, cols, worst, worst <= 2.0 / 256 ? "(ok)" : "BAD");
    auto same = [&](bool exact, bool with_dscale = true) {  // dx (and dscale) against the shipped output
      std::vector<uint16_t> got(n), want(n);
      bool ok = true;
      for (int t = 0; t < (with_dscale ? 2 : 1) && ok; ++t) {
        CK(cudaMemcpy(got.data(), t == 0 ? dx : dsc, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(want.data(), t == 0 ? dx_ref : dsc_ref, n * 2, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < rows && ok; ++r) {
          float big = 0;
          for (int c = 0; c < cols; ++c) big = std::max(big, std::abs(host_bf(want[r * cols + c])));
          for (int c = 0; c < cols && ok; ++c) {
            const float g = host_bf(got[r * cols + c]), w = host_bf(want[r * cols + c]);
            ok = exact ? got[r * cols + c] == want[r * cols + c] : std::abs(g - w) <= big * (2.f / 256);
          }
        }
      }
      return ok;
    };
    auto line = [&](const char* name, int streams, float us, bool ok) {
      const double bytes = double(streams) * n * 2;
      std::printf("%-44s 2x%ldx%d %8.2f us %6.0f GB/s (%d x %.1f MB) %s\n", name, (long)tokens, cols, us,
                  bytes / us / 1e3, streams, n * 2 / 1e6, ok ? "" : "MISMATCH");
    };
    auto poison = [&] {
      CK(cudaMemset(dx, 0xff, n * 2));
      CK(cudaMemset(dsc, 0xff, n * 2));
    };
    {  // 2.5 x n elements copied: 5 x n moved (read + write)
      char *from, *to;
      CK(cudaMalloc(&from, n * 5));
      CK(cudaMalloc(&to, n * 5));
      CK(cudaMemset(from, 1, n * 5));
      line("bwd: memcpy of the same bytes (5 x n)", 5,
           time_us([&] { CK(cudaMemcpyAsync(to, from, n * 5, cudaMemcpyDeviceToDevice)); }, flush_buf), true);
      CK(cudaFree(from));
      CK(cudaFree(to));
    }
    {  // before: fp32 partial rows from the chunk kernel (chunk_rows 1), then a cast of each (what .to() did)
      ckt::AdaLnBackwardArgs before = a;
      before.grad_scale_partial = ps;
      before.grad_shift_partial = ph;
      const unsigned grid = static_cast<unsigned>((n / 4 + 255) / 256);
      poison();
      const float us = time_us(
          [&] {
            CK(ckt::adaln_backward(kBf16, before, 0));
            cast_kernel<<<grid, 256>>>(ps, dsc, n);
            cast_kernel<<<grid, 256>>>(ph, dsh, n);
          },
          flush_buf);
      line("before: chunk kernel, fp32 partials, 2 casts", 6, us, same(false));
    }
    poison();
    line("shipped: row kernel, dx + dscale", 5, time_us([&] { CK(ckt::adaln_backward(kBf16, shipped, 0)); }, flush_buf),
         same(true));
    {
      ckt::AdaLnBackwardArgs all = shipped;
      all.grad_shift = dsh;
      poison();
      line("shipped: row kernel, dx + dscale + dshift", 6,
           time_us([&] { CK(ckt::adaln_backward(kBf16, all, 0)); }, flush_buf), same(true));
    }
    {
      ckt::AdaLnBackwardArgs only = a;
      poison();
      line("shipped: row kernel, dx only", 4, time_us([&] { CK(ckt::adaln_backward(kBf16, only, 0)); }, flush_buf),
           same(true, false));
    }
    for (int threads : {64, 128, 256}) {  // the row kernel at other shapes (p: vectors per thread)
      const int pt = cols / 8 / threads;
      if (pt != 1 && pt != 2) continue;
      for (int rpb : {1, 2, 4}) {
        const dim3 block(threads, rpb);
        const unsigned grid = static_cast<unsigned>((rows + rpb - 1) / rpb);
        poison();
        const float us = time_us(
            [&] {
              if (pt == 2)
                ckt::adaln_backward_rows_kernel<bf16, bf16, bf16, 8, 2, false, false>
                    <<<grid, block>>>(shipped, ckt::Divider());
              else
                ckt::adaln_backward_rows_kernel<bf16, bf16, bf16, 8, 1, false, false>
                    <<<grid, block>>>(shipped, ckt::Divider());
            },
            flush_buf);
        char name[64];
        std::snprintf(name, sizeof name, "row kernel t%d p%d r%d", threads, pt, rpb);
        line(name, 5, us, same(true));
      }
    }
    auto cand = [&](auto kernel, int tpr, int pt) {
      poison();
      const float us =
          time_us([&] { kernel<<<static_cast<unsigned>(rows), tpr>>>(x, dy, sc, dx, dsc, eps); }, flush_buf);
      char name[64];
      std::snprintf(name, sizeof name, "candidate (fixed shape) t%d p%d", tpr, pt);
      line(name, 5, us, same(false));
    };
    cand(cand_bwd<128, 2>, 128, 2);
    cand(cand_bwd<256, 1>, 256, 1);
    for (void* p : {(void*)dx, (void*)dsc, (void*)dsh, (void*)dx_ref, (void*)dsc_ref, (void*)ps, (void*)ph})
      CK(cudaFree(p));
  }
}

// The forward's output y (poisoned with NaN before each line) against a float64 host reference: every element
// written, and the sampled rows (every 97th and the last) within one bf16 rounding of the exact result (half an
// ulp, plus fp32 noise on the addends |n * (1 + scale)| + |shift|). Bits are not compared with the shipped output:
// a kernel that sums the row in another order moves the fp32 statistics by an ulp now and then, and with them an
// output's rounding, so that every such candidate read MISMATCH.
static bool forward_ok(const bf16* y, const std::vector<uint16_t>& hx, const std::vector<uint16_t>& hs,
                       const std::vector<uint16_t>& hh, int64_t rows, int cols, int64_t tokens, int64_t bstride,
                       int64_t tstride, float eps) {
  const int64_t n = rows * cols;
  std::vector<uint16_t> got(n);
  CK(cudaMemcpy(got.data(), y, n * 2, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(host_bf(got[i]))) return false;
  }
  for (int64_t r = 0; r < rows; r = r == rows - 1 ? rows : std::min(r + 97, rows - 1)) {
    const int64_t o = r * cols, m = (r / tokens) * bstride + (r % tokens) * tstride;
    double ss = 0;
    for (int c = 0; c < cols; ++c) ss += double(host_bf(hx[o + c])) * host_bf(hx[o + c]);
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int c = 0; c < cols; ++c) {
      const double product = host_bf(hx[o + c]) * inv * (1.0 + host_bf(hs[m + c])), shift = host_bf(hh[m + c]);
      const double want = product + shift, addends = std::abs(product) + std::abs(shift);
      if (std::abs(host_bf(got[o + c]) - want) > std::ldexp(std::abs(want), -8) + std::ldexp(addends, -18))
        return false;
    }
  }
  return true;
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
  std::vector<uint16_t> hx(max_elems), hs(max_elems), hh(max_elems);  // the same values on the host (as bits)
  {
    std::vector<bf16> h(max_elems);
    for (int64_t i = 0; i < max_elems; ++i) h[i] = __float2bfloat16_rn(float((i * 7919) % 2003) / 1001.f - 1.f);
    CK(cudaMemcpy(x, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
    std::memcpy(hx.data(), h.data(), max_elems * 2);
    for (int64_t i = 0; i < max_elems; ++i) h[i] = __float2bfloat16_rn(float((i * 104729) % 1009) / 2018.f - 0.25f);
    CK(cudaMemcpy(sc, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sh, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
    std::memcpy(hs.data(), h.data(), max_elems * 2);
    std::memcpy(hh.data(), h.data(), max_elems * 2);
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
    // Times `launch` into a poisoned y, then checks y (forward_ok).
    auto line = [&](const char* name, auto&& launch) {
      CK(cudaMemset(y, 0xff, n * 2));
      const float us = time_us(launch, flush_buf);
      const bool ok =
          forward_ok(y, hx, hs, hh, rows, c.cols, c.tokens, a.scale_batch_stride, a.scale_token_stride, a.eps);
      std::printf("%-34s %ldx%ldx%d %s %8.2f us %6.0f GB/s %s\n", name, (long)c.batch, (long)c.tokens, c.cols,
                  c.per_token ? "token " : "sample", us, bytes / us / 1e3, ok ? "" : "MISMATCH");
    };
    {
      const float us =
          time_us([&] { CK(cudaMemcpyAsync(ref, x, size_t(n * 2), cudaMemcpyDeviceToDevice)); }, flush_buf);
      std::printf("%-34s %ldx%ldx%d %s %8.2f us %6.0f GB/s\n", "memcpy same bytes", (long)c.batch, (long)c.tokens,
                  c.cols, c.per_token ? "token " : "sample", us, bytes / us / 1e3);  // x only: per token moves 2x
    }
    // ckt::adaln: the fixed-width block kernel (t128 p2 for 2048 bf16) since it has one; before, the warp kernel
    // (per sample) or the general block kernel (per token), which launch_any_width still picks.
    auto shipped = [&] { CK(ckt::adaln(kBf16, a, 0)); };
    line("shipped", shipped);
    constexpr auto before = ckt::launch_any_width<bf16, bf16, bf16, 8, false>;
    line("shipped before (launch_any_width)", [&] { CK(before(a, 0)); });
    // The warp kernel on a full grid (one block per 8 rows) instead of a persistent one.
    line("warp kernel, full grid", [&] {
      ckt::adaln_warp_kernel<bf16, bf16, bf16, 8, 8, false, false><<<static_cast<unsigned>((rows + 7) / 8), 256>>>(a);
    });
    auto c2 = [&](auto kernel, int tpr, int pt) {
      if (tpr * pt * 8 != c.cols) return;
      char name[64];
      static int variant = 0;  // the order of the calls below
      std::snprintf(name, sizeof name, "candidate t%d p%d v%d", tpr, pt, variant++ % 6);
      line(name, [&] {
        kernel<<<static_cast<unsigned>(rows), tpr>>>(x, sc, sh, y, c.cols, static_cast<unsigned>(c.tokens),
                                                     a.scale_batch_stride, a.scale_token_stride, 1e-6f);
      });
    };
    c2(cand<128, 2>, 128, 2);
    line("shipped (again, beside the above)", shipped);
    c2(cand<128, 2, true>, 128, 2);
    c2(cand<128, 2, false, true>, 128, 2);
    c2(cand<128, 2, true, true>, 128, 2);
    c2(cand<256, 1>, 256, 1);
    c2(cand<64, 4>, 64, 4);
    // The shipped fixed-width kernel at other splits of the row (only t128 p2 is launched by ckt::adaln).
    auto fixed = [&](auto kernel, int threads, int pt) {
      if (threads * pt * 8 != c.cols) return;
      char name[64];
      std::snprintf(name, sizeof name, "fixed-width kernel t%d p%d", threads, pt);
      line(name, [&] { kernel<<<static_cast<unsigned>(rows), threads>>>(a, ckt::Divider(uint32_t(c.tokens))); });
    };
    fixed(ckt::adaln_kernel<bf16, bf16, bf16, 8, 2, false, false, 128>, 128, 2);
    fixed(ckt::adaln_kernel<bf16, bf16, bf16, 8, 1, false, false, 256>, 256, 1);
    fixed(ckt::adaln_kernel<bf16, bf16, bf16, 8, 4, false, false, 64>, 64, 4);
    // The general block kernel at a few shapes.
    for (int threads : {64, 128, 256}) {
      for (int rpb : {1, 2, 4}) {
        const int pt = c.cols / 8 / threads;
        if (pt != 1 && pt != 2) continue;
        const dim3 block(threads, rpb);
        const unsigned grid = static_cast<unsigned>((rows + rpb - 1) / rpb);
        char name[64];
        std::snprintf(name, sizeof name, "block kernel t%d p%d r%d", threads, pt, rpb);
        line(name, [&] {
          if (pt == 2)
            ckt::adaln_kernel<bf16, bf16, bf16, 8, 2, false, false><<<grid, block>>>(a, ckt::Divider());
          else
            ckt::adaln_kernel<bf16, bf16, bf16, 8, 1, false, false><<<grid, block>>>(a, ckt::Divider());
        });
      }
    }
  }
  bf16* dy = ref;  // the backward's grad_out: fresh values, not the forward's output
  {
    std::vector<bf16> h(max_elems);
    for (int64_t i = 0; i < max_elems; ++i) h[i] = __float2bfloat16_rn(float((i * 6007) % 1999) / 999.f - 1.f);
    CK(cudaMemcpy(dy, h.data(), max_elems * 2, cudaMemcpyHostToDevice));
  }
  bwd_main(x, dy, sc);
  std::printf("done\n");
  return 0;
}
