"""Where bench.py's GPU time of an RMSNorm forward at decode sizes parted from the same timer's outside bench.py.

On an H100 (docs/benchmarks.md, "2026-12-07 (flush)"), bench.py timed ours at 32 rows of 4096 at 2.16 µs (0.81x of
Liger), while a standalone script with bench.py's own GpuTimer and EagerTimer, on the same machine and build, timed
the same op at 1.70-1.73 µs (level with Liger). This runs both in one process: bench.py's run_case for
qwen3-8b.hidden.32x4096 and .512x4096; the same GpuTimer on that case's inputs (ours also on fresh ones, F.rms_norm,
Liger), before and after a do_bench; run_case again, in bench.py's order (ours first) and reversed; then run_case
behind each spin of SPINS. Beside each GPU time: the SM clock during the spin (its cycles / its duration) and the
launch lead (from a kernel's launch on the CPU to its start on the GPU), and outside run_case the gap (how long the
GPU idled between the end of the flush and the call's first kernel). The findings: "2026-12-07 (state)".
Template developers' tool (not part of generated projects):

    LOCAL_KERNELS=my-org/ltx-kernels=PROJECT python3 bench_bisect.py PROJECT [OPTION ...]

Options: `copy`, measure the copy bandwidth first, as bench.py does, which allocates two 1 GiB tensors; `rich`, keep
a rich progress bar refreshing meanwhile, as bench.py does when rich is installed; `import`, load the package by
import, not through kernels.get_kernel; `sweep`, only run_case with each spin of SPINS; `keep-cache`, bench.py's
poisoned output blocks without the torch.cuda.empty_cache() before them; `no-compile`, run_case without
torch.compile; `sequential`, run_case's GPU times one implementation after another, one profile each, as bench.py
took them before GpuTimer.each interleaved them (one call of each per round, in one profile); `dynamo-reset` and
`compile-object`, run_case without torch.compile but with one piece of what measure does for it before ours is
timed: torch._dynamo.reset(), or a torch.compile'd function made and never called; `graph`, also each
implementation's CUDA-graph replay time (GpuTimer.graph: CUDA events around a replay after the flush) beside every
GPU time from GpuTimer.each, to tell whether a state is the profiler's or the GPU's. After each run_case
it lists the processes that hold the GPU (nvidia-smi), and outside run_case it also times the implementations
interleaved.
"""

import contextlib
import functools
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F

EPS = 1e-6
SHAPES = ["hidden.32x4096", "hidden.512x4096"]
SPINS = [2_000_000, 4_000_000, 10_000_000, 20_000_000, 2_000_000]  # ~1, 2, 5, 10 and 1 ms at ~1.98 GHz


SEEN: list[tuple[float, float]] = []  # (spin MHz, launch lead µs) of every GpuTimer profile since the last times()
GRAPHED: list[float] = []  # with `graph`: the CUDA-graph replay µs (GpuTimer.graph) of each fn each() timed, in order


def graphed(timer, fn) -> float:
    try:
        return timer.graph(fn)
    except Exception:  # a call that cannot be captured
        return float("nan")


def times(rows: list[dict]) -> str:
    """Each row's GPU time, with the spin's clock and the launch lead of its profile (one per row when timed one
    after another; one for all when interleaved)."""
    seen, interleaved = SEEN[-len(rows) :], len(SEEN) == 1 < len(rows)
    SEEN.clear()
    graphs = "  graph: " + "  ".join(f"{r['impl']} {us:.2f}" for r, us in zip(rows, GRAPHED, strict=False))
    graphs = graphs if GRAPHED else ""
    GRAPHED.clear()
    if interleaved:
        mhz, lead = seen[0]
        found = "  ".join(f"{r['impl']} {r['gpu_us'] or 0:.2f}" for r in rows)
        return f"{found} (one profile: {mhz:.0f} MHz, lead {lead:.0f}){graphs}"
    found = "  ".join(
        f"{r['impl']} {r['gpu_us'] or 0:.2f} ({mhz:.0f} MHz, lead {lead:.0f})"
        for r, (mhz, lead) in zip(rows, seen, strict=False)
    )
    return found + graphs


