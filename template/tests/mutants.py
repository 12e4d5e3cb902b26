"""Deliberately broken kernels ("mutants") that the tests must reject, and the runner that checks they do.

    python tests/mutants.py                # every mutant of this project's ops (needs a CUDA GPU and nvcc)
    python tests/mutants.py --list         # the mutants and whether each still matches its source (no GPU)
    python tests/mutants.py --ops rms_norm geglu      # only these ops' mutants (file stems)
    python tests/mutants.py rms_norm.model_rounds_once  # only these mutants

A mutant replaces one exact piece of an op's kernel source with a plausible bug: a rounding moved, a term
dropped, a pairing or an index mixed up. The runner copies the project (its tracked and untracked files, no
builds) to a temporary folder per mutant, applies the mutant, builds the copy with setup.py for this GPU's
architecture only (several copies at once, the cores shared out), then runs the op's tests against that build
(`-x`; with pytest-xdist when it is installed). A mutant the tests fail is killed; one they pass survived: the tests
miss that bug. Exit status 1 if any mutant survived, failed to build, or no longer matches its source text (a kernel
edit moved it: update the mutant with the kernel). The broken code lives only here and in the temporary copies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


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
        "if constexpr (WEIGHT == 1) out[k] = round_to<T>(n) * to_float(wv[i].e[k]);",
        "if constexpr (WEIGHT == 1) out[k] = n * to_float(wv[i].e[k]);",
        half_only=True,
    ),
    _mutant(
        "rms_norm.single_rounds_twice",  # rounding="single" computed like "model"
        "kernel_src/rms_norm.cu",
        "if constexpr (WEIGHT == 2) out[k] = n * to_float(wv[i].e[k]);",
        "if constexpr (WEIGHT == 2) out[k] = round_to<T>(n) * to_float(wv[i].e[k]);",
        half_only=True,
    ),
    _mutant(
        "rms_norm.fused_add_norms_unrounded_sum",  # the statistics of x + residual before its rounding to T
        "kernel_src/rms_norm.cu",
        """          if constexpr (FUSED) add_residual(xv[i], rv[i]);
          sum_sq += sum_of_squares(xv[i]);""",
        """          if constexpr (FUSED) {
            const V r = from_bits<T, VEC>(rv[i]);
            for (int k = 0; k < VEC; ++k) {
              const float h = to_float(xv[i].e[k]) + to_float(r.e[k]);
              sum_sq += h * h;
            }
            add_residual(xv[i], rv[i]);
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
        "rsqrtf(row_sum(sum_sq) / static_cast<float>(a.cols) + a.eps);",
        "rsqrtf(row_sum(sum_sq) / static_cast<float>(a.cols));",
    ),
    _mutant(
        "rms_norm.backward_no_mean_projection",  # d/dx without the - x * inv^3 * mean(g * x) term
        "kernel_src/rms_norm.cu",
        "out[k] = inv * g[k] - xf * coef + to_float(ev.e[k]);",
        "out[k] = inv * g[k] + to_float(ev.e[k]);",
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
        "const float act = round_to<T>(gelu<TANH>(g));",
        "const float act = gelu<TANH>(g);",
        half_only=True,
    ),
    _mutant(
        "geglu.backward_gate_grad_without_value",
        "kernel_src/geglu.cu",
        "d_gate.e[k] = from_float<T>(dy * to_float(value[u].e[k]) * gelu_grad<TANH>(g));",
        "d_gate.e[k] = from_float<T>(dy * gelu_grad<TANH>(g));",
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
        "sincosf(__fmul_rn(__ldg(g.freqs + k), t), &sv, &cv);",
        "sincosf(__fmul_rn(__ldg(g.freqs + k), t), &cv, &sv);",
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


def present(root: Path = ROOT) -> list[Mutant]:
    """The mutants of the ops this project has (their source and test files exist), less those that only change
    roundings to bf16/fp16 when the build has neither."""
    config = root / "kernel_src" / "config.h"
    half = not config.is_file() or any(f"#define CKT_WITH_{t} 1" in config.read_text() for t in ("FLOAT16", "BFLOAT16"))
    return [
        m
        for m in MUTANTS
        if (root / m.file).is_file() and all((root / t).is_file() for t in m.tests) and (half or not m.half_only)
    ]


def mismatches(root: Path = ROOT) -> list[str]:
    """One line per present mutant whose text is not found exactly once in its source, or that changes nothing."""
    problems = []
    for m in present(root):
        count = (root / m.file).read_text().count(m.old)
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


def run_mutant(
    m: Mutant, workdir: Path, files: list[Path], arch: str, build_jobs: int, test_workers: int, timeout: int
):
    """(result, detail): result is "killed", "survived" or "error"."""
    started = time.monotonic()
    copy = workdir / m.name
    for rel in files:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    source = copy / m.file
    source.write_text(source.read_text().replace(m.old, m.new, 1))

    env = {k: v for k, v in os.environ.items() if k != "LOCAL_KERNELS"}  # load the copy, never another build
    env |= {"CUDA_CAPABILITIES": arch, "MAX_JOBS": str(build_jobs), "REQUIRE_GPU": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy / "torch-ext"), env.get("PYTHONPATH")]))
    log = copy / "mutant.log"
    with log.open("w") as out:
        build = subprocess.run([sys.executable, "setup.py", "build_ext"], cwd=copy, env=env, stdout=out, stderr=out)
    if build.returncode != 0:
        return "error", f"build failed (log: {log})"
    package = package_name(copy)
    where = subprocess.run(
        [sys.executable, "-c", f"import {package}; print({package}.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    if where.returncode != 0 or not where.stdout.strip().startswith(str(copy)):
        return "error", f"the tests would not load the mutant's build: {(where.stdout + where.stderr).strip()[-300:]}"

    command = [sys.executable, "-m", "pytest", *m.tests, "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    if test_workers > 1 and _has_xdist():
        command += ["-n", str(test_workers)]
    try:
        tests = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "error", f"tests ran past {timeout} s"
    output = tests.stdout + tests.stderr
    log.write_text(log.read_text() + output)
    seconds = f"{time.monotonic() - started:.0f} s"
    if tests.returncode == 1:
        failed = next((line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))), "a test failed")
        return "killed", f"{seconds}; {failed[:150]}"
    if tests.returncode == 0:
        return "survived", f"{seconds}; {m.tests} passed: they miss this bug"
    return "error", f"pytest exited with {tests.returncode} (log: {log}): {output.strip()[-300:]}"


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="mutants to run (default: all of this project's)")
    parser.add_argument("--ops", nargs="+", metavar="STEM", help="only the mutants of these ops (file stems)")
    parser.add_argument("--list", action="store_true", help="list the mutants and check their texts; build nothing")
    parser.add_argument("--jobs", type=int, help="mutants built and tested at once (default: cores / 2, up to 8)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per mutant's tests (default 600)")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies (their logs: mutant.log)")
    args = parser.parse_args()

    mutants = present()
    unknown = [n for n in args.names if n not in {m.name for m in mutants}]
    if unknown:
        parser.error(f"no such mutant in this project: {', '.join(unknown)} (see --list)")
    selected = [m for m in mutants if (not args.names or m.name in args.names) and (not args.ops or m.op in args.ops)]
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
    if not selected:
        print("no mutants selected")
        return 1

    import torch

    if not torch.cuda.is_available():
        print("mutants.py needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 1
    major, minor = torch.cuda.get_device_capability()
    cores = os.cpu_count() or 1
    jobs = max(1, min(len(selected), args.jobs or min(8, cores // 2)))
    share = max(1, cores // jobs)
    files = project_files(ROOT)
    workdir = Path(tempfile.mkdtemp(prefix="mutants-"))
    print(f"{len(selected)} mutants, {jobs} at a time ({share} cores each), sm_{major}{minor}, in {workdir}")
    results = {}
    with ThreadPoolExecutor(jobs) as pool:
        futures = {
            m.name: pool.submit(run_mutant, m, workdir, files, f"{major}.{minor}", share, max(2, share), args.timeout)
            for m in selected
        }
        for name, future in futures.items():
            results[name] = future.result()
            print(f"{results[name][0]:9} {name}: {results[name][1]}", flush=True)
    bad = [name for name, (result, _) in results.items() if result != "killed"]
    if not args.keep and not bad:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{len(results) - len(bad)} of {len(results)} mutants killed"
        + (f"; not killed: {', '.join(bad)}" if bad else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
