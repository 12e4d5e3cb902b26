# Host time per call of every op's tiny bench case (the cases marked `host`), ours and F.rms_norm, forward and
# forward+backward, measured interleaved: each round runs every callable in turn, in a new seeded random order, so
# that drift over the run (clocks, other processes, compile workers left by an earlier torch.compile) favours none.
# bench.py interleaves only a case's own implementations (since 2026-12-07; before, it timed each on its own), so
# one op's ours and another's F.rms_norm lie seconds or minutes apart there: between two of its runs host times moved
# by up to a third. The calls are the bench's own (cases/<op>.py, the same
# inputs, training_call), bf16. Template developers' tool (see run.sh): from a built project root with LOCAL_KERNELS
# set,   python /path/to/tests/kernel_lab/host_times.py   (a project rendered with docs/example-answers.yml). Until
# 2026-12-02 this script timed single ops against aten's (the figures of that day in docs/benchmarks.md; git history).
import functools
import statistics
import sys

import torch

sys.path.insert(0, "benchmarks")
import bench  # noqa: E402  (the project's benchmarks/bench.py: its cases and how it loads the kernel)
from checks import as_tuple, training_call  # noqa: E402
from host_rounds import host_rounds, shuffled  # noqa: E402  (beside this file)

ROUNDS, CALLS, WARMUP = 15, 200, 100
IMPLS = ("ours", "F.rms_norm")

kernel, how = bench.load_kernel(None)
calls = {}  # (op variant case, mode, impl) -> (the call, grad mode)
for op, module in bench.case_modules().items():
    for case in module.cases():
        if not case.host:
            continue
        for mode in ("forward", "train"):
            torch.manual_seed(0)
            inputs = case.make(torch.bfloat16, torch.device("cuda"))
            grads = [n for n in case.grads if inputs.get(n) is not None] if mode == "train" else []
            for name in grads:
                inputs[name].requires_grad_(True)
            impls = case.impls(kernel, inputs)
            for impl in IMPLS:
                if impl not in impls:
                    continue
                fn, args = impls[impl]
                if mode == "train":
                    grad_outs = [torch.randn_like(o) for o in as_tuple(fn(*args))]
                    call = training_call(fn, args, [inputs[n] for n in grads], grad_outs)
                else:
                    call = functools.partial(fn, *args)
                calls[(f"{op} {case.variant} {case.name}", mode, impl)] = (call, mode == "train")

times, waited = host_rounds(calls, ROUNDS, CALLS, WARMUP, shuffled(calls))

print(f"host time per call, us: median of {ROUNDS} interleaved rounds of {CALLS} calls (kernel: {how})")
reference = {
    mode: statistics.median(t)
    for (case, mode, impl), t in times.items()
    if impl == "F.rms_norm" and case.startswith("rmsnorm weight ")
}
for (case, mode, impl), t in times.items():
    us = statistics.median(t)
    ratio = f"{reference[mode] / us:5.2f}x F.rms_norm (weight)" if mode in reference and impl == "ours" else ""
    busy = "  (GPU-bound?)" if waited[(case, mode, impl)] > 0.1 else ""
    spread = f"[{min(t):6.1f} - {max(t):6.1f}]"
    print(f"host {case:40s} {mode:7s} {impl:10s} {us:7.1f} {spread} {ratio}{busy}")
