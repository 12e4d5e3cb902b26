"""bench.py's three times, measured apart and never mixed (bench.py's docstring says what each one means).

- GpuTimer: GPU time, the device time of the kernels, memsets and memcpys that one call launches, with a cold L2.
  torch.profiler (CPU and CUDA activities) records GPU_CALLS calls of each implementation of a case in one profile,
  interleaved (one call of each per round, so that all see the GPU in the same states: GpuTimer.each); before each
  call, outside any range, a spin kernel of about a millisecond, then a 256 MB write (the L2 flush; see GpuTimer.flush
  for the spin); each call runs inside its own record_function range. A GPU activity belongs to the CPU op that
  launched it (its linked correlation id: the innermost op on the launching thread, as torch's own
  FunctionEvent.kernels are built) and that op to the call whose range holds the op's start on the CPU clock. So the
  flush never counts, and the backward's ops, which autograd runs on its own thread, count for their call. A GPU
  activity whose op is not in the trace or in no range (launched where no op was open: a CUDA graph's replay, a kernel
  launched straight through the driver) belongs to the call whose range holds the start of its launch, the runtime or
  driver call with the same correlation id. A call's GPU time is the sum of its activities' durations; the median over
  an implementation's calls is reported. GPU activities with neither an op nor a launch in the trace would be missed:
  their count is reported (gpu_method "profiler; N of M ..."). Without a usable profiler: one call captured in a CUDA
  graph, CUDA events around each replay, flush before each. report.py marks a GPU time that beats the spec bandwidth
  (without one, the measured copy bandwidth by 15%) SUSPECT instead of comparing it; that copy is never timed in a
  graph (see copy_bandwidth).
- EagerTimer: eager-call time, what an eager model sees: triton.testing.do_bench's median (L2 cleared before
  every call), host overhead included when the host is slower than the GPU.
- host_us: host time per call of each of a case's implementations, wall time (time.perf_counter) of many calls on
  a tiny case, synchronizing only at the end of each round, divided by the count; the implementations take turns
  round by round, so that drift over the case (clocks, other processes) favours none.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import torch
from cases._common import optional

FLUSH_BYTES = 256 * 2**20  # written before every timed call: more than any GPU's L2
# A spin before the flush, longer than any launcher's host time per call under the profiler (about 1 ms at the
# ~2 GHz of an H100 or H200): see GpuTimer.flush.
QUEUE_CYCLES = 2_000_000
GPU_CALLS = 30  # profiled calls per implementation (the GPU time is their median)
RANGE = "bench.py call "  # the record_function range of profiled call i is RANGE + str(i)
# GPU activities that are not work: the device-side copy of a record_function range, synchronizations.
NOT_WORK = {"gpu_user_annotation", "cuda_sync", "cuda_event", "cuda_profiler_range", "overhead"}
# CPU-side events that launch GPU work (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, ...): not ops.
LAUNCHES = {"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver"}
HOST_CALLS, HOST_ROUNDS, HOST_WARMUP = 2000, 10, 100  # host time: 10 rounds of 200 calls after 100, median round
GPU_BOUND = 0.1  # a round whose final synchronize waited longer than this share of it was not host-bound


class EagerTimer:
    """Median milliseconds of fn with a cold L2: triton's do_bench when available, else the same loop by hand."""

    def __init__(self) -> None:
        self.do_bench = optional("triton.testing", "do_bench")
        self.flush = None
        if self.do_bench:
            self.method = "triton.testing.do_bench(fn, warmup=25, rep=100, return_mode='median'); L2 cleared per call"
        else:
            self.method = "CUDA events, 25 ms warm-up, 100 ms of calls, median; a 256 MB buffer written before each"

    def __call__(self, fn: Callable[[], Any]) -> float:
        if self.do_bench:
            return self.do_bench(fn, warmup=25, rep=100, return_mode="median")
        if self.flush is None:
            self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        fn()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(5):
            self.flush.zero_()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(begin.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(25 / estimate))):
            fn()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(max(1, int(100 / estimate)))
        ]
        for begin, end in events:
            self.flush.zero_()
            begin.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(b.elapsed_time(e) for b, e in events)


# --------------------------------------------------------------------------------------------------------------
# GPU time
# --------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Event:
    """What the attribution needs of one profiler event (torch's _KinetoEvent)."""

    name: str
    on_device: bool  # a GPU activity (kernel, memset, memcpy, annotation); else a CPU event
    start_ns: int
    end_ns: int
    id: int  # correlation id: of a CPU op, the id its GPU activities link to
    linked: int  # of a GPU activity (or a runtime call such as cudaLaunchKernel): the launching op's id; else 0
    kind: str | None = None  # the activity type ("kernel", "gpu_memset", ...) where torch reports it
    annotation: bool = False  # a user annotation (record_function range) or its GPU-side copy


