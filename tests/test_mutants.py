"""The generated project's mutants (tests/mutants.py: deliberately broken kernels its tests must reject) still match
the kernel sources they break, and only the chosen ops' mutants are run. Cheap: renders, builds nothing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

from .conftest import ALL_OPS, STEMS, render, run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return render(tmp_path_factory.mktemp("mutants") / "all", ops=ALL_OPS)


def load_mutants(path):
    spec = importlib.util.spec_from_file_location(f"mutants_{id(path)}", path / "tests" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutant_matches_its_source_once(project):
    mutants = load_mutants(project)
    assert mutants.present(project) == mutants.MUTANTS, "every mutant's op is in a project with all ops"
    assert mutants.mismatches(project) == []
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names)), "mutant names must be unique"
    for m in mutants.MUTANTS:
        assert m.op in STEMS.values() and m.file == f"kernel_src/{m.op}.cu" and m.tests == (f"tests/test_{m.op}.py",)
    assert {m.op for m in mutants.MUTANTS} == set(STEMS.values()), "every op has mutants"


def test_list_checks_the_texts_without_a_gpu(project):
    listed = run(sys.executable, "tests/mutants.py", "--list", cwd=project).stdout
    assert all(m.name in listed for m in load_mutants(project).MUTANTS)
    cu = project / "kernel_src" / "geglu.cu"
    original = cu.read_text()
    try:  # a kernel edit that moves a mutant's text: --list fails and names the mutant
        cu.write_text(original.replace("y = mul_rounded(value[u], act);", "y = act;"))
        result = run(sys.executable, "tests/mutants.py", "--list", cwd=project, check=False)
        assert result.returncode == 1 and "stale: geglu.rounds_once" in result.stdout, result.stdout
    finally:
        cu.write_text(original)


def test_only_the_chosen_ops_mutants(tmp_path):
    path = render(tmp_path / "p", ops=["geglu"], precisions=["fp32"])
    mutants = load_mutants(path)
    assert {m.op for m in mutants.present(path)} == {"geglu"}
    assert not any(m.half_only for m in mutants.present(path)), "a moved bf16/fp16 rounding changes nothing in fp32"
    assert any(m.half_only for m in mutants.MUTANTS if m.op == "geglu")
    result = run(sys.executable, "tests/mutants.py", "--ops", "rms_norm", cwd=path, check=False)
    assert result.returncode == 1 and "no mutants selected" in result.stdout, result.stdout


def test_runs_keep_a_files_mutants_together_and_the_queue_hands_out_each_once(project):
    mutants = load_mutants(project)
    for workers in range(1, 9):
        runs = mutants.assign(mutants.MUTANTS, workers)
        assert len(runs) == workers and max(map(len, runs)) - min(map(len, runs)) <= 1
        assert [m for run in runs for m in run] == sorted(mutants.MUTANTS, key=lambda m: m.file), "file by file"
        queue = mutants.Queue(runs)
        taken = []
        while (m := queue.take(0)) is not None:  # one worker alone: its run, then the others' from their ends
            taken.append(m)
        assert taken[: len(runs[0])] == runs[0] and sorted(taken, key=id) == sorted(mutants.MUTANTS, key=id)


# (exit status, pytest -x -q -rs output) -> result: a test failure kills; only passing tests make a survivor.
OUTCOMES = [
    (1, "FAILED tests/test_geglu.py::test_values[bfloat16-3] - AssertionError\n1 failed, 7 passed in 9.1s", "killed"),
    (
        2,
        "FAILED tests/test_geglu.py::test_x - assert\n!!! xdist.dsession.Interrupted !!!\n1 failed, 3 passed in 5s",
        "killed",
    ),
    (0, "56 passed, 1 skipped in 30.2s", "survived"),
    (0, "SKIPPED [48] tests/test_geglu.py:96: needs a CUDA GPU\n56 skipped in 0.5s", "error"),
    (5, "no tests ran in 0.01s", "error"),
    (4, "ERROR: REQUIRE_GPU is set but CUDA does not work here\nno tests ran in 0.05s", "error"),
    (1, "ERROR tests/test_geglu.py::test_x - ImportError\n3 passed, 1 error in 2s", "error"),
    (None, "", "error"),
]


@pytest.mark.parametrize("status, output, result", OUTCOMES)
def test_outcome_of_a_test_run(project, status, output, result):
    got, detail = load_mutants(project).outcome(status, output, timeout=600)
    assert got == result, detail
    if status == 0 and result == "error":
        assert detail.startswith("tests did not run: SKIPPED"), detail


def test_a_mutant_is_built_in_place_and_its_source_restored_exactly(project, tmp_path, monkeypatch):
    mutants = load_mutants(project)
    m = next(m for m in mutants.MUTANTS if m.op == "geglu")
    source = project / m.file
    original = source.read_bytes()
    built = []

    def build(copy, env, log):  # stands in for setup.py: what it would compile, and an object older than that
        built.append(source.read_text())
        obj = copy / "build-ext" / "temp.x" / "kernel_src" / "geglu.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(b"")
        os.utime(obj, ns=(0, 0))

    monkeypatch.setattr(mutants, "build", build)
    settings = mutants.Settings("9.0", 1, 1, ("bf16",), 60)
    result, detail = mutants.run_mutant(m, project, {}, settings, tmp_path / "log")
    assert built == [original.decode().replace(m.old, m.new, 1)], "the build saw the mutant, once"
    assert result == "error" and detail.startswith(f"the build did not recompile {m.file}"), detail
    assert source.read_bytes() == original, "the source is restored byte for byte"
    shutil.rmtree(project / "build-ext")


def test_dtypes_select_the_tests_dtypes(tmp_path):
    path = render(tmp_path / "p", ops=["geglu"], precisions=["bf16", "fp32"])
    result = run(sys.executable, "tests/mutants.py", "--dtypes", "bf16,fp16", cwd=path, check=False)
    assert (
        result.returncode == 2 and "--dtypes: fp16 not compiled in this project (compiled: bf16, fp32)" in result.stderr
    )
    result = run(sys.executable, "tests/mutants.py", "--dtypes", "fp32", "geglu.rounds_once", cwd=path, check=False)
    assert result.returncode == 1 and "not run: geglu.rounds_once" in result.stdout, result.stdout
    assert "no mutants selected" in result.stdout, result.stdout
    collect = [sys.executable, "-m", "pytest", "tests/test_geglu.py", "--collect-only", "-q", "-p", "no:cacheprovider"]
    ids = run(*collect, cwd=path, env={"CKT_TEST_DTYPES": "bf16"}).stdout
    assert "bfloat16" in ids and "float32" not in ids, ids
    assert "float32" in run(*collect, cwd=path).stdout
    result = run(*collect, cwd=path, env={"CKT_TEST_DTYPES": "bf16,fp16"}, check=False)
    assert result.returncode == 4 and "CKT_TEST_DTYPES: fp16 not compiled in this project (compiled: bf16, fp32)" in (
        result.stdout + result.stderr
    )
