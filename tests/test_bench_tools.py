"""The benchmark tools that need no GPU, in a rendered project: bench.py --compare on two results.json files made
here in the format bench.py writes, bench.py --dry-run, e2e.py --dry-run and e2e.py's plot."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import ALL_OPS, ALL_PRECISIONS, render, run

HIDDEN = ("rmsnorm", "weight", "qwen3-8b.hidden.8192x4096")  # a case of 40 µs, timed cold (no CUDA graph)
TINY = ("rmsnorm", "weight", "qwen3-8b.hidden.1x4096")  # a case of a few µs, with a CUDA-graph time
LTX = ("adaln", "BSD", "ltx-2b.norm1-modulated.2x7392x2048")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("bench") / "p", ops=ALL_OPS, precisions=ALL_PRECISIONS)


def row(case: tuple[str, str, str], impl: str, us: float, graph_us: float | None = None, dtype: str = "bf16") -> dict:
    """One row as bench.py's run_case makes it."""
    op, variant, name = case
    moved = 24576 if graph_us else 134225920
    return {
        "op": op,
        "variant": variant,
        "case": name,
        "shape": [8192, 4096],
        "dtype": dtype,
        "impl": impl,
        "bytes": moved,
        "time_us": us,
        "graph_us": graph_us,
        "note": "",
        "gbs": moved / us / 1e3,
        "pct_copy": 100 * moved / us / 1e3 / 4225,
        "pct_spec": None,
        "ours_speedup": None if impl == "ours" else us / 40.0,
    }


def results(path: Path, rows: list[dict]) -> Path:
    """A results.json as bench.py writes it."""
    meta = {"date": "2026-12-01T00:00:00+00:00", "gpu": "NVIDIA H200", "command": "python benchmarks/bench.py"}
    path.write_text(json.dumps({"meta": meta, "failures": [], "rows": rows}, indent=1))
    return path


def baseline() -> list[dict]:
    return [
        row(HIDDEN, "ours", 40.0),
        row(HIDDEN, "eager", 60.0),
        row(HIDDEN, "compile", 80.0),
        row(TINY, "ours", 5.5, graph_us=2.20),
        row(TINY, "eager", 9.0, graph_us=4.00),
        row(LTX, "ours", 66.0),
        row(LTX, "eager", 90.0),
    ]


def changed(**times: tuple[float, float | None]) -> list[dict]:
    """The baseline with ours' (time_us, graph_us) replaced for the cases named by their variable above."""
    cases = {"HIDDEN": HIDDEN, "TINY": TINY, "LTX": LTX}
    rows = baseline()
    for name, (us, graph_us) in times.items():
        ours = next(r for r in rows if (r["op"], r["variant"], r["case"]) == cases[name] and r["impl"] == "ours")
        ours["time_us"], ours["graph_us"] = us, graph_us
    return rows


def compare(project: Path, *arguments) -> tuple[int, list[str], str]:
    result = run(sys.executable, "benchmarks/bench.py", "--compare", *arguments, cwd=project, check=False)
    return result.returncode, result.stdout.strip().splitlines(), result.stderr


def test_compare_fails_when_ours_is_slower(project, tmp_path):
    old = results(tmp_path / "old.json", baseline())
    new = results(tmp_path / "new.json", changed(HIDDEN=(44.0, None)))  # 10% and 4 µs slower
    status, lines, _ = compare(project, old, new)
    assert status == 1, lines
    assert lines[-1].startswith("compare: 1 of 3 cases of ours slower"), lines[-1]
    assert "rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 (+10.0%)" in lines[-1]
    slow = next(line for line in lines if line.startswith("rmsnorm/weight/qwen3-8b.hidden.8192x4096"))
    assert "SLOWER" in slow and "1.100" in slow and "eager 1.00, compile 1.00" in slow


def test_compare_passes_within_the_threshold(project, tmp_path):
    old = results(tmp_path / "old.json", baseline())
    new = results(tmp_path / "new.json", changed(HIDDEN=(41.2, None), LTX=(63.0, None)))  # 3% slower, 5% faster
    status, lines, _ = compare(project, old, new)
    assert status == 0 and lines[-1].startswith("compare: no case of ours more than 5% slower"), lines
    assert "(3 compared)" in lines[-1]
    slower = results(tmp_path / "slower.json", changed(HIDDEN=(44.0, None)))
    status, lines, _ = compare(project, old, slower, "--threshold", "12")
    assert status == 0 and "more than 12% slower" in lines[-1], lines


def test_compare_uses_graph_times_and_ignores_cold_jitter(project, tmp_path):
    """Cases with a CUDA-graph time in both runs are judged by it; a cold-L2 time must also be 2 µs slower."""
    old = results(tmp_path / "old.json", baseline())
    jitter = results(tmp_path / "jitter.json", changed(TINY=(7.0, 2.21)))  # cold +27% (1.5 µs), graph +0.5%
    status, lines, _ = compare(project, old, jitter)
    assert status == 0, lines
    assert any(line.startswith("rmsnorm/weight/qwen3-8b.hidden.1x4096 bf16") and " graph " in line for line in lines)
    graph = results(tmp_path / "graph.json", changed(TINY=(5.5, 2.42)))  # graph +10%
    status, lines, _ = compare(project, old, graph)
    assert status == 1 and "rmsnorm/weight/qwen3-8b.hidden.1x4096 bf16 (+10.0%)" in lines[-1], lines


