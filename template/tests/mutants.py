"""Deliberately broken kernels ("mutants") that the tests must reject, and the runner that checks they do.

    python tests/mutants.py --dtypes bf16    # every mutant, each op's tests in bf16 only: the quickest full run
    python tests/mutants.py                  # every mutant of this project's ops, tests in every compiled dtype
    python tests/mutants.py --list           # the mutants and whether each still matches its source (no GPU)
    python tests/mutants.py --ops rms_norm geglu        # only these ops' mutants (file stems)
    python tests/mutants.py rms_norm.model_rounds_once  # only these mutants

A mutant replaces one exact piece of an op's kernel source with a plausible bug: a rounding moved, a term
dropped, a pairing or an index mixed up. The runner needs a CUDA GPU and nvcc. Its workers (--workers, default
cores / 4) each copy the project (tracked and untracked files; no .git, so the copy's op namespace stays
`_<package>_cuda_local` whatever is edited in it, and no builds) to a temporary folder and build the copy once, with
setup.py, for this GPU's architecture only. Then each worker takes mutants from a queue (those of one source file
together), one at a time: it writes the mutant into its copy's source, rebuilds (ninja recompiles that one .cu, then
the library is linked again), runs the op's tests against that build (`-x`, not the slow ones; with pytest-xdist
when it is installed; --dtypes limits the dtypes they run for, through CKT_TEST_DTYPES), and writes the source back
byte for byte (the next build recompiles it). A mutant the tests fail is killed; one they pass survived: the tests
miss that bug. Exit status 1 if any mutant survived, failed to build, was not tested (every test skipped, pytest
stopped with an error) or no longer matches its source text (a kernel edit moved it: update the mutant with the
kernel). The broken code lives only here and, while it is tested, in the temporary copies.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"bf16": "BFLOAT16", "fp16": "FLOAT16", "fp32": "FLOAT32"}  # precision -> config.h's CKT_WITH_<macro>
HALF = ("bf16", "fp16")


@dataclass(frozen=True)
class Mutant:
    name: str  # <op stem>.<what is broken>
    file: str  # the source it changes, relative to the project root
    old: str  # exact text, found exactly once in `file`
    new: str  # what replaces it
    tests: tuple[str, ...]  # test files of which some test must fail
    half_only: bool = False  # a rounding to bf16/fp16 moved: the same computation in an fp32-only build

    @property
    def op(self) -> str:
        return self.name.split(".")[0]


def _mutant(name: str, file: str, old: str, new: str, half_only: bool = False) -> Mutant:
    return Mutant(name, file, old, new, (f"tests/test_{name.split('.')[0]}.py",), half_only)


MUTANTS = [
    # RMSNorm
    _mutant(
        "rms_norm.model_rounds_once",  # rounding="model" computed like "single": no rounding before the weight
        "kernel_src/rms_norm.cu",
        """    for (int k = 0; k < VEC; ++k) y.e[k] = from_float<T>(to_float(x.e[k]) * inv_rms);
    return mul_rounded(y, w);""",
        """    for (int k = 0; k < VEC; ++k) y.e[k] = from_float<T>(to_float(x.e[k]) * inv_rms * to_float(w.e[k]));
    return y;""",
        half_only=True,
    ),
    _mutant(
        "rms_norm.model_rounds_once_mixed",  # the same where the weight or the output is fp32 beside a 2-byte x
        "kernel_src/rms_norm.cu",
        "if constexpr (WEIGHT == 1) y.e[k] = from_float<O>(round_to<T>(n) * to_float(w.e[k]));",
        "if constexpr (WEIGHT == 1) y.e[k] = from_float<O>(n * to_float(w.e[k]));",
        half_only=True,
    ),
    _mutant(
        "rms_norm.single_rounds_twice",  # rounding="single" computed like "model"
        "kernel_src/rms_norm.cu",
        "if constexpr (WEIGHT == 2) y.e[k] = from_float<O>(n * to_float(w.e[k]));",
        "if constexpr (WEIGHT == 2) y.e[k] = from_float<O>(round_to<T>(n) * to_float(w.e[k]));",
        half_only=True,
    ),
    _mutant(
        "rms_norm.fused_add_norms_unrounded_sum",  # the statistics of x + residual before its rounding to T
        "kernel_src/rms_norm.cu",
        """          if constexpr (FUSED) {  // the sum is stored now, so that its stores drain during the reduction
            add_residual(xv[i], rv[i]);
            store_raw(res_out + col, xv[i]);
          }
          sum_sq += sum_of_squares(xv[i]);""",
        """          if constexpr (FUSED) {
            const V r = from_bits<T, VEC>(rv[i]);
            for (int k = 0; k < VEC; ++k) {
              const float h = to_float(xv[i].e[k]) + to_float(r.e[k]);
              sum_sq += h * h;
            }
            add_residual(xv[i], rv[i]);
            store_raw(res_out + col, xv[i]);
          } else {
            sum_sq += sum_of_squares(xv[i]);
          }""",
        half_only=True,
    ),
    _mutant(
        "rms_norm.fused_add_streamed_norms_x",  # long rows: the second pass reads x instead of h = x + residual
        "kernel_src/rms_norm.cu",
        "const T* src = FUSED ? res_out : static_cast<const T*>(a.input) + a.input_rows.offset<MULTI>(row);",
        "const T* src = static_cast<const T*>(a.input) + a.input_rows.offset<MULTI>(row);",
    ),
    _mutant(
        "rms_norm.no_eps",
        "kernel_src/rms_norm.cu",
        "const float inv_rms = rsqrtf(sums[0] * inv_cols + a.eps);",
        "const float inv_rms = rsqrtf(sums[0] * inv_cols);",
    ),
    _mutant(
        "rms_norm.head_weight_misplaced",  # per-head rows: every lane multiplies by the weight's first vector
        "kernel_src/rms_norm.cu",
        "w = load_raw<VEC>(static_cast<const T*>(a.weight) + col);",
        "w = load_raw<VEC>(static_cast<const T*>(a.weight));",
    ),
    _mutant(
        "rms_norm.backward_no_mean_projection",  # d/dx without the - x * inv^3 * mean(g * x) term
        "kernel_src/rms_norm.cu",
        "out[k] = inv * weighted(dy_at(k), wv, k) - x_at(k) * coef;",
        "out[k] = inv * weighted(dy_at(k), wv, k);",
    ),
    # GEGLU
    _mutant(
        "geglu.halves_swapped",  # gelu of the first half, times the second
        "kernel_src/geglu.cu",
        """      value[u] = load_raw<VEC>(src);
      gate[u] = load_raw<VEC>(src + a.inner);""",
        """      gate[u] = load_raw<VEC>(src);
      value[u] = load_raw<VEC>(src + a.inner);""",
    ),
    _mutant(
        "geglu.tanh_for_erf",  # the tanh approximation when the exact erf GELU is asked for
        "kernel_src/geglu.cu",
        """  if constexpr (TANH) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float inner""",
        """  if constexpr (true) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float inner""",
    ),
    _mutant(
        "geglu.rounds_once",  # gelu(gate) not rounded to the dtype before the product, unlike the eager module
        "kernel_src/geglu.cu",
        """        y = mul_rounded(value[u], act);""",
        """#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          y.e[k] = from_float<T>(to_float(value[u].e[k]) * gelu<TANH>(to_float(gate[u].e[k])));
        }""",
        half_only=True,
    ),
    _mutant(
        "geglu.backward_gate_grad_without_value",
        "kernel_src/geglu.cu",
        "d_gate.e[k] = from_float<T>(to_float(grad[u].e[k]) * to_float(value[u].e[k]) * gelu_grad<TANH>(g));",
        "d_gate.e[k] = from_float<T>(to_float(grad[u].e[k]) * gelu_grad<TANH>(g));",
    ),
    # RoPE3D
    _mutant(
        "rope3d.half_split_pairs",  # rotate_half's pairing (i, i + n/2) within each vector instead of (2i, 2i+1)
        "kernel_src/rope3d.cu",
        """          y[p] = __fadd_rn(__fmul_rn(x[i][p], co[p]), __fmul_rn(-x[i][p + 1], si[p]));
          y[p + 1] = __fadd_rn(__fmul_rn(x[i][p + 1], co[p + 1]), __fmul_rn(x[i][p], si[p + 1]));""",
        """          const int a0 = p / 2, a1 = p / 2 + VEC / 2;
          y[a0] = __fadd_rn(__fmul_rn(x[i][a0], co[a0]), __fmul_rn(-x[i][a1], si[a0]));
          y[a1] = __fadd_rn(__fmul_rn(x[i][a1], co[a1]), __fmul_rn(x[i][a0], si[a1]));""",
    ),
    _mutant(
        "rope3d.cos_sin_swapped",  # the tables read into each other's place
        "kernel_src/rope3d.cu",
        """    load_n<VEC, VECTOR>(a.cos + b * a.cos_stride_b + s * a.cos_stride_s + c0, co);
    load_n<VEC, VECTOR>(a.sin + b * a.sin_stride_b + s * a.sin_stride_s + c0, si);""",
        """    load_n<VEC, VECTOR>(a.cos + b * a.cos_stride_b + s * a.cos_stride_s + c0, si);
    load_n<VEC, VECTOR>(a.sin + b * a.sin_stride_b + s * a.sin_stride_s + c0, co);""",
    ),
    _mutant(
        "rope3d.generator_cos_sin_swapped",  # the in-kernel tables: sin where cos belongs
        "kernel_src/rope3d.cu",
        "sincosf(__fmul_rn(freq[p / 2], t), &sv, &cv);",
        "sincosf(__fmul_rn(freq[p / 2], t), &cv, &sv);",
    ),
    _mutant(
        "rope3d.backward_rotates_forward",  # the gradient turned by the angle instead of back by it
        "kernel_src/rope3d.cu",
        "if (a.transpose) {",
        "if (false) {",
    ),
    # AdaLN
    _mutant(
        "adaln.scale_without_one",  # norm(x) * scale + shift: the 1 of (1 + scale) dropped
        "kernel_src/adaln.cu",
        "out.e[k] = from_float<O>(n * (1.f + to_float(scv[i].e[k])) + to_float(shv[i].e[k]));",
        "out.e[k] = from_float<O>(n * to_float(scv[i].e[k]) + to_float(shv[i].e[k]));",
    ),
    _mutant(
        "adaln.warp_rows_scale_without_one",  # the same in the kernel for many rows sharing their modulation
        "kernel_src/adaln.cu",
        "out.e[k] = from_float<O>(n * (1.f + to_float(scv.e[k])) + to_float(shv.e[k]));",
        "out.e[k] = from_float<O>(n * to_float(scv.e[k]) + to_float(shv.e[k]));",
    ),
    _mutant(
        "adaln.per_token_read_per_sample",  # per-token modulation: every token given its sample's first row
        "kernel_src/adaln.cu",
        """a.input_token_stride);
  const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride + s * a.scale_token_stride;
  const M* sh""",
        """a.input_token_stride);
  const M* sc = static_cast<const M*>(a.scale) + b * a.scale_batch_stride;
  const M* sh""",
    ),
    _mutant(
        "adaln.layer_norm_without_mean",  # LayerNorm's x - mean taken as x in the output
        "kernel_src/adaln.cu",
        """      const float n = (to_float(xv[i].e[k]) - mean) * inv;
      out.e[k] = from_float<O>(n * (1.f + to_float(scv[i].e[k]))""",
        """      const float n = to_float(xv[i].e[k]) * inv;
      out.e[k] = from_float<O>(n * (1.f + to_float(scv[i].e[k]))""",
    ),
    _mutant(
        "adaln.backward_rows_no_projection",  # d/dx without the - n * mean(g * n) term (row kernel: per token)
        "kernel_src/adaln.cu",
        """      const float n = (xf[k] - mean) * inv;
      out[k] = inv * (g[k] - mean_g - n * mean_gn);""",
        """      const float n = (xf[k] - mean) * inv;
      out[k] = inv * (g[k] - mean_g);""",
    ),
    _mutant(
        "adaln.backward_chunks_no_projection",  # the same in the chunk kernel (per-sample modulation)
        "kernel_src/adaln.cu",
        """        const float n = (to_float(xv[i].e[k]) - mean) * inv, dyf = to_float(gv[i].e[k]);
        out[k] = inv * (g[k] - mean_g - n * mean_gn);""",
        """        const float n = (to_float(xv[i].e[k]) - mean) * inv, dyf = to_float(gv[i].e[k]);
        out[k] = inv * (g[k] - mean_g);""",
    ),
]


def compiled_dtypes(root: Path = ROOT) -> list[str]:
    """The precisions (bf16, fp16, fp32) kernel_src/config.h compiles; all of them when it is missing."""
    config = root / "kernel_src" / "config.h"
    if not config.is_file():
        return list(DTYPES)
    text = config.read_text()
    return [p for p, macro in DTYPES.items() if f"#define CKT_WITH_{macro} 1" in text]


def present(root: Path = ROOT) -> list[Mutant]:
    """The mutants of the ops this project has (their source and test files exist), less those that only change
    roundings to bf16/fp16 when the build has neither."""
    half = any(p in HALF for p in compiled_dtypes(root))
    return [
        m
        for m in MUTANTS
        if (root / m.file).is_file() and all((root / t).is_file() for t in m.tests) and (half or not m.half_only)
    ]


def mismatches(root: Path = ROOT) -> list[str]:
    """One line per present mutant whose text is not found exactly once in its source, or that changes nothing."""
    problems = []
    for m in present(root):
        count = (root / m.file).read_text(encoding="utf-8").count(m.old)
        if count != 1 or m.old == m.new:
            what = "changes nothing" if m.old == m.new else f"its text is found {count} times, not once"
            problems.append(f"{m.name}: {what} in {m.file}")
    return problems


def project_files(root: Path) -> list[Path]:
    """The project's files, as git sees them (tracked, and untracked but not ignored), else all but builds."""
    if (root / ".git").exists():
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [Path(p) for p in listed.split("\0") if p and (root / p).is_file()]
    skip = {".git", "build", "build-ext", "__pycache__", ".pytest_cache"}
    return [
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(root).parts) and p.suffix != ".so"
    ]


def package_name(root: Path) -> str:
    return tomllib.loads((root / "build.toml").read_text())["general"]["name"].replace("-", "_")


def assign(mutants: list[Mutant], workers: int) -> list[list[Mutant]]:
    """The mutants in runs of the list ordered by source file, one run per worker, their lengths within one of each
    other: while a worker's consecutive mutants change the same file, each of its rebuilds recompiles one object."""
    ordered = sorted(mutants, key=lambda m: m.file)  # stable: MUTANTS' order within a file
    size, extra = divmod(len(ordered), workers)
    runs, start = [], 0
    for i in range(workers):
        end = start + size + (i < extra)
        runs.append(ordered[start:end])
        start = end
    return runs


class Queue:
    """Each worker's run of mutants; a worker whose run is done takes the last mutant of the longest other run."""

    def __init__(self, runs: list[list[Mutant]]):
        self.runs = [deque(run) for run in runs]
        self.lock = threading.Lock()

    def take(self, worker: int) -> Mutant | None:
        with self.lock:
            if self.runs[worker]:
                return self.runs[worker].popleft()
            longest = max(self.runs, key=len)
            return longest.pop() if longest else None


@dataclass(frozen=True)
class Settings:
    arch: str  # CUDA_CAPABILITIES for the copies' builds, e.g. "9.0"
    build_jobs: int  # MAX_JOBS of each copy's builds
    test_workers: int  # pytest-xdist workers per test run (1: no xdist)
    dtypes: tuple[str, ...]  # the precisions the tests run for (CKT_TEST_DTYPES)
    timeout: int  # seconds per mutant's tests


def environment(copy: Path, settings: Settings) -> dict[str, str]:
    """Builds for this GPU only; the tests load the copy's build (never LOCAL_KERNELS') and fail without CUDA."""
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_KERNELS"}
    env |= {
        "CUDA_CAPABILITIES": settings.arch,
        "MAX_JOBS": str(settings.build_jobs),
        "REQUIRE_GPU": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "CKT_TEST_DTYPES": ",".join(settings.dtypes),
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy / "torch-ext"), env.get("PYTHONPATH")]))
    return env


