"""GEGLU's erf form in its lower tail, on the CPU: the kernel's gelu(x) = x * normal_cdf(x) (geglu.cu's polynomial,
evaluated in fp32 steps, 2^q exact) against eager's 0.5 * x * (1 + erff(x / sqrt 2)) (fp32 steps, erff correctly
rounded) and the exact value, at every float16 and bfloat16 gate in [-8, 8], for a cut of the tail at END. Counts
the gates where the two round more than 1 ulp apart, and among them those where the kernel's is not the nearer the
exact value (what tests/test_geglu.py's test_parity_eager_every_gate refuses). Template developers' tool:

    python3 tests/kernel_lab/gelu_tail.py 5.5 6
"""

import math
import sys

import numpy as np

# geglu.cu, normal_cdf: log2 Phi(-a) as a polynomial in a, lowest degree first.
COEFFS = [float(np.float32(c)) for c in (
    -1.000000000e00, -1.151107311e00, -4.591847658e-01, -5.257572979e-02, 7.180526387e-03,
    -2.184604964e-04, -1.618822280e-04, 3.889390428e-05, -3.990506684e-06, 1.625102612e-07,
)]  # fmt: skip
f32 = np.float32


def kernel_gelu(x: float, end: float) -> float:
    a = min(abs(f32(x)), f32(end))
    q = f32(COEFFS[-1])
    for c in reversed(COEFFS[:-1]):
        q = f32(float(q) * float(a) + c)  # an fma: one rounding
    tail = f32(0) if abs(x) > end else f32(2.0 ** float(q))
    return float(f32(f32(x) * (tail if x < 0 else f32(1) - tail)))


def eager_gelu(x: float) -> float:
    e = f32(math.erf(float(f32(f32(x) * f32(math.sqrt(0.5))))))
    return float(f32(f32(f32(x) * f32(0.5)) * f32(f32(1) + e)))


def exact_gelu(x: float) -> float:
    return x * 0.5 * math.erfc(-x / math.sqrt(2))


def gates(dtype: str) -> list[float]:
    if dtype == "float16":
        values = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # the NaN patterns
            values = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
    return [float(v) for v in values if math.isfinite(v) and abs(v) <= 8]


def rounded(v: float, dtype: str) -> float:
    if dtype == "float16":
        return float(np.float16(v))
    bits = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16  # round to nearest even
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def ulp(v: float, dtype: str) -> float:
    mant, tiny = (10, 2.0**-14) if dtype == "float16" else (7, 2.0**-126)
    return math.ldexp(1.0, math.frexp(max(abs(v), tiny))[1] - 1 - mant)


def main() -> None:
    print(f"exact gelu(-5.5) = {exact_gelu(-5.5):.2e}; the smallest float16 subnormal 2^-24 = {2.0**-24:.2e}")
    eager = eager_gelu(-5.5078125)
    print(f"eager's gelu(-5.5078125) = {eager:.2e} (float16: {rounded(eager, 'float16'):.2e})")
    for a in (5.5, 5.75, 6.0, 6.5):
        phi = 0.5 * math.erfc(a / math.sqrt(2))
        q = sum(c * a**k for k, c in enumerate(COEFFS))
        print(f"Phi(-{a}) = {phi:.2e}: the polynomial's 2^q within {abs(2.0**q / phi - 1):.1e} of it")
    for end in map(float, sys.argv[1:] or ["5.5", "6"]):
        for dtype in ("float16", "bfloat16"):
            every, apart, highest, bad = gates(dtype), 0, -math.inf, []
            for g in every:
                ours, eager, exact = rounded(kernel_gelu(g, end), dtype), rounded(eager_gelu(g), dtype), exact_gelu(g)
                if abs(ours - eager) > ulp(eager, dtype):
                    apart, highest = apart + 1, max(highest, g)
                    if abs(ours - exact) >= abs(eager - exact):
                        bad.append(g)
            print(
                f"cut at -{end:g}, {dtype}: of {len(every)} gates {apart} ({apart / len(every):.2e}) more than 1 ulp "
                f"from eager's, the highest at {highest:.8g}; {len(bad)} of them not the nearer the exact value",
                ", ".join(f"{g:.8g}" for g in bad[:8]),
            )


if __name__ == "__main__":
    main()