def test_compare_lists_cases_in_one_file_only(project, tmp_path):
    old_rows = baseline() + [row(("geglu", "erf", "ltx-2b-sized.14784x16384"), "ours", 193.0)]
    new_rows = [r for r in baseline() if r["impl"] != "compile"] + [row(("rope3d", "qk", "x"), "ours", 118.0)]
    old, new = results(tmp_path / "old.json", old_rows), results(tmp_path / "new.json", new_rows)
    status, lines, _ = compare(project, old, new)
    assert status == 0, lines
    only_old = next(line for line in lines if line.startswith(f"only in {old} "))
    assert "geglu/erf/ltx-2b-sized.14784x16384 bf16" in only_old
    assert "rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 compile" in only_old
    assert "rope3d/qk/x bf16" in next(line for line in lines if line.startswith(f"only in {new} "))
    disjoint = results(tmp_path / "disjoint.json", [row(("rope3d", "qk", "x"), "ours", 118.0)])
    status, lines, _ = compare(project, old, disjoint)
    assert status == 1 and lines[-1].startswith("compare: no case of ours has a time in both"), lines


def test_compare_after_a_run_counts_old_cases_it_did_not_select(project, tmp_path):
    """After a run, bench.py passes the cases it selected: old cases outside them are counted, not listed. The run may
    have overwritten OLD (--out of the same folder): the rows read before the run are compared, whatever the names."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, "benchmarks")
        from report import compare
        old = {baseline()!r}
        new = [r for r in {changed(HIDDEN=(44.0, None))!r} if r["op"] == "rmsnorm"]
        selected = {{(r["op"], r["variant"], r["case"], r["dtype"]) for r in new}}
        lines, failed = compare(old, new, 5.0, ("results.json", "results.json"), selected)
        print("\\n".join(lines))
        sys.exit(int(failed))
        """
    )
    result = run(sys.executable, "-c", script, cwd=project, check=False)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 cases of results.json not selected in this run (--ops/--dtypes/--shapes/--quick)" in lines
    assert not any(line.startswith("only in") for line in lines), lines
    assert "rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 (+10.0%)" in lines[-1], lines


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("not json", "not JSON"),
        ('{"meta": {}}', "not a results.json of bench.py"),
        ('{"rows": [{"op": "rmsnorm", "impl": "ours"}]}', "not a results.json of bench.py"),
        (
            '{"rows": [{"op": "a", "variant": "b", "case": "c", "dtype": "bf16", "impl": "ours", "time_us": "1"}]}',
            "not a",
        ),
    ],
)
def test_compare_rejects_what_is_not_a_results_file(project, tmp_path, content, message):
    good = results(tmp_path / "good.json", baseline())
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for arguments in ((bad, good), (good, bad), (bad,)):
        status, lines, stderr = compare(project, *arguments)
        last = stderr.strip().splitlines()[-1]
        assert status == 2 and not lines, (status, lines)
        assert last.startswith(f"bench.py: error: --compare: {bad}: {message}"), last


def test_compare_takes_one_or_two_files(project, tmp_path):
    good = results(tmp_path / "good.json", baseline())
    status, _, stderr = compare(project, good, good, good)
    assert (
        status == 2
        and stderr.strip().splitlines()[-1] == "bench.py: error: --compare takes OLD.json, or OLD.json NEW.json"
    )
    status, _, stderr = compare(project, good, good, "--threshold", "-1")
    assert status == 2 and stderr.strip().endswith("--threshold must be at least 0")


def test_bench_dry_run(project):
    result = run(sys.executable, "benchmarks/bench.py", "--dry-run", "--quick", cwd=project)
    assert all(f"\n{op}/" in result.stdout for op in ALL_OPS), result.stdout


def test_bench_help_documents_compare(project):
    usage = run(sys.executable, "benchmarks/bench.py", "--help", cwd=project).stdout
    assert "--compare OLD.json" in usage and "--threshold PCT" in usage and "default 5" in usage
    docstring = (project / "benchmarks" / "bench.py").read_text().split('"""')[1]
    assert "--compare OLD.json NEW.json" in docstring and "--threshold % slower" in docstring


@pytest.mark.parametrize(("ops", "models"), [(ALL_OPS, ["qwen3", "ltx", "sd"]), (["geglu"], ["sd"])])
def test_e2e_dry_run_lists_the_models(tmp_path, ops, models):
    project = render(tmp_path / "p", ops=ops)
    result = run(sys.executable, "benchmarks/e2e.py", "--dry-run", "--control", cwd=project)
    listed = [line.split()[0] for line in result.stdout.splitlines()[3:]]
    assert sorted(set(listed)) == sorted(models), result.stdout
    assert "compile (copy)" in result.stdout.splitlines()[0]
    if "ltx" in models:
        bad = run(sys.executable, "benchmarks/e2e.py", "--dry-run", "--models", "ltx", "--tokens", "100", cwd=project)
        assert "--tokens must be one of" in bad.stdout


def test_e2e_plot(project, tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        dict(model=model, tokens=tokens, mode=mode, variant=variant, vs_eager=speed)
        for model, tokens in (("qwen3", 2048), ("qwen3", 8192), ("sd", 4096))
        for mode in ("forward", "train")
        for variant, speed in (("eager", 1.0), ("kernels", 1.2), ("compile", 1.3), ("compile + kernels", 1.35))
    ]
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, "benchmarks")
        import e2e
        print(e2e.plot(Path(sys.argv[1]), {rows!r}, "title"))
        """
    )
    result = run(sys.executable, "-c", script, tmp_path / "e2e.png", cwd=project)
    assert result.stdout.strip() == "None" and (tmp_path / "e2e.png").stat().st_size > 10_000
