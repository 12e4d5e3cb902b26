"""Sessions for the template's own development: `nox -s tests` (what CI runs) and `nox -s lint`."""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"
RUFF = ["--isolated", "--line-length", "120"]
LINTED = ["noxfile.py", "hooks", "tests", "docs/results/summarize.py"]


def cuda_home() -> str | None:
    """CUDA_HOME, else the toolkit root (a `nvcc` on PATH may be a wrapper script outside it)."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    roots = [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"))]
    return next((str(r) for r in roots if (r / "bin" / "nvcc").exists()), None)


@nox.session
def tests(session: nox.Session) -> None:
    """Render, lint, compile, build and update generated projects (a CPU machine with nvcc is enough)."""
    # pip >= 25 builds `pip install --no-build-isolation -e .` through PEP 660; older pips fall back to
    # `setup.py develop`, which re-enters pip with build isolation and cannot see torch.
    session.install("--upgrade", "pip>=25")
    session.install("-r", "tests/requirements.txt")
    env = {"CUDA_HOME": cuda_home()} if cuda_home() else {}
    session.run("pytest", "tests", *session.posargs, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """Lint the template's own Python (rendered projects are linted by the tests)."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", *RUFF, "--select", "E,F,W,I,B,UP", *LINTED)
    session.run("ruff", "format", *RUFF, "--check", *LINTED)