def lead_us(timing, events) -> float:
    """The median time from a call's kernel launch on the CPU to the kernel's start on the GPU: how far ahead of
    the GPU the host was (about the spin's length or more: queued; little: launched just in time)."""
    launched = {e.id: e.start_ns for e in events if timing.is_launch(e)}
    _, work = timing.calls_of_work(events)
    leads = [(e.start_ns - launched[e.id]) / 1e3 for e, index in work if index is not None and e.id in launched]
    return statistics.median(leads) if leads else float("nan")


def spin_mhz(timing, events) -> float:
    spins = [e.end_ns - e.start_ns for e in events if e.on_device and "spin" in e.name.lower()]
    return 1e3 * timing.QUEUE_CYCLES / statistics.median(spins) if spins else float("nan")


def timed(timing, timer, fn) -> tuple[float, float, float, float]:
    """(median GPU µs per call as GpuTimer counts it, median µs the GPU idled between the flush's end and the
    call's first kernel, the SM clock in MHz during the flush's spin: its cycles / its duration, lead_us), from one
    profile of fn's calls, each after timer.flush() (GpuTimer.trace)."""
    events, _ = timer.trace([fn])
    count, work = timing.calls_of_work(events)
    flush_ends = sorted(e.end_ns for e, index in work if index is None)  # the spins and memsets: in no call
    first, total = {}, [0.0] * count
    for e, index in work:
        if index is not None:
            first[index] = min(first.get(index, e.start_ns), e.start_ns)
            total[index] += (e.end_ns - e.start_ns) / 1e3
    gaps = []
    for start in first.values():
        before = [end for end in flush_ends if end <= start]
        gaps.append((start - before[-1]) / 1e3 if before else float("nan"))
    mhz = spin_mhz(timing, [e for e, _ in work])
    return statistics.median(total), statistics.median(gaps), mhz, lead_us(timing, events)


def main() -> None:
    project = sys.argv[1]
    sys.path.insert(0, f"{project}/benchmarks")
    import bench  # the project's own, with its timing.py and cases
    import timing

    if "import" in sys.argv[2:]:  # the package itself, not through kernels.get_kernel (one load per process)
        sys.path.insert(0, f"{project}/torch-ext")
        kernel, loaded = __import__(bench.PACKAGE), f"import {bench.PACKAGE}"
    else:
        kernel, loaded = bench.load_kernel(None)
    eager_timer, gpu_timer = bench.EagerTimer(), bench.GpuTimer()
    per_call = timing.device_us_per_call

    def spying(events, *args):  # GpuTimer.profiled's attribution, also noting the spin's clock
        events = list(events)
        SEEN.append((spin_mhz(timing, events), lead_us(timing, events)))
        return per_call(events, *args)

    timing.device_us_per_call = spying
    copy = "copy" in sys.argv[2:]
    progress = contextlib.nullcontext()
    if "rich" in sys.argv[2:]:
        from rich.progress import Progress

        progress = Progress()
        progress.add_task("bisect", total=None)
    if "keep-cache" in sys.argv[2:]:
        bench.poison = keep_cache_poison
    measure = bench.measure
    if "dynamo-reset" in sys.argv[2:] or "compile-object" in sys.argv[2:]:  # a piece of measure's torch.compile only

        def measure_with(case, dtype_name, mode, ctx):
            if "dynamo-reset" in sys.argv[2:]:
                torch._dynamo.reset()
            compiled = torch.compile(lambda x: x * 2, dynamic=False) if "compile-object" in sys.argv[2:] else None
            del compiled  # made, never called, as measure's is until its implementation's turn comes
            return measure(case, dtype_name, mode, ctx)

        bench.measure = measure_with
    if "sequential" in sys.argv[2:]:  # run_case as before GpuTimer.each: one profile per implementation, in turn
        each = gpu_timer.each
        gpu_timer.each = lambda fns: [found for fn in fns for found in each([fn])]
    if "graph" in sys.argv[2:]:  # after each GPU time in run_case, each fn's CUDA-graph replay time too
        profiled_each = gpu_timer.each

        def each_and_graph(fns):
            found = profiled_each(fns)
            GRAPHED.extend(graphed(gpu_timer, fn) for fn in fns)
            return found

        gpu_timer.each = each_and_graph
    ctx = bench.Context(
        kernel=kernel,
        eager_timer=eager_timer,
        gpu_timer=gpu_timer,
        compile=not {"no-compile", "dynamo-reset", "compile-object"} & set(sys.argv[2:]),
        copy_gbs=bench.copy_bandwidth(gpu_timer, eager_timer) if copy else 3000.0,
        spec_gbs=None,
        note=print,
        status=lambda text: None,
    )
    GRAPHED.clear()  # (the copy bandwidth's own GpuTimer call, with `copy graph`)
    print(torch.cuda.get_device_name(), loaded, " ".join(sys.argv[2:]), flush=True)
    with progress:
        for case in bench.select_cases(["rmsnorm"], SHAPES, False):
            if case.variant != "weight":
                continue
            if "sweep" not in sys.argv[2:]:
                run_case(bench, case, ctx, "run_case")
                alone(bench, timing, case, kernel, eager_timer, gpu_timer)
                run_case(bench, case, ctx, "run_case again")
                order = bench.impl_order
                bench.impl_order = lambda order=order: list(reversed(order()))  # ours last: after torch.compile's
                run_case(bench, case, ctx, "run_case, reversed")
                bench.impl_order = order
            cycles = timing.QUEUE_CYCLES
            for spin in SPINS:
                timing.QUEUE_CYCLES = spin
                run_case(bench, case, ctx, f"run_case, spin of {spin} cycles")
            timing.QUEUE_CYCLES = cycles


