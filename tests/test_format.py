"""What the rendered project's pre-commit hooks enforce, checked on renders without them (no network): every C++/CUDA
source is clang-format clean with the project's .clang-format, for all ops together, each op alone and the scaffold's
output (any name length); every text file is free of trailing whitespace and merge markers and ends with one newline;
YAML and TOML files parse; and the hooks' pins match the tool versions these tests use."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from .conftest import ALL_OPS, ALL_PRECISIONS, ROOT, render, run

C_SOURCES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh"}
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "build-ext"}
# tools/new_op.py names: a typical one, the shortest and the longest it accepts (lines that fit or break by length).
NEW_OPS = ["swiglu", "q", "a" * 31 + "b"]
# What pre-commit-hooks' check-merge-conflict looks for at the start of a line.
CONFLICT = re.compile(r"^(<<<<<<< |=======$|>>>>>>> )", re.M)


def pinned(package: str) -> str:
    """The version tests/requirements.txt pins `package` to."""
    text = (ROOT / "tests" / "requirements.txt").read_text()
    found = re.search(rf"^{re.escape(package)}==([\w.]+)", text, re.M)
    assert found, f"tests/requirements.txt does not pin {package}"
    return found[1]


@pytest.fixture(scope="module")
def clang_format() -> str:
    """The pinned clang-format (tests/requirements.txt): the one installed next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / "clang-format"
    path = str(beside) if beside.exists() else shutil.which("clang-format")
    version = pinned("clang-format")
    found = run(path, "--version", check=False).stdout if path else ""
    if f"clang-format version {version}" not in found:
        message = f"clang-format {version} is not installed (pip install clang-format=={version}); found {found!r}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def files(project: Path) -> list[Path]:
    return sorted(
        p for p in project.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.relative_to(project).parts[:-1])
    )


def check_project(project: Path, clang_format: str) -> None:
    assert (project / ".clang-format").is_file()
    sources = [p for p in files(project) if p.suffix in C_SOURCES]
    assert any(p.suffix == ".cu" for p in sources) and any(p.suffix == ".cpp" for p in sources), sources
    result = subprocess.run(
        [clang_format, "--dry-run", "--Werror", *sources], cwd=project, capture_output=True, text=True
    )
    assert result.returncode == 0, f"not clang-format clean (clang-format -i FILE fixes it):\n{result.stderr[-4000:]}"

    problems = []
    for path in files(project):
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        name = path.relative_to(project).as_posix()
        text = data.decode()
        if text and not text.endswith("\n"):
            problems.append(f"{name}: no newline at the end")
        if text.endswith("\n\n") or text == "\n":
            problems.append(f"{name}: blank lines at the end")
        problems += [
            f"{name}:{n}: trailing whitespace" for n, line in enumerate(text.splitlines(), 1) if line != line.rstrip()
        ]
        problems += [f"{name}: merge-conflict marker {m[0]!r}" for m in CONFLICT.finditer(text)]
        try:
            if path.suffix in (".yml", ".yaml"):
                yaml.safe_load(text)  # check-yaml: one document that parses
            elif path.suffix == ".toml":
                tomllib.loads(text)
        except (yaml.YAMLError, tomllib.TOMLDecodeError) as error:
            problems.append(f"{name}: does not parse: {error}")
    assert not problems, "\n".join(problems[:50])


def test_all_ops_all_precisions(tmp_path, clang_format):
    check_project(render(tmp_path / "p", ops=ALL_OPS, precisions=ALL_PRECISIONS), clang_format)


@pytest.mark.parametrize("op", ALL_OPS)
def test_each_op_alone(tmp_path, clang_format, op):
    precision = ALL_PRECISIONS[ALL_OPS.index(op) % len(ALL_PRECISIONS)]
    check_project(render(tmp_path / "p", ops=[op], precisions=[precision]), clang_format)


def test_new_op_output(tmp_path, clang_format):
    """The scaffold's files and its edits of torch_binding.* stay clean whatever the op's name."""
    project = render(tmp_path / "p", ops=[ALL_OPS[0]], precisions=["bf16"])
    for name in NEW_OPS:
        run(sys.executable, "tools/new_op.py", name, cwd=project)
        assert (project / "kernel_src" / f"{name}.cu").is_file()
    check_project(project, clang_format)


def test_pre_commit_pins_match_the_tested_versions(tmp_path):
    config = yaml.safe_load((render(tmp_path / "p") / ".pre-commit-config.yaml").read_text())
    repos = {repo["repo"].rsplit("/", 1)[-1]: repo for repo in config["repos"]}
    assert repos["mirrors-clang-format"]["rev"] == f"v{pinned('clang-format')}"
    assert repos["ruff-pre-commit"]["rev"] == f"v{pinned('ruff')}"
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff-check", "ruff-format", "clang-format", "check-merge-conflict"} <= set(hooks)
    assert set(hooks["clang-format"]["types_or"]) == {"c", "c++", "cuda"}
    assert "--assume-in-merge" in hooks["check-merge-conflict"]["args"]  # copier update's markers, outside a merge
