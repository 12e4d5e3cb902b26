"""tools/new_op.py in a generated project: it adds an op (six files from the skeleton, registrations in the marked
places) that stays lint-clean, parses with kernel-builder's parser, builds with setup.py and has tests to collect;
and it refuses bad names, names that exist and folders that are not a project, changing nothing."""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
import tomllib

import pytest
from kernels._rust import Build

from .conftest import STEMS, cuda_home, render, run

PACKAGE = "op_kernel"
FILES = [
    "kernel_src/swiglu.cu",
    "kernel_src/swiglu.h",
    "torch-ext/swiglu.cpp",
    f"torch-ext/{PACKAGE}/swiglu.py",
    "tests/test_swiglu.py",
    "benchmarks/cases/swiglu.py",
]
CHANGED = ["build.toml", "torch-ext/torch_binding.h", "torch-ext/torch_binding.cpp", f"torch-ext/{PACKAGE}/__init__.py"]


def new_op(project, *args):
    return run(sys.executable, "tools/new_op.py", *args, cwd=project, check=False)


def snapshot(project):
    """Every file's text outside .git and the build folders: what a refused call must leave as it was."""
    skip = {".git", "build-ext", "__pycache__", ".pytest_cache", ".ruff_cache"}
    return {
        str(p.relative_to(project)): p.read_bytes()
        for p in project.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(project).parts)
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project with rmsnorm, then swiglu added by the scaffold; built once with setup.py build_ext."""
    path = render(
        tmp_path_factory.mktemp("new-op") / "op-kernel",
        name="op-kernel",
        ops=["rmsnorm"],
        precisions=["bf16", "fp32"],
        gpus=["h100"],
    )
    before = snapshot(path)
    result = new_op(path, "swiglu")
    assert result.returncode == 0, result.stdout + result.stderr
    env = {"CUDA_HOME": str(cuda_home()), "MAX_JOBS": "2", "CUDA_CAPABILITIES": "9.0"}
    build = run(sys.executable, "setup.py", "build_ext", cwd=path, env=env, check=False)
    return path, before, result.stdout, build


def test_creates_the_files_and_says_what_to_fill_in(project):
    path, before, output, _ = project
    for name in FILES:
        assert (path / name).is_file() and name not in before, name
        assert f"  {name}\n" in output, f"{name} not listed:\n{output}"
    for name in CHANGED:
        assert f"  {name}\n" in output, f"{name} not listed:\n{output}"
    changed = {name for name, text in snapshot(path).items() if name in before and before[name] != text}
    assert changed == set(CHANGED), changed  # nothing else is touched
    todo = {name: (path / name).read_text().count("TODO(math):") for name in FILES}
    assert todo == {
        "kernel_src/swiglu.cu": 2,  # f and f'
        "kernel_src/swiglu.h": 0,
        "torch-ext/swiglu.cpp": 0,
        f"torch-ext/{PACKAGE}/swiglu.py": 0,
        "tests/test_swiglu.py": 1,  # the float64 reference
        "benchmarks/cases/swiglu.py": 1,  # the eager baseline
    }
    for name, count in todo.items():
        assert output.count(f"  {name}:") == count, output
    assert "kernel_src/swiglu.cu" in output and "tests/test_swiglu.py" in output
    assert not re.search(r"\$\{?(op|Op|OP|package)\b", "".join((path / name).read_text() for name in FILES))


def marked_region(text, marker, end=None):
    """The text after the line holding `marker`, up to the first line after it that starts with `end` (or the end)."""
    after = text.split(marker, 1)[1].split("\n", 1)[1]
    if end is None:
        return after
    return after[: re.search(rf"^\s*{re.escape(end)}", after, re.M).start()]


def test_registers_the_op_in_the_marked_places(project):
    path, before, _, _ = project
    build_toml = (path / "build.toml").read_text()
    config = tomllib.loads(build_toml)
    src = marked_region(build_toml, "# Bindings of your own ops", "]")
    assert src.strip() == '"torch-ext/swiglu.cpp",', src
    assert config["torch"]["src"][-1] == "torch-ext/swiglu.cpp"
    assert "\n[kernel.swiglu]\n" in marked_region(build_toml, "# Your own ops' [kernel.<op>] sections go below")
    assert list(config["kernel"]) == ["rms_norm", "swiglu"]
    rms_norm, swiglu = config["kernel"]["rms_norm"], config["kernel"]["swiglu"]
    assert swiglu["cuda-capabilities"] == rms_norm["cuda-capabilities"] == ["9.0"]
    assert swiglu["backend"] == "cuda" and swiglu["depends"] == ["torch"]
    helpers = [s for s in rms_norm["src"] if not s.startswith("kernel_src/rms_norm.")]
    assert swiglu["src"] == [*helpers, "kernel_src/swiglu.cu", "kernel_src/swiglu.h"]
    for name in CHANGED:  # lines added, none changed or removed
        old, new = before[name].decode().splitlines(), (path / name).read_text().splitlines()
        assert not [line for line in difflib.ndiff(old, new) if line.startswith(("- ", "? "))], name

    header = (path / "torch-ext/torch_binding.h").read_text()
    assert marked_region(header, "// Your own ops").strip() == "void register_swiglu(torch::Library& ops);"
    binding = (path / "torch-ext/torch_binding.cpp").read_text()
    assert marked_region(binding, "// Your own ops", "}").strip() == "register_swiglu(ops);"
    init = (path / f"torch-ext/{PACKAGE}/__init__.py").read_text()
    added = marked_region(init, "# Your own ops (tools/new_op.py adds them below").strip()
    assert added == 'from .swiglu import swiglu  # noqa: E402\n\n__all__ += ["swiglu"]'


def test_lint_clean_and_parses(project):
    path, _, _, _ = project
    run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=path)
    run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", ".", cwd=path)
    Build.open(str(path))  # kernel-builder's own parser


def test_builds_and_collects_its_tests(project):
    path, _, _, build = project
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert list((path / "torch-ext" / PACKAGE).glob(f"_{PACKAGE}_cuda_*.so")), "no extension was built"
    collected = run(sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_swiglu.py", cwd=path).stdout
    count = re.search(r"(\d+) tests collected", collected)
    assert count and int(count[1]) > 0, collected[-3000:]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("swiglu", "swiglu already exists: kernel_src/swiglu.cu"),
        ("rms_norm", "rms_norm already exists: kernel_src/rms_norm.cu"),
        ("fused_add_rms_norm", "fused_add_rms_norm already exists: fused_add_rms_norm in torch-ext/"),
        ("config", "config already exists: kernel_src/config.h"),
        ("geglu", "'geglu' is one of the template's ops"),
        ("SwiGLU", "'SwiGLU' is not a lowercase snake_case identifier"),
        ("my-op", "'my-op' is not a lowercase snake_case identifier"),
        ("2x", "'2x' is not a lowercase snake_case identifier"),
        ("class", "'class' is a reserved word"),
        ("torch", "'torch' is a reserved word"),
        ("a" * 33, f"'{'a' * 33}' is longer than 32 characters"),
    ],
)
def test_refuses_bad_or_taken_names(project, name, message):
    path = project[0]
    before = snapshot(path)
    result = new_op(path, name)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.stderr
    assert snapshot(path) == before, "a refused call changed files"


def test_refuses_outside_a_project(project, tmp_path):
    script = project[0] / "tools" / "new_op.py"
    result = run(sys.executable, script, "swiglu", cwd=tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: run this in the root of a generated project (the folder with build.toml and torch-ext/)"
    )
    assert list(tmp_path.iterdir()) == []


def test_more_ops_and_the_longest_name_stay_clean(tmp_path):
    """Each op is appended at the end of its region; the longest allowed name keeps every line within 120 columns."""
    path = render(tmp_path / "p", ops=["geglu", "adaln"], precisions=["fp16"], gpus=["t4", "h100"])
    longest = "a" * 31 + "b"
    for name in ["swiglu", longest, "x2"]:
        result = new_op(path, name)
        assert result.returncode == 0, result.stdout + result.stderr
    run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=path)
    run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", ".", cwd=path)
    Build.open(str(path))
    config = tomllib.loads((path / "build.toml").read_text())
    assert list(config["kernel"]) == ["geglu", "adaln", "swiglu", longest, "x2"]
    assert all(k["cuda-capabilities"] == ["7.5", "9.0"] for k in config["kernel"].values())
    assert config["torch"]["src"][-3:] == ["torch-ext/swiglu.cpp", f"torch-ext/{longest}.cpp", "torch-ext/x2.cpp"]
    binding = (path / "torch-ext/torch_binding.cpp").read_text()
    assert re.search(r"register_swiglu\(ops\);\n  register_a+b\(ops\);\n  register_x2\(ops\);\n}", binding)
    files = list(path.rglob(f"*{longest}*"))
    assert len(files) == len(FILES), files
    for file in files:  # C++ too, which no linter checks
        for number, line in enumerate(file.read_text().splitlines(), 1):
            assert len(line) <= 120, f"{file.relative_to(path)}:{number} is {len(line)} columns"


def test_knows_the_template_ops(project):
    """new_op.py refuses the stems of the template's own ops, chosen or not (a later `copier update` could add them):
    its list is rendered from ops.yml."""
    path, _, _, _ = project
    spec = importlib.util.spec_from_file_location("new_op", path / "tools" / "new_op.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TEMPLATE_STEMS == set(STEMS.values())
