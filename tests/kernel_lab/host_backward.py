"""Host time per forward+backward call, split at torch.autograd.grad: every host-timed bench case (ours and
F.rms_norm, bf16, the bench's own inputs and calls) timed twice, once through torch.autograd.grad (what bench.py and
host_times.py time: Python that checks and wraps each output's gradient, then the engine) and once handing the same
outputs, gradients and inputs to the autograd engine directly (what the engine itself costs, as in a model's one
loss.backward() per step, where no op's outputs pass through that Python). Medians of 15 interleaved rounds of 200
calls, each round in a new seeded random order. Template developers' tool; from a built project root with
LOCAL_KERNELS set:

    python /path/to/tests/kernel_lab/host_backward.py
"""

import statistics
import sys

import torch
from torch.autograd import Variable

sys.path.insert(0, "benchmarks")
import bench  # noqa: E402  (the project's benchmarks/bench.py: its cases and how it loads the kernel)
from checks import as_tuple, training_call  # noqa: E402
from host_rounds import host_rounds, shuffled  # noqa: E402  (beside this file)

ROUNDS, CALLS, WARMUP = 15, 200, 100
IMPLS = ("ours", "F.rms_norm")
run_backward = Variable._execution_engine.run_backward  # what torch.autograd.grad calls after its checks


def engine_call(fn, args, targets, grad_outs):
    """fn(*args), then the gradients of `targets` from the engine itself (no accumulation, as autograd.grad)."""

    def call():
        outputs = as_tuple(fn(*args))
        return outputs, run_backward(outputs, tuple(grad_outs), False, False, tuple(targets), True, False)

    return call


kernel, how = bench.load_kernel(None)
calls = {}  # (case, impl, path) -> (call, grad mode)
for op, module in bench.case_modules().items():
    for case in module.cases():
        if not case.host:
            continue
        torch.manual_seed(0)
        inputs = case.make(torch.bfloat16, torch.device("cuda"))
        targets = [inputs[n] for n in case.grads if inputs.get(n) is not None]
        for t in targets:
            t.requires_grad_(True)
        impls = case.impls(kernel, inputs)
        for impl in IMPLS:
            if impl not in impls:
                continue
            fn, args = impls[impl]
            grad_outs = [torch.randn_like(o) for o in as_tuple(fn(*args))]
            name = f"{op} {case.variant} {case.name}"
            grad_call, direct = training_call(fn, args, targets, grad_outs), engine_call(fn, args, targets, grad_outs)
            same = all(torch.equal(a, b) for a, b in zip(grad_call()[1], direct()[1], strict=True))
            if not same:
                print(f"{name} {impl}: the two paths' gradients differ")
            calls[(name, impl, "autograd.grad")] = (grad_call, True)
            calls[(name, impl, "engine")] = (direct, True)

times, waited = host_rounds(calls, ROUNDS, CALLS, WARMUP, shuffled(calls))
print(f"host time per forward+backward call, us: median of {ROUNDS} interleaved rounds of {CALLS} (kernel: {how})")
print(f"{'case':48s} {'impl':10s} {'autograd.grad':>13s} {'engine':>7s} {'difference':>10s}")
for name, impl, path in calls:
    if path != "engine":
        continue
    g, e = (statistics.median(times[(name, impl, p)]) for p in ("autograd.grad", "engine"))
    busy = "  (GPU-bound?)" if max(waited[(name, impl, p)] for p in ("autograd.grad", "engine")) > 0.1 else ""
    print(f"{name:48s} {impl:10s} {g:13.1f} {e:7.1f} {g - e:10.1f}{busy}")
