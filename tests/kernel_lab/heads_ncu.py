"""Per-head RMSNorm rows (Qwen3's q_norm and k_norm: rows of 128 bf16 elements) under ncu: ours, torch.compile of
Qwen3RMSNorm, F.rms_norm and a copy of the same bytes, each output checked against float64 first, then CALLS calls of
each, interleaved per shape, between cudaProfilerStart/Stop. Template developers' tool; from a built project root
with LOCAL_KERNELS set:

    ncu --csv --profile-from-start off --cache-control all --clock-control none --metrics METRICS \\
        python3 /path/to/tests/kernel_lab/heads_ncu.py > heads.csv
    python3 /path/to/tests/kernel_lab/heads_ncu.py --table heads.csv

METRICS: see METRICS below (launch configuration, time, DRAM throughput, achieved occupancy). Run with
TORCH_LOGS=output_code to keep the Triton source torch.compile generated (its rows per program and warps).
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict

SHAPES = [(128, 32), (128, 8), (1024, 32), (1024, 8), (8192, 32), (8192, 8), (32768, 1)]  # (tokens, heads) x 128
IMPLS = ("ours", "compile", "F.rms_norm", "copy")
CALLS = 5
EPS = 1e-6
UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
METRICS = ",".join(
    [
        "gpu__time_duration.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "launch__grid_size",
        "launch__block_size",
        "launch__registers_per_thread",
        "launch__occupancy_limit_registers",
        "smsp__cycles_active.avg.pct_of_peak_sustained_elapsed",
    ]
)


def table(path: str) -> None:
    """Medians per (shape, impl), in the order the probe ran them (every call launches one kernel)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    launches: dict[str, dict[str, str]] = defaultdict(dict)
    names: dict[str, str] = {}
    for row in csv.DictReader(lines):
        value = row["Metric Value"].replace(",", "")
        if row["Metric Name"] == "gpu__time_duration.sum":  # in µs, whatever unit ncu chose for it
            value = str(float(value) * UNITS_US[row["Metric Unit"]])
        launches[row["ID"]][row["Metric Name"]] = value
        names[row["ID"]] = row["Kernel Name"][:60]
    ids = sorted(launches, key=int)
    plan = [(s, impl) for s in SHAPES for _ in range(CALLS) for impl in IMPLS]
    if len(ids) != len(plan):
        print(f"{len(ids)} launches profiled, the plan has {len(plan)}: not one kernel per call")
        return
    rows = defaultdict(list)
    for launch_id, key in zip(ids, plan, strict=True):
        rows[key].append((launches[launch_id], names[launch_id]))
    head = ("shape", "impl", "us", "dram%", "warps%", "grid", "block", "regs")
    print("{:14s} {:10s} {:>6s} {:>6s} {:>6s} {:>7s} {:>5s} {:>4s} kernel".format(*head))
    for (shape, impl), found in rows.items():

        def med(metric: str, found=found) -> float:
            return statistics.median(float(m[metric]) for m, _ in found)

        m, name = found[0]
        us = med("gpu__time_duration.sum")
        print(
            f"{shape[0]:5d}x{shape[1]:2d}x128 {impl:10s} {us:6.2f} "
            f"{med('dram__throughput.avg.pct_of_peak_sustained_elapsed'):6.1f} "
            f"{med('sm__warps_active.avg.pct_of_peak_sustained_active'):6.1f} {m['launch__grid_size']:>7s} "
            f"{m['launch__block_size']:>5s} {m['launch__registers_per_thread']:>4s} {name}"
        )


def probe() -> None:
    import torch

    sys.path.insert(0, "benchmarks")
    import bench  # the project's benchmarks/bench.py: how it loads the kernel
    from cases.rms_norm import Qwen3RMSNormCopy

    kernel, how = bench.load_kernel(None)
    print(f"kernel: {how}", file=sys.stderr)
    torch.manual_seed(0)
    w = (torch.rand(128, device="cuda") * 0.9 + 0.3).bfloat16()
    module = Qwen3RMSNormCopy(128, EPS).cuda()
    del module.weight
    module.weight = w
    compiled = torch.compile(module, dynamic=False)  # one static kernel per shape, as bench.py's
    runs = []
    for tokens, heads in SHAPES:
        x = torch.randn(tokens, heads, 128, device="cuda").bfloat16()
        y = torch.empty_like(x)
        x64 = x.double()
        ref = (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16().double() * w.double()
        calls = {
            "ours": lambda x=x: kernel.rms_norm(x, w, EPS),
            "compile": lambda x=x: compiled(x),
            "F.rms_norm": lambda x=x: torch.nn.functional.rms_norm(x, (128,), w, EPS),
            "copy": lambda x=x, y=y: y.copy_(x),
        }
        for impl in IMPLS[:3]:
            out = calls[impl]()
            err = ((out.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
            wrong = "WRONG" if err > 2**-6 else ""
            print(f"{tokens}x{heads}x128 {impl}: max rel err {err:.1e} {wrong}", file=sys.stderr)
        for fn in calls.values():  # warm (torch.compile compiles here, outside the profiled range)
            fn()
        runs.append(calls)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for calls in runs:
        for _ in range(CALLS):
            for impl in IMPLS:
                calls[impl]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2])
    else:
        probe()
