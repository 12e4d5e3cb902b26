"""The generated requirements/*.txt resolve in a fresh virtual environment (pip --dry-run: nothing is downloaded
beyond metadata), alone and together, and every third-party module the generated Python imports (tests, benchmarks,
torch-ext package, tools, setup.py; optional imports included) is listed in one of them."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ALL_OPS, render

FILES = ["build", "test", "bench", "models"]
# What each file must bring (beyond what it includes with -r), checked in pip's resolution report.
EXPECTED = {
    "build": {"torch", "setuptools", "wheel", "ninja"},
    "test": {"torch", "pytest", "hypothesis", "kernels"},
    "bench": {"torch", "kernels", "rich", "matplotlib", "pyyaml"},
    "models": {"transformers", "diffusers"},
}
# Import name -> distribution, where the two differ. triton comes with torch (a dependency of its Linux wheels).
DISTRIBUTION = {
    "yaml": "pyyaml",
    "liger_kernel": "liger-kernel",
    "quack": "quack-kernels",
    "triton": "torch",
    "xdist": "pytest-xdist",
}
# Calls whose first argument names a module imported at run time (pytest.importorskip, importlib.import_module,
# and the benchmarks' optional(...) and require(...)).
IMPORTING_CALLS = {"importorskip", "import_module", "optional", "require"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("requirements") / "p", ops=ALL_OPS)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    return path / "bin" / "python"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(project: Path) -> dict[str, set[str]]:
    """File -> the distributions it names: requirement lines, and commented ones (`# name>=1.0`: optional)."""
    found = {}
    for name in FILES:
        names = set()
        for line in (project / "requirements" / f"{name}.txt").read_text().splitlines():
            match = re.match(r"\s*(#\s*)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(>=|==|~=|<|;|$)", line)
            if match and not (match[1] and match[4] in ("", ";")):  # a comment names a requirement with a version
                names.add(normalize(match[2]))
        found[name] = names
    return found


@pytest.mark.parametrize("files", [[name] for name in FILES] + [["test", "bench", "models"]], ids="+".join)
def test_installable_in_a_fresh_venv(project, venv, files, tmp_path):
    report = tmp_path / "report.json"
    requirements = [arg for name in files for arg in ("-r", f"requirements/{name}.txt")]
    result = subprocess.run(
        [venv, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, *requirements],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = {normalize(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    expected = set().union(*(EXPECTED[name] for name in files))
    assert expected <= resolved, f"{files}: {sorted(expected - resolved)} not resolved"


def imported_modules(path: Path) -> set[str]:
    """Top-level modules of a file's absolute imports, and of string constants given to IMPORTING_CALLS."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in IMPORTING_CALLS and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return {module.split(".")[0] for module in found}


def test_every_import_is_listed(project):
    sources = [p for p in project.rglob("*.py") if ".git" not in p.parts]
    local = {p.stem for p in sources} | {p.parent.name for p in sources if p.name == "__init__.py"}
    third_party = {}
    for source in sources:
        for module in imported_modules(source) - local - set(sys.stdlib_module_names) - {"__future__"}:
            third_party.setdefault(module, []).append(str(source.relative_to(project)))
    assert {"torch", "kernels", "pytest", "transformers", "diffusers", "liger_kernel", "quack"} <= set(third_party)
    names = set().union(*listed(project).values())
    missing = {
        module: files
        for module, files in third_party.items()
        if normalize(DISTRIBUTION.get(module, module)) not in names
    }
    assert not missing, f"imported but in no requirements/*.txt (module: files): {missing}"
