"""Medians of ncu's per-launch durations: `ncu --csv --metrics gpu__time_duration.sum ...` output in, one line per
kernel (template arguments kept) and grid out, with the launch count, median, min and max in µs.

    python3 tests/kernel_lab/ncu_table.py ncu.csv [LABEL]
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from collections import defaultdict


def short(name: str) -> str:
    name = re.sub(r"ckt::(\(anonymous namespace\)|<unnamed>)::", "", name)
    name = name.replace("__nv_bfloat16", "bf16").replace("void ", "")
    return re.sub(r"\(.*\)$", "", name)


def main(path: str, label: str = "") -> None:
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not CSV
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[row["Metric Unit"]]
        times[(short(row["Kernel Name"]), row["Grid Size"])].append(value * scale)
    for (name, grid), us in sorted(times.items(), key=lambda kv: (int(kv[0][1].strip("()").split(",")[0]), kv[0][0])):
        print(
            f"{label}{name[:70]:70s} grid {grid:14s} n={len(us):2d} median {statistics.median(us):6.2f} "
            f"min {min(us):6.2f} max {max(us):6.2f} us"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