def run_case(bench, case, ctx, label: str) -> None:
    print(case.label, f"{label}:", times(bench.run_case(case, "bf16", "forward", ctx)), flush=True)
    apps = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print("  processes on the GPU:", "; ".join(apps.splitlines()) or "none listed", flush=True)


def keep_cache_poison(shapes, device) -> None:
    """checks.poison without its torch.cuda.empty_cache(): NaN blocks from the allocator's cached blocks."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        blocks = [torch.full(shape, float("nan"), dtype=dtype, device=device) for shape, dtype in shapes]
        del blocks


def alone(bench, timing, case, kernel, eager_timer, gpu_timer) -> None:
    """The case's implementations timed outside run_case (ours also on fresh inputs), before and after a do_bench."""
    t = case.make(torch.bfloat16, torch.device("cuda"))
    x, w = t["x"], t["weight"]
    fresh = torch.randn(x.shape, device="cuda").bfloat16()
    liger = bench.optional("liger_kernel.transformers.functional")
    impls = {
        "ours": functools.partial(kernel.rms_norm, x, w, EPS),
        "ours, fresh x": functools.partial(kernel.rms_norm, fresh, w, EPS),
        "F.rms_norm": functools.partial(F.rms_norm, x, (x.shape[-1],), w, EPS),
    }
    if liger:
        impls["liger"] = functools.partial(liger.liger_rms_norm, x, w, EPS, in_place=False)
    for label, fn in impls.items():
        us, gap, mhz, lead = timed(timing, gpu_timer, fn)
        eager_timer(fn)
        after, gap_after, mhz_after, lead_after = timed(timing, gpu_timer, fn)
        print(
            f" {label:14s} {us:.2f} (gap {gap:.1f}, {mhz:.0f} MHz, lead {lead:.0f}), after do_bench "
            f"{after:.2f} (gap {gap_after:.1f}, {mhz_after:.0f} MHz, lead {lead_after:.0f})",
            flush=True,
        )
    found = gpu_timer.each(list(impls.values()))
    if GRAPHED:
        print(" graph:", "  ".join(f"{name} {us:.2f}" for name, us in zip(impls, GRAPHED, strict=True)), flush=True)
        GRAPHED.clear()
    print(
        " interleaved:", "  ".join(f"{name} {us:.2f}" for name, (us, _) in zip(impls, found, strict=True)), flush=True
    )


if __name__ == "__main__":
    main()
