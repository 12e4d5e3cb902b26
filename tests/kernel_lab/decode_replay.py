"""Decode-size RMSNorm launches (bf16 rows of 4096) in CUDA-graph replay: ours, Liger, torch.compile and F.rms_norm,
each call captured in a graph and timed by CUDA events around one replay after an L2 flush, in three orders:

  seq      every implementation's replays back to back, ours first (as bench.py times them)
  seq-rev  the same, ours last
  mixed    rounds of one replay of each, in a fresh random order per round

and with two flushes: `dirty` (a 256 MB memset, as bench.py: L2 left full of written lines, which a kernel's own
lines must first write back) and `clean` (the memset, then a 128 MB read: L2 left full of unwritten lines). Every
output is checked against float64 first. Template developers' tool (not part of generated projects):

    python3 decode_replay.py PROJECT/torch-ext [PACKAGE]      (checks as liger_decode.py's; capture as bench.py's)
    ncu --set full -k regex:rms_norm python3 decode_replay.py PROJECT/torch-ext PACKAGE ncu   # one call each

(`ncu` as the last argument: only the checks, once each, at 128 and 512 rows, without torch.compile.)
"""

import random
import statistics
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from liger_decode import EPS, TOLERANCE, error, reference

ROWS = (1, 8, 32, 128, 512, 2048)
SEQ_CALLS, ROUNDS = 30, 100


def qwen_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def add_norm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor):
    h = x + r
    return qwen_norm(h, w), h


class Flush:
    def __init__(self) -> None:
        self.dirty_buf = torch.empty(64 << 20, dtype=torch.int32, device="cuda")  # 256 MB
        self.read_buf = torch.ones(32 << 20, dtype=torch.int32, device="cuda")  # 128 MB

    def __call__(self, kind: str) -> None:
        self.dirty_buf.zero_()
        if kind == "clean":
            self.sink = self.read_buf.sum(dtype=torch.int64)


def timed(graph, flush: Flush, kind: str) -> tuple:
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush(kind)
    begin.record()
    graph.replay()
    end.record()
    return begin, end


def us(pairs) -> float:
    return 1e3 * statistics.median(b.elapsed_time(e) for b, e in pairs)


def measure(graphs: dict, flush: Flush, order: str, kind: str) -> dict:
    names = list(graphs)
    pairs: dict = {n: [] for n in names}
    if order == "mixed":
        rng = random.Random(0)
        for _ in range(ROUNDS):
            rng.shuffle(names)
            for n in names:
                pairs[n].append(timed(graphs[n], flush, kind))
    else:
        for n in names if order == "seq" else reversed(names):
            pairs[n] = [timed(graphs[n], flush, kind) for _ in range(SEQ_CALLS)]
    torch.cuda.synchronize()
    return {n: us(p) for n, p in pairs.items()}


def add_then_f_rms_norm(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, EPS), h


def implementations(kernel, compiled_norm, compiled_add, x, r, w, fused: bool) -> dict:
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    if fused:
        return {
            "ours": partial(kernel.fused_add_rms_norm, x, r, w, EPS),
            "liger": partial(LigerFusedAddRMSNormFunction.apply, x, r, w, EPS, 0.0, "llama", False),
            "compile": partial(compiled_add, x, r, w),
            "add+F.rms_norm": partial(add_then_f_rms_norm, x, r, w),
        }
    return {
        "ours": partial(kernel.rms_norm, x, w, EPS),
        "liger": partial(LigerRMSNormFunction.apply, x, w, EPS, 0.0, "llama", False),
        "compile": partial(compiled_norm, x, w),
        "F.rms_norm": partial(F.rms_norm, x, (x.shape[-1],), w, EPS),
    }


def checked(kernel, compiled_norm, compiled_add, rows: int, fused: bool, skip=()) -> tuple[str, dict, dict]:
    """Seeded bf16 inputs of `rows` rows of 4096, the form's implementations (less `skip`), and each one's check
    against float64 (the fused add's sum: bit for bit): (form, implementations, {name: (error, wrong)})."""
    g = torch.Generator(device="cuda").manual_seed(1000 * fused + rows)
    x = torch.rand(rows, 4096, device="cuda", generator=g).mul_(6).sub_(3).bfloat16()
    r = torch.rand(rows, 4096, device="cuda", generator=g).mul_(6).sub_(3).bfloat16()
    w = torch.rand(4096, device="cuda", generator=g).mul_(0.9).add_(0.3).bfloat16()
    impls = implementations(kernel, compiled_norm, compiled_add, x, r, w, fused)
    impls = {name: fn for name, fn in impls.items() if name not in skip}
    h = (x.float() + r.float()).bfloat16() if fused else x
    ref = reference(h, w)
    checks = {}
    for name, fn in impls.items():
        out = fn()
        err = error(out[0] if fused else out, ref)
        checks[name] = (err, err > TOLERANCE or (fused and not torch.equal(out[1], h)))
    return "fused add" if fused else "forward", impls, checks


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, str(Path(sys.argv[1]).parent / "benchmarks"))
    from timing import capture  # the benchmarks' own capture

    kernel = __import__(sys.argv[2] if len(sys.argv) > 2 else "ltx_kernels")
    ncu = sys.argv[-1] == "ncu"
    compiled_norm, compiled_add = torch.compile(qwen_norm), torch.compile(add_norm)
    flush = Flush()
    print(torch.cuda.get_device_name(), torch.__version__)
    table = []
    for fused in (False, True):
        for rows in (128, 512) if ncu else ROWS:
            form, impls, checks = checked(kernel, compiled_norm, compiled_add, rows, fused, ("compile",) if ncu else ())
            for name, (err, bad) in checks.items():
                print(f"check {form} {rows}x4096 {name:15s} err {err:.1e}{'  WRONG' if bad else ''}")
            if ncu:
                continue
            graphs = {name: capture(fn) for name, fn in impls.items()}
            for order, kind in (("seq", "dirty"), ("seq-rev", "dirty"), ("mixed", "dirty"), ("mixed", "clean")):
                times = measure(graphs, flush, order, kind)
                table.append((form, rows, order, kind, times))
                cells = "  ".join(f"{n} {t:6.2f}" for n, t in times.items())
                print(f"time {form} {rows}x4096 {order:7s} {kind:5s} {cells}")
    if ncu:
        return
    print_table(["form", "rows x 4096", "order", "flush"], table)


def print_table(labels: list[str], table: list[tuple]) -> None:
    """Markdown: one row per (*label cells, {implementation: µs}), ours first, then ours against the fastest other."""
    names = list(table[0][-1])
    print("\n| " + " | ".join([*labels, *names, "ours / fastest other"]) + " |")
    print("|" + "---|" * (len(labels) + len(names) + 1))
    for *cells, times in table:
        vals = list(times.values())
        ratio = f"{min(vals[1:]) / vals[0]:.2f}x"
        print("| " + " | ".join([*map(str, cells), *(f"{v:.2f}" for v in vals), ratio]) + " |")


if __name__ == "__main__":
    main()
