"""Where bench.py's GPU time of an RMSNorm forward at decode sizes parts from the same timer's outside bench.py.

On an H100 (docs/benchmarks.md, "2026-12-07 (flush)"), bench.py timed ours at 32 rows of 4096 at 2.16 µs (0.81x of
Liger), while a standalone script with bench.py's own GpuTimer and EagerTimer, on the same machine and build, timed
the same op at 1.70-1.73 µs (level with Liger). This runs both in one process: bench.py's run_case for
qwen3-8b.hidden.32x4096 and .512x4096, then the same GpuTimer on that case's inputs, on fresh ones, and with the
package imported instead of loaded by kernels.get_kernel, grad mode off (as bench.py's forward runs) and on, each
time also after a do_bench (as bench.py times each implementation), then run_case again, in bench.py's order (ours
first) and reversed. Written on 2026-12-07 after that session's device time ran out: not yet run. Template
developers' tool (not part of generated projects):

    LOCAL_KERNELS=my-org/ltx-kernels=PROJECT python3 bench_bisect.py PROJECT [copy]

(`copy`: measure the copy bandwidth first, as bench.py does, which allocates two 1 GiB tensors.)
"""

import functools
import sys

import torch
import torch.nn.functional as F

EPS = 1e-6
SHAPES = ["hidden.32x4096", "hidden.512x4096"]


def times(rows: list[dict]) -> str:
    return "  ".join(f"{r['impl']} {r['gpu_us']}" for r in rows)


def main() -> None:
    project = sys.argv[1]
    sys.path.insert(0, f"{project}/benchmarks")
    import bench  # the project's own, with its timing.py and cases

    kernel, loaded = bench.load_kernel(None)
    sys.path.insert(0, f"{project}/torch-ext")
    imported = __import__(bench.PACKAGE)  # the package itself, not through kernels.get_kernel
    eager_timer, gpu_timer = bench.EagerTimer(), bench.GpuTimer()
    copy = "copy" in sys.argv[2:]
    ctx = bench.Context(
        kernel=kernel,
        eager_timer=eager_timer,
        gpu_timer=gpu_timer,
        compile=True,
        copy_gbs=bench.copy_bandwidth(gpu_timer, eager_timer) if copy else 3000.0,
        spec_gbs=None,
        note=print,
        status=lambda text: None,
    )
    print(torch.cuda.get_device_name(), loaded, "copy bandwidth measured first" if copy else "")
    for case in bench.select_cases(["rmsnorm"], SHAPES, False):
        if case.variant != "weight":
            continue
        print(case.label, "run_case:", times(bench.run_case(case, "bf16", "forward", ctx)), flush=True)
        t = case.make(torch.bfloat16, torch.device("cuda"))
        x, w = t["x"], t["weight"]
        fresh = torch.randn(x.shape, device="cuda").bfloat16()
        for label, a, k in (("case inputs", x, kernel), ("fresh inputs", fresh, kernel), ("imported", x, imported)):
            for grad in (False, True):
                ours = functools.partial(k.rms_norm, a, w, EPS)
                with torch.set_grad_enabled(grad):
                    alone = gpu_timer(ours)[0]
                    eager_timer(ours)
                    after = gpu_timer(ours)[0]
                    f = gpu_timer(functools.partial(F.rms_norm, a, (a.shape[-1],), w, EPS))[0]
                print(f" {label:12s} grad={grad!s:5s} ours {alone:.2f}, after do_bench {after:.2f}; F.rms_norm {f:.2f}")
        print(case.label, "run_case again:", times(bench.run_case(case, "bf16", "forward", ctx)), flush=True)
        order = bench.impl_order
        bench.impl_order = lambda order=order: list(reversed(order()))  # ours last: after torch.compile's compile
        print(case.label, "run_case, reversed:", times(bench.run_case(case, "bf16", "forward", ctx)), flush=True)
        bench.impl_order = order


if __name__ == "__main__":
    main()
