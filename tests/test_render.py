"""Render a matrix of answers covering every op (alone and together), every GPU and every precision, and check
each project: files, build.toml (upstream parser), flake.nix, Python lint, git state and determinism."""

from __future__ import annotations

import filecmp
import os
import re
import sys
import tomllib

import pytest
from kernels._rust import Build

from .conftest import (
    ALL_GPUS,
    ALL_OPS,
    ALL_PRECISIONS,
    GPU_SPECS,
    ROOT,
    STEMS,
    render,
    require_tool,
    run,
)

# Every op alone and all together; every GPU and every precision at least once (a cover, not the full product).
MATRIX = {
    "rmsnorm-t4-fp16": dict(ops=["rmsnorm"], gpus=["t4"], precisions=["fp16"]),
    "rope3d-a100-l4-bf16": dict(ops=["rope3d"], gpus=["a100", "l4"], precisions=["bf16"]),
    "geglu-a10g-h100-fp32": dict(ops=["geglu"], gpus=["a10g", "h100"], precisions=["fp32"]),
    "adaln-l40s-b200-bf16-fp16": dict(ops=["adaln"], gpus=["l40s", "b200"], precisions=["bf16", "fp16"]),
    "rmsnorm-adaln-h200-fp32-bf16": dict(ops=["rmsnorm", "adaln"], gpus=["h200"], precisions=["fp32", "bf16"]),
    "rope3d-geglu-t4-h200-fp16-fp32": dict(ops=["rope3d", "geglu"], gpus=["t4", "h200"], precisions=["fp16", "fp32"]),
    "all": dict(ops=ALL_OPS, gpus=ALL_GPUS, precisions=ALL_PRECISIONS),
}
assert {op for a in MATRIX.values() for op in a["ops"]} == set(ALL_OPS)
assert {g for a in MATRIX.values() for g in a["gpus"]} == set(ALL_GPUS)
assert {p for a in MATRIX.values() for p in a["precisions"]} == set(ALL_PRECISIONS)


@pytest.fixture(scope="module", params=list(MATRIX))
def project(request, tmp_path_factory):
    answers = dict(
        name=f"k-{request.param}",
        repo_id=f"test-org/k-{request.param}",
        **MATRIX[request.param],
    )
    return render(tmp_path_factory.mktemp("render") / request.param, **answers), answers


def capabilities(gpus):
    return sorted({GPU_SPECS[g]["compute_capability"] for g in gpus}, key=float)


def test_expected_files(project):
    path, answers = project
    pkg = answers["name"].replace("-", "_")
    for name in [
        "AGENTS.md",
        "docs/gpu-guide.md",
        "docs/diffusers.md",
        "docs/hub.md",
        "build.toml",
        "flake.nix",
        "CARD.md",
        "README.md",
        "setup.py",
        ".gitignore",
        "gpus.yml",
        ".copier-answers.yml",
        "torch-ext/torch_binding.cpp",
        "torch-ext/torch_binding.h",
        f"torch-ext/{pkg}/__init__.py",
        f"torch-ext/{pkg}/layers.py",
        f"torch-ext/{pkg}/patching.py",
        f"torch-ext/{pkg}/_common.py",
        "torch-ext/checks.h",
        "torch-ext/autograd.h",
        *[
            f"kernel_src/{helper}"
            for helper in ["config.h", "dispatch.cuh", "vec.cuh", "reduce.cuh", "launch.cuh", "rows.h"]
        ],
        "tests/__init__.py",
        "tests/conftest.py",
        "tests/utils.py",
        "tests/fuzz.py",
        "tests/huge.py",
        "tools/sanitize.sh",
        "tests/multi_gpu.py",
        "tests/test_models.py",
        "tests/test_multi_gpu_train.py",
        "benchmarks/bench.py",
        "benchmarks/e2e.py",
        "benchmarks/multi_gpu_train.py",
        "docs/multi-gpu.md",
    ]:
        assert (path / name).is_file(), name
    assert (path / "docs/transformers.md").is_file() == ("rmsnorm" in answers["ops"])  # kernelize covers RMSNorm
    for op, stem in STEMS.items():
        chosen = op in answers["ops"]
        for name in [
            f"kernel_src/{stem}.cu",
            f"kernel_src/{stem}.h",
            f"torch-ext/{stem}.cpp",
            f"benchmarks/cases/{stem}.py",
            f"torch-ext/{pkg}/{stem}.py",
            f"tests/test_{stem}.py",
        ]:
            assert (path / name).is_file() == chosen, f"{name} present={not chosen} for ops={answers['ops']}"
    assert (path / "CARD.md").read_text() == (ROOT / "template" / "CARD.md").read_text()  # kernel-builder fills it
    assert not (path / "pyproject.toml").exists()  # kernel-builder's create-pyproject owns that file


def test_build_toml(project):
    path, answers = project
    Build.open(str(path))  # the parser kernel-builder itself uses: raises on any schema error
    config = tomllib.loads((path / "build.toml").read_text())
    general = config["general"]
    assert general["edition"] == 5 and general["name"] == answers["name"] and general["version"] == 1
    assert general["backends"] == ["cuda"] and general["hub"]["repo-id"] == answers["repo_id"]
    assert set(config["kernel"]) == {STEMS[op] for op in answers["ops"]}
    listed = set(config["torch"]["src"])
    for kernel in config["kernel"].values():
        assert kernel["cuda-capabilities"] == capabilities(answers["gpus"])
        listed.update(kernel["src"])
    on_disk = {str(p.relative_to(path)) for p in path.rglob("*") if p.suffix in {".cu", ".cuh", ".h", ".cpp"}}
    assert listed == on_disk, "every source and header must be listed in build.toml (Nix copies only those)"


