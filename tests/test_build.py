"""One full project (all ops, all precisions) builds with its setup.py against this machine's torch, loads the way
users load it (staged build/, LOCAL_KERNELS + get_kernel, editable install), passes the abi3 check, and its own
test suite runs (everything skips without a GPU, nothing errors)."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest
from kernel_abi_check import ObjectFile

from .conftest import ALL_OPS, ALL_PRECISIONS, cuda_home, render, run

REPO_ID = "ci-org/ci-kernel"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    project = render(
        tmp_path_factory.mktemp("build") / "ci-kernel",
        name="ci-kernel",
        repo_id=REPO_ID,
        ops=ALL_OPS,
        precisions=ALL_PRECISIONS,
        gpus=["h100", "h200"],
    )
    env = {"CUDA_HOME": str(cuda_home()), "MAX_JOBS": "2"}
    run(sys.executable, "setup.py", "build_kernel", cwd=project, env=env)
    variants = list((project / "build").glob("torch*-cxx11-cu*-linux"))
    assert len(variants) == 1, variants
    return project, variants[0], env


def test_staged_variant_layout(built):
    project, variant, _ = built
    metadata = json.loads((variant / "metadata.json").read_text())
    ops_name = metadata["id"]
    assert metadata["name"] == "ci-kernel" and metadata["version"] == 1 and metadata["license"] == "Apache-2.0"
    assert metadata["backend"] == {"type": "cuda", "archs": ["9.0"]} and metadata["python-depends"] == []
    assert ops_name.startswith("_ci_kernel_cuda_")
    assert (variant / f"{ops_name}.abi3.so").is_file() and (variant / "__init__.py").is_file()
    assert f"torch.ops.{ops_name}" in (variant / "_ops.py").read_text()


LOAD = textwrap.dedent(
    """
    import pathlib, sys, kernels
    how, path = sys.argv[1], pathlib.Path(sys.argv[2])
    if how == "local":
        kernel = kernels.get_local_kernel(path)
    elif how == "hub":
        kernel = kernels.get_kernel("{repo}", version=1)
    else:
        import ci_kernel as kernel
    names = {{"rms_norm", "fused_add_rms_norm", "rope3d", "rope3d_qk", "rope3d_qk_grid", "ltx_rope_cos_sin",
             "geglu", "adaln"}}
    assert names <= set(kernel.__all__), kernel.__all__
    print(kernel.__name__)
    """
).format(repo=REPO_ID)


def test_loads_through_kernels(built):
    project, variant, _ = built
    ops_name = json.loads((variant / "metadata.json").read_text())["id"]
    assert run(sys.executable, "-c", LOAD, "local", project / "build").stdout.strip() == ops_name
    hub = run(
        sys.executable,
        "-c",
        LOAD,
        "hub",
        "-",
        env={"LOCAL_KERNELS": f"{REPO_ID}={project}"},
    )
    assert hub.stdout.strip() == ops_name


def test_abi3_and_manylinux(built):
    _, variant, _ = built
    library = ObjectFile(str(next(variant.glob("*.abi3.so"))))
    assert library.check_python_abi("3.9") == [], "the extension must use only the Python 3.9 limited API (abi3)"
    # A local toolchain newer than manylinux_2_28 (glibc 2.28) may pull in newer glibc symbols; Hub-compliant
    # binaries come from the Nix build. Anything else (C++ runtime, Python) would be a real defect.
    for violation in library.check_manylinux("manylinux_2_28"):
        print("manylinux_2_28:", violation)
        assert violation.dep == "GLIBC", violation


# Documented commands CI cannot run, and why. Every other command of the generated README.md and AGENTS.md runs in
# test_documented_commands; a new documented command fails that test until it runs there or is listed here.
NOT_RUN_HERE = {
    "kernel-builder build-and-copy -L": "the Nix build of every Hub variant (kernel-builder, Nix)",
    "kernel-builder testshell": "a shell on the Nix build",
    "kernel-builder build-and-upload": "uploads to the Hub",
    "copier update --trust --defaults": "tests/test_update.py runs it against a tagged template",
    "python -m pip install -r requirements/test.txt": "would install torch & co. into the tests' own environment; "
    "tests/test_requirements.py resolves every requirements file in a fresh virtual environment",
    "bash tools/sanitize.sh": "compute-sanitizer over the sanitize cases: needs a GPU and the CUDA toolkit's "
    "compute-sanitizer; tests/test_render.py runs bash -n and shellcheck on it",
    "kernels benchmark ./": "runs benchmarks/benchmark.py on a GPU (and needs kernels[benchmark])",
    "python tests/mutants.py --dtypes bf16": "builds and tests every mutant: needs a GPU and nvcc; "
    "tests/test_mutants.py checks the mutants and the runner without one",
    "torchrun --nproc-per-node 2 benchmarks/multi_gpu_train.py": "trains on 2 GPUs (NCCL); the project's "
    "tests/test_multi_gpu_train.py runs it on a machine that has them",
    "python benchmarks/bench.py --quick --compare benchmarks/before/results.json": "a benchmark run: needs a GPU",
    "python benchmarks/bench.py --compare benchmarks/before/results.json benchmarks/results/results.json": "needs "
    "two saved runs; tests/test_bench_tools.py runs --compare on made-up results.json files",
}
GPU_SCRIPTS = ("python benchmarks/bench.py", "python benchmarks/e2e.py")  # GPU-only: --help, flags checked


def documented_commands(project) -> dict[str, list[str]]:
    """Shell lines of the README's bash blocks and code spans of AGENTS.md's command table (a span with a space), in
    order, each with the --flags documented right after it."""
    found: dict[str, list[str]] = {}
    last = None
    spans = []
    for block in re.findall(r"```bash\n(.*?)```", (project / "README.md").read_text(), re.S):
        spans += [re.split(r"\s{2,}#", line)[0].strip() for line in block.splitlines()]
    for _, cell in re.findall(r"^\|([^|\n]*)\|([^\n]*)\|$", (project / "AGENTS.md").read_text(), re.M):
        spans += re.findall(r"`([^`]+)`", cell)
    for span in spans:
        if span.startswith("--") and last:
            found[last].append(span)
        elif " " in span:
            last = span
            found.setdefault(span, [])
    return found


def test_documented_commands(built):
    """Each command of the README and AGENTS.md, run in the project as a user would: build in place, tests (they
    skip without a GPU), staged build and both kernels loaders, lint, test listing, benchmark listing, commit."""
    project, _, env = built
    env = {**env, "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com"}
    env |= {"GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.com"}
    commands = documented_commands(project)
    assert {"python -m pip install --no-build-isolation -e .", "python -m pytest tests"} <= set(commands), commands
    try:
        for command, flags in commands.items():
            if command in NOT_RUN_HERE:
                continue
            if command in GPU_SCRIPTS:
                usage = run("bash", "-c", f"{command} --help", cwd=project, env=env).stdout
                assert all(flag in usage for flag in flags), f"{command} lacks one of {flags}:\n{usage}"
                continue
            assert not flags, f"{command}: flags {flags} are only checked for {GPU_SCRIPTS}"
            if command.startswith("git add -A && git commit"):
                (project / "NOTES.md").write_text("An edit to commit.\n")  # a fresh project has nothing to commit
            result = run("bash", "-c", command, cwd=project, env=env, check=False)
            output = result.stdout + result.stderr
            assert result.returncode == 0, f"{command!r} failed ({result.returncode}):\n{output[-3000:]}"
            if "pytest tests" in command and "--collect-only" not in command:
                assert " skipped" in output and " passed" not in output, output[-3000:]  # no GPU: all skip
            if command == "python -m pip install --no-build-isolation -e .":
                assert run(sys.executable, "-c", LOAD, "package", "-", cwd="/").stdout.strip() == "ci_kernel"
            if command == "python benchmarks/bench.py --dry-run":
                assert all(op in output for op in ALL_OPS), output
            if command == "python benchmarks/e2e.py --dry-run":
                assert all(f"\n{model} " in output for model in ("qwen3", "ltx", "sd")), output
            if command == "python -m pytest tests --collect-only -q":
                assert re.search(r"\d+ tests collected", output), output[-3000:]
    finally:
        run(sys.executable, "-m", "pip", "uninstall", "-y", "ci_kernel", check=False)


# Bad arguments to the GPU scripts: argparse's one-line error (exit status 2), before anything needs a GPU.
BAD_ARGUMENTS = [
    ("e2e.py", "--layers 0", "--layers, --iters and --rounds must be at least 1"),
    ("e2e.py", "--control --no-compile", "--control is a torch.compile variant: it cannot go with --no-compile"),
    ("e2e.py", "--models nope", "--models: nope not available for this project's ops"),
    ("bench.py", "--ops nope", "--ops: nope not in this project"),
]


@pytest.mark.parametrize(("script", "arguments", "message"), BAD_ARGUMENTS)
def test_benchmark_scripts_reject_bad_arguments(built, script, arguments, message):
    project, _, env = built
    result = run(sys.executable, f"benchmarks/{script}", *arguments.split(), cwd=project, env=env, check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and last.startswith(f"{script}: error: {message}"), result.stderr
