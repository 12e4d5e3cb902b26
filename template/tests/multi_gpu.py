"""Checks for the ops' device and stream cases (each op's test file has its own, marked `multi_gpu`): an op called
on tensors of the second GPU while the first is current must run on the tensors' GPU, allocate nothing on the
current one, leave it current, and give the bits it gives on the first GPU (two GPUs needed: skipped, with the
reason, on fewer); on a side stream it must run on that stream, and it must capture into a CUDA graph and replay.
Those two run on the second GPU, the first current, or on the only GPU of a one-GPU machine.

Each check takes `fn` (the op with its non-tensor arguments bound, returning a tensor or a tuple of tensors),
`inputs` (fresh random CPU tensors, copied to each GPU from the host: a copy from one GPU to the other would
enable peer access, and a kernel launched on the wrong GPU could then read the other's memory unnoticed) and
`requires_grad` (per input: whether the backward computes its gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

GPUS = torch.cuda.device_count()
NEEDS_TWO = f"needs 2 CUDA GPUs, this machine has {GPUS}"


def two_gpus(test):
    """Marks a test `multi_gpu` (`python -m pytest tests -m multi_gpu` runs these alone) and skips it, saying why,
    on a machine with fewer than 2 GPUs."""
    return pytest.mark.multi_gpu(pytest.mark.skipif(GPUS < 2, reason=NEEDS_TWO)(test))


FIRST = torch.device("cuda", 0)
SECOND = torch.device("cuda", 1)
TARGET = SECOND if GPUS >= 2 else FIRST  # where the stream and graph checks run; FIRST is current meanwhile
# A kernel that spins for this many clock cycles (~70 ms at 2 GHz) runs before a side stream writes the inputs: an
# op launched on any other stream would read them before they are written.
SLEEP_CYCLES = 2**27

Op = Callable[..., "torch.Tensor | tuple[torch.Tensor, ...]"]


def randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Fresh random CPU data (drawn in fp32, then rounded: any dtype)."""
    return torch.randn(shape).to(dtype)


def _tuple(outputs) -> tuple[torch.Tensor, ...]:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def _leaves(tensors: Sequence[torch.Tensor], requires_grad: Sequence[bool]) -> list[torch.Tensor]:
    return [t for t, g in zip(tensors, requires_grad) if g]


