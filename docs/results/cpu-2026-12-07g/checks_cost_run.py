"""Builds checks_cost.cpp (the bindings' argument checks of one RMSNorm and one fused-add forward on CPU tensors,
without the device tests and the launch) with torch's cpp_extension on a CPU machine and prints µs per call, best
of 5 rounds of 200000: run from anywhere after rendering docs/example-answers.yml into .gpu/projects/all (for
config.h). Output: checks-cost.txt (2026-12-07, an AMD EPYC of the CPU machine, torch 2.14.1)."""

from torch.utils.cpp_extension import load
inc = ["/work/main/template/torch-ext", "/work/main/.gpu/projects/all/kernel_src", "/usr/local/cuda/include"]
m = load(name="checks_cost", sources=["/tmp/hc/checks_cost.cpp"], extra_include_paths=inc, extra_cflags=["-O3"], verbose=False)
rms, fused, empty = m.run(200000)
print(f"checks, RMSNorm forward: {rms:.3f} us; fused add forward: {fused:.3f} us; at::empty (CPU) {empty:.3f} us")
