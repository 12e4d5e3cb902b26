"""Decode-size RMSNorm launches (bf16 rows of 4096) in bench.py's GPU time (torch.profiler device time of each call's
kernels, median of 30 calls), with the GPU in one of these states before each call:

  bench   a 256 MB memset right before the call, as bench.py's flush until 2026-12-07: a call's kernels start right
          after the memset only where its launcher's host time (under the profiler) is shorter than the memset
  queued  a ~1 ms spin kernel (torch.cuda._sleep), then the memset: every implementation's kernels wait in the
          stream and start right after the memset, as in CUDA-graph replay or a GPU-bound model (bench.py since)
  gap     the memset, then a ~20 us spin: every implementation starts 20 us after the memset
  clean   the memset, then a 128 MB read (L2 full of unwritten lines), as decode_replay.py's clean flush
  warm    no flush: the call's inputs are in L2 from the call before

Ours, Liger, torch.compile and F.rms_norm (and their fused add forms), each output checked against float64 first;
the implementations are timed in order in one state, in reverse order in the next. Whether the profiler's gaps at
decode sizes (docs/benchmarks.md, 2026-12-07) belong to the kernels or to where their launch lands after the
memset. Template developers' tool (not part of generated projects):

    python3 decode_profiler.py PROJECT/torch-ext [PACKAGE [STATES [ROWS]]]      (comma-separated; defaults below)
"""

import sys
from pathlib import Path

import torch
from decode_replay import add_norm, checked, print_table, qwen_norm

STATES, ROWS = "bench,queued,gap", "8,32,128,512,1024,2048"
GAP_CYCLES = 40_000  # ~20 us at the H100's and H200's ~1.98 GHz


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, str(Path(sys.argv[1]).parent / "benchmarks"))
    import timing  # the benchmarks' own GpuTimer

    kernel = __import__(sys.argv[2] if len(sys.argv) > 2 else "ltx_kernels")
    states = (sys.argv[3] if len(sys.argv) > 3 else STATES).split(",")
    row_counts = [int(n) for n in (sys.argv[4] if len(sys.argv) > 4 else ROWS).split(",")]
    read_buf = torch.ones(32 << 20, dtype=torch.int32, device="cuda") if "clean" in states else None  # 128 MB

    class StateTimer(timing.GpuTimer):
        def __init__(self, state: str) -> None:
            super().__init__()
            self.state = state

        def flush(self) -> None:
            if self.state == "queued":
                return super().flush()  # bench.py's own: the spin, then the memset
            if self.state == "warm":
                return
            if self.buffer is None:
                self.buffer = torch.empty(timing.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            self.buffer.zero_()
            if self.state == "gap":
                torch.cuda._sleep(GAP_CYCLES)
            elif self.state == "clean":
                self.sink = read_buf.sum(dtype=torch.int64)

    timers = {s: StateTimer(s) for s in states}
    compiled_norm, compiled_add = torch.compile(qwen_norm), torch.compile(add_norm)
    print(torch.cuda.get_device_name(), torch.__version__)
    table = []
    for fused in (False, True):
        for rows in row_counts:
            form, impls, checks = checked(kernel, compiled_norm, compiled_add, rows, fused)
            for name, (err, wrong) in checks.items():
                if wrong:
                    sys.exit(f"{form} {rows}x4096 {name}: error {err:.1e} against float64")
            for index, state in enumerate(states):
                times = {}
                for n in list(impls) if index % 2 == 0 else reversed(impls):
                    times[n], how = timers[state](impls[n])
                    if not how.startswith("profiler"):
                        sys.exit(f"{form} {rows}x4096 {n}: GPU time by {how}, not the profiler")
                times = {n: times[n] for n in impls}
                table.append((form, rows, state, times))
                print(f"time {form} {rows}x4096 {state:5s} " + "  ".join(f"{n} {t:6.2f}" for n, t in times.items()))
    print_table(["form", "rows x 4096", "state"], table)


if __name__ == "__main__":
    main()