def logged(command: list[str], copy: Path, env: dict[str, str], log: Path, timeout: int | None = None):
    """(exit status, or None past `timeout`; output), the command and its output appended to `log`."""
    try:
        done = subprocess.run(
            command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
        status, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as expired:
        status, output = None, expired.stdout or ""
        output = output if isinstance(output, str) else output.decode(errors="replace")
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n{output}\n")
    return status, output


def build(copy: Path, env: dict[str, str], log: Path) -> str | None:
    """Build the copy in place (incrementally after the first time); the reason when it fails."""
    status, _ = logged([sys.executable, "setup.py", "build_ext"], copy, env, log)
    return None if status == 0 else f"build failed (log: {log})"


def object_file(copy: Path, source: str) -> Path | None:
    """The object the build compiles `source` to (torch's layout: build-ext/temp.<platform>/<source>.o)."""
    return next(copy.glob(f"build-ext/temp*/{Path(source).with_suffix('.o')}"), None)


def outcome(status: int | None, output: str, timeout: int) -> tuple[str, str]:
    """("killed" | "survived" | "error", detail) from a pytest run's exit status and its -q -rs output."""
    if status is None:
        return "error", f"tests ran past {timeout} s"
    summary = next((line for line in reversed(output.splitlines()) if re.search(r" in [\d.]+s\b", line)), "")
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (failed|passed|skipped|error)", summary)}
    if counts.get("failed"):  # pytest -x exits with 1; with xdist, whose -x interrupts the session, with 2
        failed = next((line for line in output.splitlines() if line.startswith("FAILED")), summary.strip("= "))
        return "killed", failed[:150]
    if status == 0 and counts.get("passed"):
        skipped = f", {counts['skipped']} skipped" if counts.get("skipped") else ""
        return "survived", f"{counts['passed']} passed{skipped}: the tests miss this bug"
    if status in (0, 5):  # every test skipped, or none collected
        reason = next((line for line in output.splitlines() if line.startswith("SKIPPED")), summary.strip("= "))
        return "error", f"tests did not run: {reason[:150]}"
    last = " | ".join(line for line in output.strip().splitlines()[-3:])
    return "error", f"pytest exited with {status}, no test failed: {last[-300:]}"


def run_mutant(m: Mutant, copy: Path, env: dict[str, str], settings: Settings, log: Path) -> tuple[str, str]:
    """Apply `m` in the built copy, rebuild, run its tests, restore the source exactly: (result, detail)."""
    source = copy / m.file
    original = source.read_bytes()
    text = original.decode()
    if text.count(m.old) != 1:
        return "error", f"its text is not found once in {source}"
    started = time.monotonic()
    try:
        source.write_bytes(text.replace(m.old, m.new, 1).encode())
        written = source.stat().st_mtime_ns
        failed = build(copy, env, log)
        built = time.monotonic()
        if failed:
            return "error", failed
        obj = object_file(copy, m.file)
        if obj is None or obj.stat().st_mtime_ns <= written:
            return "error", f"the build did not recompile {m.file} (log: {log})"
        command = [sys.executable, "-m", "pytest", *m.tests, "-x", "-q", "-rs", "-p", "no:cacheprovider"]
        command += ["-o", "addopts=", "-m", "not slow"]  # the ini's addopts, and no >2^31-element tests
        if settings.test_workers > 1 and _has_xdist():
            command += ["-n", str(settings.test_workers)]
        result, detail = outcome(*logged(command, copy, env, log, settings.timeout), settings.timeout)
    finally:
        source.write_bytes(original)
    now = time.monotonic()
    return result, f"{now - started:.0f} s (build {built - started:.0f} s, tests {now - built:.0f} s); {detail}"


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def work(index: int, queue: Queue, workdir: Path, files: list[Path], settings: Settings, report) -> None:
    """One worker: copy the project, build it, then run the mutants the queue gives it, one after another."""
    copy = workdir / f"copy{index}"
    for rel in files:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    env = environment(copy, settings)
    started = time.monotonic()
    log = workdir / "logs" / f"copy{index}.log"
    problem = build(copy, env, log)
    if problem is None:
        package = package_name(copy)
        status, where = logged([sys.executable, "-c", f"import {package}; print({package}.__file__)"], copy, env, log)
        if status != 0 or not where.strip().startswith(str(copy)):
            problem = f"the tests would not load the copy's build: {where.strip()[-300:]}"
    report(None, f"copy {index}: " + (problem or f"built in {time.monotonic() - started:.0f} s"))
    while (m := queue.take(index)) is not None:
        if problem:
            report(m, ("error", f"its copy did not build or load ({problem})"))
        else:
            report(m, run_mutant(m, copy, env, settings, workdir / "logs" / f"{m.name}.log"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="mutants to run (default: all of this project's)")
    parser.add_argument("--ops", nargs="+", metavar="STEM", help="only the mutants of these ops (file stems)")
    parser.add_argument("--list", action="store_true", help="list the mutants and check their texts; build nothing")
    parser.add_argument(
        "--dtypes",
        type=lambda text: [d.strip() for d in text.split(",") if d.strip()],
        help="comma-separated dtypes the tests run for, e.g. bf16 (default: every compiled one)",
    )
    parser.add_argument(
        "--workers", type=int, help="project copies mutated, built and tested at once (default: cores / 4)"
    )
    parser.add_argument("--test-workers", type=int, help="pytest-xdist workers per test run (default: cores / workers)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per mutant's tests (default 600)")
    parser.add_argument("--keep", action="store_true", help="keep the copies and logs even when every mutant is killed")
    args = parser.parse_args()

    mutants = present()
    unknown = [n for n in args.names if n not in {m.name for m in mutants}]
    if unknown:
        parser.error(f"no such mutant in this project: {', '.join(unknown)} (see --list)")
    compiled = compiled_dtypes()
    dtypes = list(dict.fromkeys(args.dtypes or compiled))
    if not_compiled := [d for d in dtypes if d not in compiled]:
        parser.error(
            f"--dtypes: {', '.join(not_compiled)} not compiled in this project (compiled: {', '.join(compiled)})"
        )
    problems = mismatches()
    if args.list:
        for m in mutants:
            print(f"{m.name:45} {m.file:26} {' '.join(m.tests)}")
    for problem in problems:
        print(f"stale: {problem}")
    if problems:
        print(f"{len(problems)} mutants no longer match their sources: update tests/mutants.py with the kernels")
        return 1
    if args.list:
        return 0
    selected = [m for m in mutants if (not args.names or m.name in args.names) and (not args.ops or m.op in args.ops)]
    if not any(d in HALF for d in dtypes) and any(m.half_only for m in selected):
        print(f"not run: {', '.join(m.name for m in selected if m.half_only)} (bf16/fp16 roundings; no such --dtypes)")
        selected = [m for m in selected if not m.half_only]
    if not selected:
        print("no mutants selected")
        return 1

    import torch

    if not torch.cuda.is_available():
        print("mutants.py needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 1
    major, minor = torch.cuda.get_device_capability()
    cores = os.cpu_count() or 1
    workers = max(1, min(len(selected), args.workers or cores // 4))
    share = max(1, cores // workers)
    settings = Settings(f"{major}.{minor}", share, args.test_workers or share, tuple(dtypes), args.timeout)
    print(
        f"{len(selected)} mutants, {workers} copies of the project ({share} cores each), sm_{major}{minor}, "
        f"tests in {', '.join(dtypes)}",
        flush=True,
    )
    return run_all(selected, workers, settings, args.keep)


def run_all(selected: list[Mutant], workers: int, settings: Settings, keep: bool = False) -> int:
    """Run the mutants on `workers` copies of the project; print a line per copy and per mutant, then a summary."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="mutants-"))
    (workdir / "logs").mkdir()
    print(f"copies and logs in {workdir}", flush=True)
    results: dict[str, tuple[str, str]] = {}
    lock = threading.Lock()

    def report(m: Mutant | None, result) -> None:
        with lock:
            if m is None:
                print(result, flush=True)
            else:
                results[m.name] = result
                print(f"{result[0]:9} {m.name}: {result[1]}", flush=True)

    queue = Queue(assign(selected, workers))
    files = project_files(ROOT)
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(work, i, queue, workdir, files, settings, report) for i in range(workers)]:
            future.result()
    bad = [m.name for m in selected if results.get(m.name, ("error",))[0] != "killed"]
    if bad or keep:
        print(f"copies and logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{len(selected) - len(bad)} of {len(selected)} mutants killed in {time.monotonic() - started:.0f} s"
        + (f"; not killed: {', '.join(bad)}" if bad else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
