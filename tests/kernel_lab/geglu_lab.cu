// Kernel lab for GEGLU on one GPU, without torch (see run.sh): the shipped forward (erf and tanh) against the same
// kernel shape with other GELUs, cold L2, and the accuracy of the shipped erf GELU (normal_cdf) over every bf16 and
// fp16 value and a dense fp32 sweep, against float64 and against ATen's formula (0.5 * x * (1 + erff(x / sqrt 2))).
//   geglu_lab          timings and accuracy
//   geglu_lab ncu      each forward once at 14784 x 16384 (for ncu --kernel-name regex:geglu)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "geglu.cu"
#include "lab.cuh"

using bf16 = __nv_bfloat16;
namespace lab {

// GELUs for the lab's forward: ATen's erf formula (the shipped one before normal_cdf), the shipped ones, and none
// (value * gate: the same bytes with the least arithmetic).
struct AtenErf {
  __device__ float operator()(float x) const { return x * 0.5f * (1.f + erff(x * 0.70710678118654752440f)); }
};
struct ShippedErf {
  __device__ float operator()(float x) const { return ckt::gelu<false>(x); }
};
struct ShippedTanh {
  __device__ float operator()(float x) const { return ckt::gelu<true>(x); }
};
struct NoGelu {
  __device__ float operator()(float x) const { return x; }
};

// The shipped forward's shape for contiguous bf16 rows of `inner` (a multiple of 8) values: one 16-byte value and
// gate vector per thread, 256 threads, as many blocks as the SM holds. Rounds gelu(gate) to bf16 before the product,
// as the shipped kernel and eager do.
template <typename Gelu>
__global__ void __launch_bounds__(256, 8)
    fwd(const bf16* __restrict__ in, bf16* __restrict__ out, ckt::Divider per_row, uint32_t total, int64_t inner) {
  const uint32_t v = blockIdx.x * 256 + threadIdx.x;
  if (v >= total) return;
  const uint32_t row = per_row.div(v);
  const int64_t col = int64_t{v - row * per_row.d} * 8;
  const bf16* src = in + int64_t{row} * 2 * inner + col;
  const uint4 vb = *reinterpret_cast<const uint4*>(src), gb = *reinterpret_cast<const uint4*>(src + inner);
  const bf16 *value = reinterpret_cast<const bf16*>(&vb), *gate = reinterpret_cast<const bf16*>(&gb);
  uint4 ob;
  bf16* o = reinterpret_cast<bf16*>(&ob);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float act = __bfloat162float(__float2bfloat16_rn(Gelu()(__bfloat162float(gate[k]))));
    o[k] = __float2bfloat16_rn(__bfloat162float(value[k]) * act);
  }
  *reinterpret_cast<uint4*>(out + int64_t{row} * inner + col) = ob;
}

// fp32 GELU of each x: the shipped erf form and ATen's.
__global__ void sweep(const float* x, float* shipped, float* aten, int64_t n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) {
    shipped[i] = ckt::gelu<false>(x[i]);
    aten[i] = AtenErf()(x[i]);
  }
}

}  // namespace lab

static float round_bf16(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }
static float round_fp16(float f) { return __half2float(__float2half_rn(f)); }

