"""A generated project's tests skip without a GPU, except where a GPU is expected: with REQUIRE_GPU=1 (the GPU
workflow sets it) a machine whose CUDA does not work fails at once, saying why, instead of passing with every test
skipped. This machine has no GPU, so both sides can be seen here."""

from __future__ import annotations

import sys

from .conftest import render, run


def test_require_gpu_turns_the_skips_into_a_failure(tmp_path):
    project = render(tmp_path / "p", ops=["geglu"])
    skipped = run(sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", cwd=project, check=False)
    assert skipped.returncode == 0 and " skipped" in skipped.stdout and " passed" not in skipped.stdout
    required = run(
        sys.executable,
        "-m",
        "pytest",
        "tests",
        "-q",
        "-p",
        "no:cacheprovider",
        cwd=project,
        env={"REQUIRE_GPU": "1"},
        check=False,
    )
    output = required.stdout + required.stderr
    assert required.returncode != 0, output
    assert "REQUIRE_GPU is set but CUDA does not work here: " in output, output