def _method(event: Any, name: str, default: Any = None) -> Any:
    method = getattr(event, name, None)
    return method() if callable(method) else default


def kineto_events(prof: Any) -> list[Event]:
    """The events of a finished torch.profiler.profile, read from its kineto results (torch 2.x)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    found = []
    for e in results.events() if results is not None else []:
        device = e.device_type()
        device = getattr(device, "name", str(device).rsplit(".", 1)[-1])
        start = _method(e, "start_ns")
        start = start if start is not None else 1000 * e.start_us()
        end = _method(e, "end_ns")
        end = end if end is not None else start + 1000 * e.duration_us()
        kind = _method(e, "activity_type")
        found.append(
            Event(
                name=e.name(),
                on_device=device != "CPU",
                start_ns=start,
                end_ns=end,
                id=e.correlation_id(),
                linked=e.linked_correlation_id(),
                kind=kind or None,
                annotation=bool(_method(e, "is_user_annotation", False)),
            )
        )
    return found


def is_launch(event: Event) -> bool:
    """A runtime or driver call (cudaLaunchKernel, ...): linked to the op that made it, or of a launch kind."""
    return not event.on_device and (bool(event.linked) or event.kind in LAUNCHES)


def range_at(ranges: list[tuple[int, int]], starts: list[int], ns: int) -> int | None:
    """The index of the range (sorted by start, not overlapping) that holds the time ns, or None."""
    index = bisect.bisect_right(starts, ns) - 1
    return index if index >= 0 and ns <= ranges[index][1] else None


def calls_of_ops(events: list[Event], prefix: str = RANGE) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """The ranges named prefix + i on the CPU, by start, and {CPU op id: index of the range holding its start}: ops
    of any thread (the backward runs on autograd's), ops outside every range (the flush) left out."""
    ranges = sorted((e.start_ns, e.end_ns) for e in events if not e.on_device and e.name.startswith(prefix))
    starts = [start for start, _ in ranges]
    owner = {}
    for e in events:
        if e.on_device or is_launch(e):  # GPU activities, and runtime calls: not ops
            continue
        index = range_at(ranges, starts, e.start_ns)
        if index is not None:
            owner[e.id] = index
    return ranges, owner


def is_work(event: Event, prefix: str = RANGE) -> bool:
    """A GPU activity that is device work: kernels, memsets, memcpys (not a range's GPU-side copy, not a sync)."""
    return event.on_device and event.kind not in NOT_WORK and not event.annotation and not event.name.startswith(prefix)


def calls_of_work(events: list[Event], prefix: str = RANGE) -> tuple[int, list[tuple[Event, int | None]]]:
    """(the number of ranges, [(GPU work activity, index of its call or None)]): the call of the op it is linked
    to; else (its op in no range or not in the trace) the call whose range holds the start of its launch."""
    ranges, owner = calls_of_ops(events, prefix)
    starts = [start for start, _ in ranges]
    launched = {e.id: e.start_ns for e in events if is_launch(e)}  # by correlation id, shared with the activity
    found = []
    for e in events:
        if not is_work(e, prefix):
            continue
        index = owner.get(e.linked) if e.linked else None
        if index is None and e.id in launched:
            index = range_at(ranges, starts, launched[e.id])
        found.append((e, index))
    return len(ranges), found


def device_us_per_call(events: Iterable[Event], prefix: str = RANGE) -> list[float]:
    """Per range named prefix + i, in order: the summed µs of the GPU work launched in it (by the ops that started
    in it, on any thread, or by launches outside any op)."""
    count, work = calls_of_work(list(events), prefix)
    totals = [0.0] * count
    for e, index in work:
        if index is not None:
            totals[index] += (e.end_ns - e.start_ns) / 1e3
    return totals


def unlinked(events: list[Event], prefix: str = RANGE) -> tuple[int, int]:
    """(GPU work activities with neither a CPU op nor a launch in the trace, all GPU work activities): the first
    should be 0; the flush's activities are linked (to its op, outside every range)."""
    ops = {e.id for e in events if not e.on_device and not is_launch(e)}
    launches = {e.id for e in events if is_launch(e)}
    work = [e for e in events if is_work(e, prefix)]
    return sum(e.linked not in ops and e.id not in launches for e in work), len(work)


@contextlib.contextmanager
def quiet_stderr(said: list[str]):
    """File descriptor 2 into a temporary file meanwhile (kineto logs every profiler session there), its text
    appended to `said` at the end."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.append(sink.read().decode(errors="replace"))


def profiler_available() -> bool:
    try:
        from torch.profiler import ProfilerActivity, supported_activities

        return ProfilerActivity.CUDA in supported_activities()
    except Exception:
        return False


class GpuTimer:
    """GPU time of one call in µs (this module's docstring says how), and how it was measured."""

    def __init__(self, use_profiler: bool = True) -> None:
        self.use_profiler = use_profiler and profiler_available()
        self.buffer: torch.Tensor | None = None
        graph = (
            "one call captured in a CUDA graph, CUDA events around each replay, median of 30; L2 flushed before each"
        )
        self.method = (
            f"torch.profiler: the summed device time of the kernels, memsets and memcpys each call launches, median of "
            f"{GPU_CALLS} calls, L2 flushed (a 256 MB write behind a ~1 ms spin) before each; else {graph}"
            if self.use_profiler
            else graph
        )

    def flush(self) -> None:
        """The L2 flush before a timed call, behind a spin kernel: the call's kernels are launched while the GPU
        still spins or writes and wait in the stream, whatever the launcher's host time. Without the spin, where they
        were launched (while the write ran, or after it) depended on that host time, and so did their GPU time: on
        an H100, an RMSNorm of 32 rows of 4096 took 2.08 µs launched without the spin and 1.70 µs behind it, Liger's
        2.08 and 1.74, torch.compile's (a slower launcher) 1.76 and 1.79 (the template's docs/benchmarks.md,
        "2026-12-07 (flush)"). The spin does not settle everything: the same kernels' GPU times still fell in a
        faster or a slower state, every implementation alike (Liger as much as ours), the fast one only within a
        bench.py case that compiles with torch.compile, for a reason not yet isolated ("2026-12-07 (state)" and
        "(interleaved)"); so `each` times a case's implementations in one profile, all in the same state."""
        if self.buffer is None:
            self.buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        spin = getattr(torch.cuda, "_sleep", None)
        if spin is not None:
            spin(QUEUE_CYCLES)
        self.buffer.zero_()

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, str]:
        """(µs, how) of one fn, as `each` measures it; raises what timing it raised."""
        (found,) = self.each([fn])
        if isinstance(found, Exception):
            raise found
        return found

    def each(self, fns: list[Callable[[], Any]]) -> list[tuple[float, str] | Exception]:
        """Per fn: (µs, how: "profiler", with what it could not attribute if anything, or "cuda graph"), or the
        exception that timing it raised (e.g. a call that cannot be captured where the profiler does not work).
        Under the profiler the fns' calls take turns in one profile (see profiled), so every implementation of a
        case meets the GPU in the same states: timed one after another, the implementations of one case could meet
        different states, in which the same kernel's GPU time differed by a quarter to a half (the template's
        docs/benchmarks.md, "2026-12-07 (state)" and "(interleaved)").
        Where the joint profile raises, each fn is timed alone."""
        if not fns:
            return []
        found: list[tuple[float, str] | Exception | None] = [None] * len(fns)
        why = ""
        if self.use_profiler:
            said: list[str] = []
            try:
                with quiet_stderr(said):
                    medians, lost, total = self.profiled(fns)
            except Exception as error:
                if len(fns) > 1:  # one of them raised: find which, timing each alone
                    return [self.each([fn])[0] for fn in fns]
                if not isinstance(error, RuntimeError):  # RuntimeError: e.g. another profiler is active; fall back
                    return [error]
                medians, lost, total = [None], 0, 0
                said.append(f"{error}\n")
            if total == 0:  # the profiler records no GPU activity here (no CUPTI): say why, stop asking it
                sys.stderr.write(
                    "".join(said) + "bench.py: torch.profiler saw no GPU activity: GPU times from CUDA graphs\n"
                )
                self.use_profiler = False
            how = f"profiler; {lost} of {total} GPU activities linked to no op" if lost else "profiler"
            found = [(us, how) if us is not None else None for us in medians]
            if total:
                why = f" (the profiler found a call without GPU work; {lost} of {total} activities linked to no op)"
        for index, fn in enumerate(fns):
            if found[index] is None:
                try:
                    found[index] = (self.graph(fn), "cuda graph" + why)
                except Exception as error:
                    found[index] = error
        return found

    def profiled(self, fns: list[Callable[[], Any]], calls: int = GPU_CALLS) -> tuple[list[float | None], int, int]:
        """(per fn, the median of its `calls` profiled calls (see trace), or None when the profiler saw no GPU work
        in one of them; the GPU work activities linked to no op, all GPU work activities)."""
        events, order = self.trace(fns, calls)
        per_call = device_us_per_call(events)
        lost, total = unlinked(events)
        if len(per_call) != len(order):
            return [None] * len(fns), lost, total
        mine = [[us for us, which in zip(per_call, order) if which == fn] for fn in range(len(fns))]
        return [statistics.median(us) if min(us) > 0 else None for us in mine], lost, total

    def trace(self, fns: list[Callable[[], Any]], calls: int = GPU_CALLS) -> tuple[list[Event], list[int]]:
        """(the events of one profile, the index of the fn that made each profiled call): `calls` rounds, one call
        of each fn per round, each after a flush in its own range (RANGE + its index), after one unprofiled call of
        each; round r starts with fn r (mod their number), so that none is always first or always after the same
        one."""
        from torch.profiler import ProfilerActivity, profile, record_function

        order = [(r + j) % len(fns) for r in range(calls) for j in range(len(fns))]
        for fn in fns:
            self.flush()
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for index, which in enumerate(order):
                self.flush()  # outside the ranges: its kernel belongs to no call
                with record_function(f"{RANGE}{index}"):
                    fns[which]()
            torch.cuda.synchronize()
        return kineto_events(prof), order

    def events(self, fn: Callable[[], Any], calls: int = GPU_CALLS) -> float:
        """CUDA events around each of `calls` eager calls, each after a flush; the median (launch latency included:
        for long copies only, see copy_bandwidth)."""
        fn()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for begin, end in events:
            self.flush()
            begin.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(b.elapsed_time(e) for b, e in events)

    def graph(self, fn: Callable[[], Any], calls: int = GPU_CALLS) -> float:
        """One call captured in a CUDA graph; the median of CUDA events around `calls` replays, each after a flush."""
        graph = capture(fn)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for begin, end in events:
            self.flush()
            begin.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(b.elapsed_time(e) for b, e in events)


def capture(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    """One call of fn captured in a CUDA graph, after three calls on a side stream (the warm-up torch.cuda.graphs
    recommends)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def copy_bandwidth(gpu_timer: GpuTimer, eager_timer: EagerTimer) -> float:
    """GB/s of a large device-to-device torch copy (bytes read plus bytes written): its device time under the
    profiler when the cases' GPU times come from it, else CUDA events around eager calls (GpuTimer.events; its
    eager-call time if that fails). Never a CUDA graph's replay: captured, the copy becomes a graph memcpy node,
    which ran far below what kernels move (H200: 2756.9 GB/s, where the profiler saw 4225-4254; H100: 2427.1,
    where the kernel lab's events around a 1 GiB cudaMemcpyAsync saw 3005), so that kernels at copy speed were
    marked SUSPECT."""
    size = min(2**30, torch.cuda.mem_get_info()[0] // 8)
    src = torch.randn(size // 4, device="cuda")
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    try:
        us, how = gpu_timer(copy) if gpu_timer.use_profiler else (0.0, "")
        if not how.startswith("profiler"):
            us = gpu_timer.events(copy)
    except Exception:
        us = 1e3 * eager_timer(copy)
    return 2 * src.numel() * src.element_size() / us / 1e3


# --------------------------------------------------------------------------------------------------------------
# Host time
# --------------------------------------------------------------------------------------------------------------
def host_us(
    fns: Sequence[Callable[[], Any]],
    calls: int = HOST_CALLS,
    rounds: int = HOST_ROUNDS,
    warmup: int = HOST_WARMUP,
    synchronize: Callable[[], Any] = torch.cuda.synchronize,
    clock: Callable[[], float] = time.perf_counter,
) -> list[tuple[float, float] | Exception]:
    """Per fn, (µs per call, the largest share of a round spent waiting in its final synchronize), or the exception
    it raised (it then leaves the rounds): `warmup` calls of each, then `rounds` rounds in which every fn runs
    calls // rounds calls in turn (round r starts at fn r, so each fn takes every place in the order); a round's wall
    time (its final synchronize included) divided by its calls, the median round. The garbage collector is paused
    meanwhile. A share above GPU_BOUND means the GPU, not the host, set the pace: then the time is not host time."""
    per_round = max(1, calls // rounds)
    failed: list[Exception | None] = [None for _ in fns]
    times: list[list[float]] = [[] for _ in fns]
    waited = [0.0 for _ in fns]
    for i, fn in enumerate(fns):
        try:
            for _ in range(warmup):
                fn()
            synchronize()
        except Exception as error:
            failed[i] = error
    collecting = gc.isenabled()
    gc.disable()
    try:
        for round_ in range(rounds):
            for k in range(len(fns)):
                i = (round_ + k) % len(fns)
                if failed[i] is not None:
                    continue
                start = clock()
                try:
                    for _ in range(per_round):
                        fns[i]()
                    issued = clock()
                    synchronize()
                except Exception as error:
                    failed[i] = error
                    continue
                end = clock()
                times[i].append((end - start) / per_round)
                waited[i] = max(waited[i], (end - issued) / (end - start) if end > start else 0.0)
    finally:
        if collecting:
            gc.enable()
    return [e if e is not None else (1e6 * statistics.median(t), w) for e, t, w in zip(failed, times, waited)]
