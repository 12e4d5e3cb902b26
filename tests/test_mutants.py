"""The generated project's mutants (tests/mutants.py: deliberately broken kernels its tests must reject) still match
the kernel sources they break, and only the chosen ops' mutants are run. Cheap: renders, builds nothing."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from .conftest import ALL_OPS, STEMS, render, run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return render(tmp_path_factory.mktemp("mutants") / "all", ops=ALL_OPS)


def load_mutants(path):
    spec = importlib.util.spec_from_file_location(
        f"mutants_{id(path)}", path / "tests" / "mutants.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutant_matches_its_source_once(project):
    mutants = load_mutants(project)
    assert mutants.present(project) == mutants.MUTANTS, (
        "every mutant's op is in a project with all ops"
    )
    assert mutants.mismatches(project) == []
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names)), "mutant names must be unique"
    for m in mutants.MUTANTS:
        assert (
            m.op in STEMS.values()
            and m.file == f"kernel_src/{m.op}.cu"
            and m.tests == (f"tests/test_{m.op}.py",)
        )
    assert {m.op for m in mutants.MUTANTS} == set(STEMS.values()), (
        "every op has mutants"
    )


def test_list_checks_the_texts_without_a_gpu(project):
    listed = run(sys.executable, "tests/mutants.py", "--list", cwd=project).stdout
    assert all(m.name in listed for m in load_mutants(project).MUTANTS)
    cu = project / "kernel_src" / "geglu.cu"
    original = cu.read_text()
    try:  # a kernel edit that moves a mutant's text: --list fails and names the mutant
        cu.write_text(
            original.replace(
                "const float act = round_to<T>(gelu<TANH>(g));", "const float act = 0;"
            )
        )
        result = run(
            sys.executable, "tests/mutants.py", "--list", cwd=project, check=False
        )
        assert result.returncode == 1 and "stale: geglu.rounds_once" in result.stdout, (
            result.stdout
        )
    finally:
        cu.write_text(original)


def test_only_the_chosen_ops_mutants(tmp_path):
    path = render(tmp_path / "p", ops=["geglu"], precisions=["fp32"])
    mutants = load_mutants(path)
    assert {m.op for m in mutants.present(path)} == {"geglu"}
    assert not any(m.half_only for m in mutants.present(path)), (
        "a moved bf16/fp16 rounding changes nothing in fp32"
    )
    assert any(m.half_only for m in mutants.MUTANTS if m.op == "geglu")
    result = run(
        sys.executable, "tests/mutants.py", "--ops", "rms_norm", cwd=path, check=False
    )
    assert result.returncode == 1 and "no mutants selected" in result.stdout, (
        result.stdout
    )