def _seeds(outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Random gradients for the outputs, on the host."""
    return [randn(*o.shape, dtype=o.dtype) for o in outputs]


def _run(fn: Op, inputs, requires_grad, device: torch.device, seeds=None):
    """fn on copies of `inputs` on `device`, and the gradients of its outputs for `seeds` (host tensors)."""
    tensors = [t.to(device).requires_grad_(g) for t, g in zip(inputs, requires_grad)]
    outputs = _tuple(fn(*tensors))
    leaves = _leaves(tensors, requires_grad)
    grads = ()
    if leaves:
        grads = torch.autograd.grad(outputs, leaves, [s.to(device) for s in seeds or _seeds(outputs)])
    return [o.detach() for o in outputs], list(grads)


def _assert_same_bits(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], device: torch.device) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device == device, f"a result is on {a.device}, not on the inputs' {device}"
        torch.testing.assert_close(a.cpu(), e.cpu(), rtol=0, atol=0)  # NaN fails too


def assert_same_on_second_gpu(fn: Op, inputs: Sequence[torch.Tensor], requires_grad: Sequence[bool]) -> None:
    """Forward and backward on the second GPU while the first is current: the first GPU's bits, on the second GPU,
    nothing allocated on the first, and the first still current afterwards."""
    with torch.cuda.device(FIRST):
        outputs, _ = _run(fn, inputs, [False] * len(inputs), FIRST)
        seeds = _seeds(outputs)
        expected = _run(fn, inputs, requires_grad, FIRST, seeds)
        torch.cuda.synchronize(FIRST)
        torch.cuda.reset_peak_memory_stats(FIRST)
        before = torch.cuda.memory_allocated(FIRST)
        actual = _run(fn, inputs, requires_grad, SECOND, seeds)
        assert torch.cuda.current_device() == 0, "the op changed the current device"
        torch.cuda.synchronize(SECOND)
        peak = torch.cuda.max_memory_allocated(FIRST)
    assert peak == before, f"the op allocated {peak - before} bytes on cuda:0 for tensors on cuda:1"
    _assert_same_bits(actual[0] + actual[1], expected[0] + expected[1], SECOND)


def assert_on_current_stream(fn: Op, inputs: Sequence[torch.Tensor], requires_grad: Sequence[bool]) -> None:
    """Forward and backward on TARGET with a side stream current there, and the first GPU current: a long kernel on
    the side stream, then the inputs (and the output gradients) written on it, then the op. Launched on any other
    stream, or GPU, the op would read them unwritten (or fail)."""
    with torch.cuda.device(FIRST):
        outputs, _ = _run(fn, inputs, [False] * len(inputs), FIRST)
        seeds = _seeds(outputs)
        expected = _run(fn, inputs, requires_grad, FIRST, seeds)
    side = torch.cuda.Stream(device=TARGET)
    sources = [t.to(TARGET) for t in list(inputs) + seeds]
    stale = [torch.randn_like(s, dtype=torch.float32).to(s.dtype) for s in sources]  # other values: must be overwritten
    side.wait_stream(torch.cuda.current_stream(TARGET))
    with torch.cuda.stream(side):  # makes TARGET current, with `side` its current stream
        torch.cuda._sleep(SLEEP_CYCLES)
        tensors = [t.copy_(s) for t, s in zip(stale[: len(inputs)], sources)]
        with torch.cuda.device(FIRST):  # cuda:0 current again; TARGET's current stream is still `side`
            assert torch.cuda.current_stream(TARGET) == side
            tensors = [t.requires_grad_(g) for t, g in zip(tensors, requires_grad)]
            outputs = _tuple(fn(*tensors))
            grads = []
            if any(requires_grad):
                with torch.cuda.device(TARGET):
                    torch.cuda._sleep(SLEEP_CYCLES)  # on `side`, before the output gradients are written
                    seed_tensors = [t.copy_(s) for t, s in zip(stale[len(inputs) :], sources[len(inputs) :])]
                grads = list(torch.autograd.grad(outputs, _leaves(tensors, requires_grad), seed_tensors))
            assert torch.cuda.current_device() == 0, "the op changed the current device"
            assert torch.cuda.current_stream(TARGET) == side, "the op changed the current stream of its GPU"
    side.synchronize()
    _assert_same_bits([o.detach() for o in outputs] + grads, expected[0] + expected[1], TARGET)


def assert_graph_replays(fn: Op, inputs: Sequence[torch.Tensor], requires_grad: Sequence[bool]) -> None:
    """Forward and backward captured into a CUDA graph on TARGET (the first GPU current outside the capture),
    replayed on new inputs: the bits of the eager call on those inputs."""
    static = [t.to(TARGET).requires_grad_(g) for t, g in zip(inputs, requires_grad)]
    leaves = _leaves(static, requires_grad)
    outputs, _ = _run(fn, inputs, [False] * len(inputs), TARGET)
    seeds = _seeds(outputs)
    static_seeds = [s.to(TARGET) for s in seeds]
    stream = torch.cuda.Stream(device=TARGET)

    def step():
        outputs = _tuple(fn(*static))
        grads = torch.autograd.grad(outputs, leaves, static_seeds) if leaves else ()
        return [o.detach() for o in outputs] + list(grads)

    with torch.cuda.device(FIRST):
        stream.wait_stream(torch.cuda.current_stream(TARGET))
        with torch.cuda.stream(stream):  # warm-up outside the capture (first calls may set kernel attributes)
            step()
        torch.cuda.synchronize(TARGET)
        graph = torch.cuda.CUDAGraph()
        # its own stream: torch.cuda.graph's default one is made once, on the GPU current at its first use
        with torch.cuda.graph(graph, stream=stream):
            captured = step()
        assert torch.cuda.current_device() == 0
        fresh = [randn(*t.shape, dtype=t.dtype) for t in inputs]
        fresh_seeds = [randn(*s.shape, dtype=s.dtype) for s in seeds]
        with torch.no_grad():
            for t, f in zip(static + static_seeds, fresh + fresh_seeds):
                t.copy_(f)
        given = {t.untyped_storage().data_ptr() for t in static + static_seeds}
        with torch.cuda.device(TARGET):  # TARGET's current stream, for the poison and the replay alike
            for t in captured:  # the replay must write every element of every result it computes
                if t.untyped_storage().data_ptr() not in given:  # (a gradient may be an output gradient itself)
                    t.fill_(float("nan"))
            graph.replay()
        torch.cuda.synchronize(TARGET)
        expected = _run(fn, fresh, requires_grad, TARGET, fresh_seeds)
    _assert_same_bits(captured, expected[0] + expected[1], TARGET)


MULTI_GPU_CHECKS = [
    pytest.param(assert_same_on_second_gpu, id="same_bits", marks=pytest.mark.skipif(GPUS < 2, reason=NEEDS_TWO)),
    pytest.param(assert_on_current_stream, id="side_stream"),
    pytest.param(assert_graph_replays, id="cuda_graph"),
]