def test_gpu_guide_has_each_chosen_gpu(project):
    path, answers = project
    guide = (path / "docs" / "gpu-guide.md").read_text()
    for gpu, spec in GPU_SPECS.items():
        heading = f"## {spec['name']} (`{gpu}`, compute capability {spec['compute_capability']})"
        assert (heading in guide) == (gpu in answers["gpus"]), heading
        if gpu in answers["gpus"]:
            section = guide.split(heading, 1)[1].split("\n## ", 1)[0]
            assert f"| SMs | {spec['sms']} |" in section and f"{spec['bandwidth_gbs']} GB/s" in section


def test_config_h_matches_precisions(project):
    path, answers = project
    config_h = (path / "kernel_src" / "config.h").read_text()
    for precision, macro in [
        ("fp32", "FLOAT32"),
        ("fp16", "FLOAT16"),
        ("bf16", "BFLOAT16"),
    ]:
        assert f"#define CKT_WITH_{macro} {int(precision in answers['precisions'])}" in config_h


def test_flake_parses(project):
    path, _ = project
    run(require_tool("nix-instantiate"), "--parse", path / "flake.nix")


def test_shell_scripts_are_shellcheck_clean(project):
    path, _ = project
    scripts = sorted(path.rglob("*.sh"))
    assert path / "tools" / "sanitize.sh" in scripts
    for script in scripts:
        run("bash", "-n", script)
        run(require_tool("shellcheck"), script, cwd=path)


def test_python_is_lint_clean(project):
    path, _ = project
    run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=path)
    run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", ".", cwd=path)


def test_long_name_stays_lint_clean(tmp_path):
    """Names and repo ids are rendered into docstrings and doc examples: a long one must not push lines past 120."""
    name = "a-very-long-kernel-name-for-a-project-that-fuses-many-ops-ab"  # 60: the longest name copier.yml takes
    path = render(tmp_path / "p", name=name, repo_id=f"some-organization/{name}", ops=ALL_OPS)  # 78 of 80
    run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=path)
    run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", ".", cwd=path)


def test_no_template_leftovers_and_no_machine_paths(project):
    path, answers = project
    pkg = answers["name"].replace("-", "_")
    for file in path.rglob("*"):
        if ".git" in file.parts or not file.is_file():
            continue
        relative = str(file.relative_to(path))
        source = relative.replace(f"torch-ext/{pkg}/", "torch-ext/{{ python_name }}/")
        text = file.read_text()
        if relative == ".copier-answers.yml":  # records where the template came from, for `copier update`
            text = "\n".join(line for line in text.splitlines() if not line.startswith("_src_path:"))
        if not (ROOT / "template" / source).is_file():  # rendered from a .jinja file, not copied verbatim
            assert not re.search(r"\{\{|\{%|\{#", text), f"unrendered Jinja in {relative}"
        assert str(path) not in text and "/tmp/" not in text, f"a machine path was rendered into {relative}"


def test_git_repository_tracks_everything(project):
    path, _ = project
    assert run("git", "status", "--porcelain", cwd=path).stdout == ""
    tracked = set(run("git", "ls-files", cwd=path).stdout.split())
    on_disk = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert tracked == on_disk


def test_render_is_deterministic(tmp_path):
    answers = MATRIX["all"]
    a, b = render(tmp_path / "a", **answers), render(tmp_path / "b", **answers)
    files = [str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and ".git" not in p.parts]
    answers_file = ".copier-answers.yml"  # its _commit names a temporary commit when the template tree is dirty
    match, mismatch, errors = filecmp.cmpfiles(a, b, [f for f in files if f != answers_file], shallow=False)
    assert not mismatch and not errors and len(match) == len(files) - 1

    def recorded(project):
        return [line for line in (project / answers_file).read_text().splitlines() if not line.startswith("_commit:")]

    assert recorded(a) == recorded(b)
    assert os.listdir(a) == os.listdir(b)


def test_sources_stay_short(project):
    """One op = its own files, helpers split by concern: no rendered source (tests aside) over 600 lines."""
    path, _ = project
    for file in path.rglob("*"):
        if file.suffix in {".cu", ".cuh", ".h", ".cpp", ".py"} and "tests" not in file.relative_to(path).parts:
            assert len(file.read_text().splitlines()) <= 600, file.relative_to(path)


def test_unchosen_ops_leave_nothing_in_the_sources(project):
    path, answers = project
    for op, stem in STEMS.items():
        if op in answers["ops"]:
            continue
        for folder in ["kernel_src", "torch-ext", "benchmarks/cases", "benchmarks/bench.py"]:
            for file in [path / folder] if (path / folder).is_file() else (path / folder).rglob("*"):
                if file.is_file():
                    assert not re.search(rf"\b{stem}\b", file.read_text()), f"{op} left in {file.relative_to(path)}"