// Accuracy of the fp32 GELUs: for each input set, the largest error in units of 2^-24 * (|x| + |gelu(x)|) (the
// tests' bound is 8 of them), the largest absolute error of the CDF (gelu / x) in units of 2^-24 for |x| >= 2^-10,
// and, rounded to the set's type (bf16, fp16), how many results differ between the shipped form and ATen's, and
// how many of those lie away from a rounding tie (the exact value +- 8 units rounds to one value there).
static void accuracy() {
  std::vector<std::pair<std::string, std::vector<float>>> sets;
  std::vector<float> all_bf16, all_fp16, dense;
  for (uint32_t b = 0; b < 65536; ++b) {
    all_bf16.push_back(host_bf(static_cast<uint16_t>(b)));
    all_fp16.push_back(__half2float(__ushort_as_half(static_cast<unsigned short>(b))));
  }
  for (int64_t i = 0; i <= (int64_t{1} << 23); ++i) dense.push_back(-12.f + 24.f * float(i) / float(1 << 23));
  sets = {{"bf16", all_bf16}, {"fp16", all_fp16}, {"fp32 [-12,12]", dense}};
  for (auto& [name, xs] : sets) {
    const int64_t n = static_cast<int64_t>(xs.size());
    float *dx, *ds, *da;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&ds, n * 4));
    CK(cudaMalloc(&da, n * 4));
    CK(cudaMemcpy(dx, xs.data(), n * 4, cudaMemcpyHostToDevice));
    lab::sweep<<<static_cast<unsigned>((n + 255) / 256), 256>>>(dx, ds, da, n);
    std::vector<float> s(n), a(n);
    CK(cudaMemcpy(s.data(), ds, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(a.data(), da, n * 4, cudaMemcpyDeviceToHost));
    const double u = std::ldexp(1.0, -24);
    double worst[2] = {0, 0}, cdf[2] = {0, 0};
    int64_t differ = 0, away = 0, nan_mismatch = 0;
    const bool half = name == "fp16";
    for (int64_t i = 0; i < n; ++i) {
      const double x = xs[i];
      if (!std::isfinite(x)) {
        nan_mismatch += (std::isnan(s[i]) != std::isnan(a[i])) || (!std::isnan(s[i]) && s[i] != a[i]);
        continue;
      }
      const double exact = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      const double scale = u * (std::abs(x) + std::abs(exact));
      const float got[2] = {s[i], a[i]};
      for (int k = 0; k < 2; ++k) {
        if (scale > 0) worst[k] = std::max(worst[k], std::abs(got[k] - exact) / scale);
        if (std::abs(x) >= std::ldexp(1.0, -10)) cdf[k] = std::max(cdf[k], std::abs(got[k] / x - exact / x) / u);
      }
      if (name == "fp32 [-12,12]") continue;
      const float rs = half ? round_fp16(s[i]) : round_bf16(s[i]), ra = half ? round_fp16(a[i]) : round_bf16(a[i]);
      if (rs != ra) {
        ++differ;
        const float lo = half ? round_fp16(float(exact - 8 * scale)) : round_bf16(float(exact - 8 * scale));
        const float hi = half ? round_fp16(float(exact + 8 * scale)) : round_bf16(float(exact + 8 * scale));
        away += lo == hi;
      }
    }
    std::printf(
        "accuracy %-14s shipped: %.2f units of |x|+|gelu| (CDF %.2f u)  aten: %.2f (CDF %.2f u)  rounded: "
        "%ld differ, %ld away from a tie; non-finite inputs differing: %ld\n",
        name.c_str(), worst[0], cdf[0], worst[1], cdf[1], (long)differ, (long)away, (long)nan_mismatch);
    CK(cudaFree(dx));
    CK(cudaFree(ds));
    CK(cudaFree(da));
  }
  const float specials[] = {0.f, -0.f, 1.f, -1.f, -5.5f, -5.6f, -6.f, -20.f, 5.6f, INFINITY, -INFINITY, NAN};
  float *dx, *ds, *da;
  CK(cudaMalloc(&dx, sizeof specials));
  CK(cudaMalloc(&ds, sizeof specials));
  CK(cudaMalloc(&da, sizeof specials));
  CK(cudaMemcpy(dx, specials, sizeof specials, cudaMemcpyHostToDevice));
  const int n = sizeof specials / 4;
  lab::sweep<<<1, 32>>>(dx, ds, da, n);
  float s[n], a[n];
  CK(cudaMemcpy(s, ds, sizeof s, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(a, da, sizeof a, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) std::printf("gelu(%g): shipped %.9g, aten %.9g\n", specials[i], s[i], a[i]);
}

int main(int argc, char** argv) {
  const bool ncu = argc > 1 && std::string(argv[1]) == "ncu";
  if (argc > 1 && std::string(argv[1]) == "--version") return 0;
  void* flush_buf;
  CK(cudaMalloc(&flush_buf, kFlushBytes));
  const int64_t inner = 8192;
  for (const int64_t rows : {int64_t{14784}, int64_t{5376}}) {
    if (ncu && rows != 14784) continue;
    const int64_t n_in = rows * 2 * inner, n_out = rows * inner;
    std::vector<uint16_t> host(n_in);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto& h : host) {
      const bf16 b = __float2bfloat16_rn(normal(rng));
      std::memcpy(&h, &b, 2);
    }
    bf16 *in, *out, *ref;
    CK(cudaMalloc(&in, n_in * 2));
    CK(cudaMalloc(&out, n_out * 2));
    CK(cudaMalloc(&ref, n_out * 2));
    CK(cudaMemcpy(in, host.data(), n_in * 2, cudaMemcpyHostToDevice));
    const double bytes = 3.0 * n_out * 2;
    const uint32_t total = static_cast<uint32_t>(n_out / 8);
    const ckt::Divider per_row(static_cast<uint32_t>(inner / 8));
    auto shipped = [&](bool tanh) {
      ckt::GegluArgs a{};
      a.out = out;
      a.input = in;
      a.rows = rows;
      a.inner = inner;
      a.input_rows = ckt::RowOffsets::spaced(2 * inner);
      a.out_rows = ckt::RowOffsets::spaced(inner);
      a.tanh = tanh;
      return [=] { CK(ckt::geglu(ckt::DType::BFloat16, a, 0)); };
    };
    auto mine = [&](auto kernel) {
      return [=] { kernel<<<(total + 255) / 256, 256>>>(in, out, per_row, total, inner); };
    };
    // Each line's output against the line named in `against` (bits), or nothing.
    auto line = [&](const char* name, auto launch, const char* against) {
      CK(cudaMemset(out, 0xff, n_out * 2));
      if (ncu) {
        launch();
        CK(cudaDeviceSynchronize());
        return;
      }
      const float us = time_us(launch, flush_buf);
      std::string check;
      if (against) {
        std::vector<uint16_t> got(n_out), want(n_out);
        CK(cudaMemcpy(got.data(), out, n_out * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(want.data(), ref, n_out * 2, cudaMemcpyDeviceToHost));
        int64_t differ = 0;
        for (int64_t i = 0; i < n_out; ++i) differ += got[i] != want[i];
        check = std::to_string(differ) + " of " + std::to_string(n_out) + " differ from " + against;
      }
      std::printf("%-40s %ldx%ld %8.2f us %6.0f GB/s  %s\n", name, (long)rows, (long)(2 * inner), us, bytes / us / 1e3,
                  check.c_str());
    };
    if (!ncu) {  // ATen's erf formula's output: what eager gives
      mine(lab::fwd<lab::AtenErf>)();
      CK(cudaMemcpy(ref, out, n_out * 2, cudaMemcpyDeviceToDevice));
      CK(cudaDeviceSynchronize());
      char *from, *to;
      CK(cudaMalloc(&from, n_out * 3));
      CK(cudaMalloc(&to, n_out * 3));
      const float us = time_us([&] { CK(cudaMemcpyAsync(to, from, n_out * 3, cudaMemcpyDeviceToDevice)); }, flush_buf);
      std::printf("%-40s %ldx%ld %8.2f us %6.0f GB/s\n", "memcpy of the same bytes", (long)rows, (long)(2 * inner), us,
                  bytes / us / 1e3);
      CK(cudaFree(from));
      CK(cudaFree(to));
    }
    line("value * gate (no GELU), lab", mine(lab::fwd<lab::NoGelu>), nullptr);
    line("aten erf formula, lab", mine(lab::fwd<lab::AtenErf>), "aten");
    line("normal_cdf erf, lab", mine(lab::fwd<lab::ShippedErf>), "aten");
    line("tanh, lab", mine(lab::fwd<lab::ShippedTanh>), nullptr);
    line("shipped erf", shipped(false), "aten");
    line("shipped tanh", shipped(true), nullptr);
    line("shipped erf (again)", shipped(false), "aten");
    line("aten erf formula, lab (again)", mine(lab::fwd<lab::AtenErf>), "aten");
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaFree(ref));
  }
  if (!ncu) accuracy();
  return 0;
}
