"""The benchmark tools that need no GPU, in a rendered project: bench.py --compare on two results.json files made
here in the formats bench.py writes (before and since it measures GPU, eager-call and host times), the ratios and
tables, the profiler attribution and host timing (on CPU events and CPU functions), the float64 checks (a CPU
stand-in for the kernel), bench.py --dry-run, e2e.py --dry-run and e2e.py's plot."""

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
    assert "1 cases of results.json not selected in this run (--ops/--dtypes/--shapes/--quick/--modes)" in lines
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


# --------------------------------------------------------------------------------------------------------------
# Since bench.py measures three times: rows with gpu_us, time_us (eager-call), host_us, a mode and ratios
# --------------------------------------------------------------------------------------------------------------
def new_row(
    impl: str,
    gpu_us: float | None,
    time_us: float | None,
    host_us: float | None = None,
    case: tuple[str, str, str] = HIDDEN,
    mode: str = "forward",
    valid: bool = True,
    moved: int = 134225920,
) -> dict:
    """One row as run_case makes it now, before report.derive adds rates and ratios."""
    op, variant, name = case
    return {
        "op": op,
        "variant": variant,
        "case": name,
        "shape": [8192, 4096],
        "dtype": "bf16",
        "mode": mode,
        "impl": impl,
        "bytes": moved,
        "gpu_us": gpu_us,
        "gpu_method": "profiler" if gpu_us else None,
        "time_us": time_us,
        "host_us": host_us,
        "valid": valid,
        "note": "" if valid else "WRONG (timed, not compared): 3 of 4096 elements off",
        "host_note": "",
    }


def in_project(project: Path, script: str, *arguments) -> str:
    """The stdout of `script` run in the project with benchmarks/ importable (as bench.py sees its modules)."""
    code = "import sys\nsys.path.insert(0, 'benchmarks')\n" + textwrap.dedent(script)
    return run(sys.executable, "-c", code, *arguments, cwd=project).stdout


def derived(project: Path, rows: list[dict], copy_gbs: float = 4000.0, spec_gbs: float | None = None) -> list[dict]:
    script = """
        import json
        from report import derive
        spec = float(sys.argv[3]) if sys.argv[3] != "None" else None
        print(json.dumps(derive(json.loads(sys.argv[1]), float(sys.argv[2]), spec)))
        """
    return json.loads(in_project(project, script, json.dumps(rows), copy_gbs, spec_gbs))


def test_ratios_against_the_fastest_other_implementation(project):
    rows = derived(
        project,
        [
            new_row("ours", 39.6, 45.0, host_us=6.0),
            new_row("eager", 90.0, 95.0, host_us=20.0),
            new_row("F.rms_norm", 46.8, 52.0, host_us=5.0),
            new_row("compile", 81.4, 50.0),  # no host time: left out of the host ratio
            new_row("liger", 30.0, 35.0, host_us=4.0, valid=False),  # wrong: never the fastest
        ],
    )
    ours, eager, f_rms_norm, compiled, wrong = rows
    assert ours["best_gpu_impl"] == "F.rms_norm" and ours["ours_vs_best_gpu"] == pytest.approx(46.8 / 39.6)
    assert ours["best_time_impl"] == "compile" and ours["ours_vs_best_time"] == pytest.approx(50.0 / 45.0)
    assert ours["best_host_impl"] == "F.rms_norm" and ours["ours_vs_best_host"] == pytest.approx(5.0 / 6.0)
    assert eager["ours_vs_gpu"] == pytest.approx(90.0 / 39.6) and compiled["ours_vs_host"] is None
    assert f_rms_norm["best_gpu_impl"] is None and f_rms_norm["ours_vs_best_gpu"] is None  # only on ours' row
    assert wrong["ours_vs_gpu"] is None and wrong["ours_vs_time"] is None and wrong["ours_vs_host"] is None
    assert ours["ours_vs_gpu"] is None
    # GB/s and % copy come from the GPU time, never from the eager-call time
    assert ours["gbs"] == pytest.approx(134225920 / 39.6 / 1e3)
    assert ours["pct_copy"] == pytest.approx(100 * ours["gbs"] / 4000.0) and ours["pct_spec"] is None
    alone = derived(project, [new_row("ours", 39.6, 45.0), new_row("eager", None, None, valid=False)])
    assert alone[0]["ours_vs_best_gpu"] is None and alone[0]["best_gpu_impl"] is None and alone[1]["gbs"] is None


def test_gpu_time_faster_than_the_memory_is_suspect_and_not_compared(project, tmp_path):
    """A GPU time whose bytes per second beat the spec bandwidth by more than 5% (without a spec figure: the measured
    copy bandwidth by more than 15%) is not believed: marked SUSPECT (row, note, table) and left out of the GPU ratios
    (the eager-call time still counts). The rows: AdaLN per token, forward+backward, as the 2026-12-01 run counted
    its bytes (torch.compile moved fewer bytes than counted, its grad_shift being grad_out: 110% of copy), here on a
    GPU whose spec is 4200 GB/s. A row kernel beating the copy by 5% at 94% of the spec (H100, RMSNorm 1024 x 4096)
    is believed."""
    train = {"case": LTX, "mode": "train", "moved": 605552640}
    rows = [new_row("ours", 537.7, 546.3, **train), new_row("eager", 1306.1, 1329.9, **train)]
    rows.append(new_row("compile", 129.5, 998.8, **train))
    ours, eager, compiled = derived(project, rows, 4255.6, 4200.0)
    assert compiled["suspect"] and "SUSPECT: 129.5 µs is 111% of the spec bandwidth" in compiled["note"]
    assert not ours["suspect"] and not eager["suspect"]
    assert ours["best_gpu_impl"] == "eager" and compiled["ours_vs_gpu"] is None
    assert ours["best_time_impl"] == "compile" and compiled["ours_vs_time"] == pytest.approx(998.8 / 546.3)
    at_spec = 134225920 / 3350.0 / 1e3  # µs of the default bytes at an H100's spec bandwidth
    near = derived(
        project, [new_row("ours", at_spec / 1.04, 40.0), new_row("eager", at_spec / 1.06, 40.0)], 3010.0, 3350.0
    )
    assert not near[0]["suspect"] and near[1]["suspect"] and near[0]["best_gpu_impl"] is None
    h100 = derived(project, [new_row("ours", 5.31, 11.3, moved=16785408), new_row("eager", 64.1, 75.0)], 3002.4, 3350.0)
    assert 104 < h100[0]["pct_copy"] < 106 and not h100[0]["suspect"]
    at_copy = 134225920 / 4000.0 / 1e3  # without a spec figure: the copy (4000 GB/s) plus 15%
    near = derived(project, [new_row("ours", at_copy / 1.14, 40.0), new_row("eager", at_copy / 1.16, 40.0)])
    assert not near[0]["suspect"] and near[1]["suspect"] and "of the copy bandwidth" in near[1]["note"]
    script = """
        import json
        from pathlib import Path
        from report import write_markdown
        write_markdown(Path(sys.argv[2]), "k", {"gpu": "H200"}, json.loads(sys.argv[1]), [])
        """
    in_project(project, script, json.dumps([ours, eager, compiled]), tmp_path / "results.md")
    text = (tmp_path / "results.md").read_text()
    assert "| compile | SUSPECT | - | - | 998.8 | - | - | SUSPECT: 129.5 µs is 111% of the spec" in text, text
    assert "| **ours** | **537.7** | 1126 | 26 | 546.3 | - | 2.43× vs eager |" in text


def test_adaln_counts_no_bytes_for_a_per_token_shift_gradient(project):
    """Forward+backward bytes of AdaLN: 5 x + 3 scale, and the shift's gradient only where it is a sum (per sample
    over several tokens): one of the output's shape is grad_out itself (autograd's add, compile and ours return it)."""
    script = """
        import torch
        from cases import adaln
        for case in [c for c in adaln.cases() if c.train]:
            t = case.make(torch.bfloat16, "cpu")
            x, scale, shift = (t[k].numel() * 2 for k in ("x", "scale", "shift"))
            print(f"{case.variant}:{case.shape[1]}:{(case.moved_train(t) - 5 * x - 3 * scale) / shift:g}")
        """
    assert sorted(in_project(project, script).split()) == ["B1D:1:1", "B1D:7392:2", "BSD:1:1", "BSD:7392:1"]


def test_markdown_tables_show_the_three_times(project, tmp_path):
    tiny = ("rmsnorm", "weight", "qwen3-8b.hidden.1x4096")
    rows = [
        new_row("ours", 39.6, 45.0),
        new_row("F.rms_norm", 46.8, 52.0),
        new_row("liger", 34.0, 35.0, valid=False),
        new_row("ours", 120.0, 140.0, mode="train", moved=335564800),
        new_row("eager", 300.0, 320.0, mode="train", moved=335564800),
        new_row("ours", 2.1, 6.0, host_us=7.5, case=tiny, moved=24576),
        new_row("eager", 4.0, 11.0, host_us=16.0, case=tiny, moved=24576),
    ]
    rows[4]["gpu_method"] = "cuda graph"
    script = """
        import json
        from pathlib import Path
        from report import derive, write_markdown
        rows = json.loads(sys.argv[1])
        cases = {}
        for row in rows:
            cases.setdefault((row["case"], row["mode"]), []).append(row)
        for group in cases.values():
            derive(group, 4000.0, None)
        write_markdown(Path(sys.argv[2]), "k", {"gpu": "H200", "competitors": {"liger-kernel": None}}, rows, [])
        """
    in_project(project, script, json.dumps(rows), tmp_path / "results.md")
    text = (tmp_path / "results.md").read_text()
    header = (
        "| variant | case | dtype | impl | GPU µs | GB/s | % copy | eager-call µs | host µs | ours × (GPU) | note |"
    )
    assert text.count(header) == 2, text
    assert "\n## rmsnorm\n" in text and "\n## rmsnorm, forward+backward\n" in text
    assert "| **ours** | **39.6** | 3390 | 85 | 45.0 | - | 1.18× vs F.rms_norm |" in text, text
    assert "| F.rms_norm | 46.8 | 2868 | 72 | 52.0 | - | 1.18× |" in text
    assert "| liger | 34.0 |" in text and "WRONG (timed, not compared)" in text
    assert "| **ours** | **120.0** | 2796 | 70 | 140.0 | - | 2.50× vs eager |" in text
    assert "GPU time: cuda graph" in text
    assert "\n## host time per call (tiny shapes, GPU idle)\n" in text
    host = text.split("## host time per call", 1)[1]
    assert (
        "| rmsnorm | weight | qwen3-8b.hidden.1x4096 | bf16 | forward | **ours** | **7.50** | 2.13× vs eager |" in host
    )
    assert "qwen3-8b.hidden.8192x4096" not in host  # only the cases with a host time


def test_compare_judges_gpu_times_and_keeps_modes_apart(project, tmp_path):
    tiny = ("rmsnorm", "weight", "qwen3-8b.hidden.1x4096")

    def rows(ours_gpu: float, ours_time: float, tiny_gpu: float, train_gpu: float) -> list[dict]:
        return [
            new_row("ours", ours_gpu, ours_time),
            new_row("eager", 90.0, 95.0),
            new_row("ours", tiny_gpu, 6.0, host_us=7.0, case=tiny),
            new_row("ours", train_gpu, 140.0, mode="train"),
            new_row("eager", 300.0, 320.0, mode="train"),
        ]

    old = results(tmp_path / "old.json", rows(39.6, 45.0, 3.0, 120.0))
    # eager-call time +20% but GPU time level; tiny +10% but 0.3 µs (under the GPU floor); train level
    same = results(tmp_path / "same.json", rows(39.8, 54.0, 3.3, 121.0))
    status, lines, _ = compare(project, old, same)
    assert status == 0 and lines[-1].endswith("(3 compared)"), lines
    hidden = next(line for line in lines if line.startswith("rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 "))
    assert " gpu " in hidden and "eager 1.00" in hidden
    train = next(line for line in lines if line.startswith("rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 train "))
    assert " gpu " in train and "eager 1.00" in train
    slower = results(tmp_path / "slower.json", rows(39.6, 45.0, 3.6, 132.0))  # tiny +0.6 µs, train +10%
    status, lines, _ = compare(project, old, slower)
    assert status == 1 and lines[-1].startswith("compare: 2 of 3 cases of ours slower"), lines
    assert "rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 train (+10.0%)" in lines[-1]
    assert "rmsnorm/weight/qwen3-8b.hidden.1x4096 bf16 (+20.0%)" in lines[-1]


def test_compare_never_judges_a_suspect_gpu_time(project, tmp_path):
    """A GPU time marked suspect in either run is not compared: the case falls back to its eager-call time."""
    old_rows = [new_row("ours", 39.6, 45.0), new_row("eager", 90.0, 95.0)]
    new_rows = [dict(new_row("ours", 20.0, 45.5), suspect=True), new_row("eager", 90.0, 95.0)]
    status, lines, _ = compare(
        project, results(tmp_path / "old.json", old_rows), results(tmp_path / "new.json", new_rows)
    )
    assert status == 0, lines
    hidden = next(line for line in lines if line.startswith("rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 "))
    assert " gpu " not in hidden and " cold " in hidden, hidden


def test_compare_an_older_results_file_with_a_new_one(project, tmp_path):
    """Rows without gpu_us or mode (files from before) load; against a new file they compare on the eager-call
    time, as forward rows; train rows are only in the new file."""
    old = results(tmp_path / "old.json", baseline())
    new_rows = [
        new_row("ours", 39.0, 44.0),
        new_row("eager", 58.0, 60.0),
        new_row("compile", 70.0, 80.0),
        new_row("ours", 120.0, 140.0, mode="train"),
    ]
    new = results(tmp_path / "new.json", new_rows)
    status, lines, _ = compare(project, old, new)
    hidden = next(line for line in lines if line.startswith("rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 "))
    assert " cold " in hidden and "1.100" in hidden and "SLOWER" in hidden, hidden  # 40 -> 44 µs eager-call
    only_new = next(line for line in lines if line.startswith(f"only in {new} "))
    assert "rmsnorm/weight/qwen3-8b.hidden.8192x4096 bf16 train" in only_new
    assert status == 1, lines
    bad = results(tmp_path / "bad.json", [{**new_rows[0], "mode": "sideways"}])
    status, _, stderr = compare(project, bad, new)
    assert status == 2 and "not a results.json of bench.py" in stderr


def test_gpu_time_attribution_of_profiler_events(project):
    """Synthetic profiler events: a flush outside every range, kernels under nested ops, a backward op on another
    thread, the ranges' GPU-side copies, a sync, and runtime calls; what each call's GPU time sums."""
    script = """
        import json
        from timing import Event, device_us_per_call, unlinked

        def cpu(name, start, end, id):
            return Event(name, False, start, end, id, 0)

        def gpu(name, start, end, linked, kind="kernel", annotation=False):
            return Event(name, True, start, end, 0, linked, kind, annotation)

        events = [
            cpu("aten::zero_", 0, 5, 1), gpu("flush", 10, 400, 1),                      # the flush: no call's
            cpu("bench.py call 0", 6, 100, 2), cpu("ours::op", 7, 20, 3),
            Event("cudaLaunchKernel", False, 8, 9, 77, 3),                             # runtime call: not an op
            gpu("op_kernel", 400, 430, 3), gpu("bench.py call 0", 400, 430, 2, "gpu_user_annotation", True),
            cpu("autograd::engine::evaluate_function", 30, 60, 4),                     # backward, other thread
            gpu("op_backward_kernel", 430, 480, 4), gpu("Memset (Device)", 480, 482, 4, "gpu_memset"),
            gpu("Stream Sync", 482, 900, 4, "cuda_sync"),
            gpu("launched_from_range", 482, 490, 2),                                    # no op in between
            cpu("aten::zero_", 101, 105, 5), gpu("flush", 490, 880, 5),
            cpu("bench.py call 1", 106, 200, 6), cpu("ours::op", 107, 120, 7),
            gpu("op_kernel", 880, 912, 7), gpu("orphan", 912, 1000, 999),
        ]
        events += [  # launched where no op was open (a CUDA graph's replay): by the launch call's start
            Event("cudaGraphLaunch", False, 130, 131, 88, 0, "cuda_runtime"), Event("graph", True, 1000, 1040, 88, 0),
            Event("cuLaunchKernel", False, 205, 206, 89, 0, "cuda_driver"), Event("after", True, 1040, 1050, 89, 0),
        ]
        print(json.dumps([device_us_per_call(events), unlinked(events)]))
        """
    per_call, lost = json.loads(in_project(project, script))
    assert per_call == pytest.approx([(30 + 50 + 2 + 8) / 1e3, (32 + 40) / 1e3])  # "after" was launched after both
    assert lost == [1, 10]  # the orphan, of the 10 GPU work activities (flushes included, annotation and sync not)


def test_profiler_events_of_a_cpu_run(project):
    """A real torch.profiler run on the CPU: the ranges are found in order, each call's ops belong to it, the flush
    between them to none (GPU activities need a GPU: the synthetic test above covers them)."""
    script = """
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
        from timing import RANGE, calls_of_ops, device_us_per_call, kineto_events

        x, buffer = torch.randn(64, 64, requires_grad=True), torch.empty(1 << 16)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for index in range(5):
                buffer.zero_()
                with record_function(f"{RANGE}{index}"):
                    torch.autograd.grad((x * 2).sum(), [x])
        events = kineto_events(prof)
        ranges, owner = calls_of_ops(events)
        ops = {e.id: e.name for e in events if not e.on_device and not e.linked}
        calls = sorted({owner[i] for i, name in ops.items() if name == "aten::mul" and i in owner})
        zeros = [i for i, name in ops.items() if name == "aten::zero_"]
        print(len(ranges), calls, len(zeros), sum(i in owner for i in zeros), device_us_per_call(events))
        """
    assert in_project(project, script).split() == ["5", "[0,", "1,", "2,", "3,", "4]", "5", "0", "[0.0,"] + [
        "0.0,",
        "0.0,",
        "0.0,",
        "0.0]",
    ]


def test_gpu_timer_falls_back_to_cuda_graphs_when_the_profiler_sees_no_gpu(project):
    """On this CPU machine the profiler records no GPU activity: the first call says so once (with what kineto
    printed, which is otherwise kept off the terminal) and every call then uses the CUDA-graph time."""
    script = """
        import os
        import torch
        import timing

        torch.cuda.synchronize = lambda: None  # CPU only: the profiled loop runs, the trace has no GPU activity
        timer = timing.GpuTimer()
        timer.use_profiler, timer.buffer = True, torch.empty(1024, dtype=torch.int32)
        timer.graph = lambda fn: 1.5
        x = torch.randn(16, 16, requires_grad=True)
        print(timer(lambda: torch.autograd.grad((x * 2).sum(), [x])), timer.use_profiler)
        print(timer(lambda: x * 2), timer.use_profiler)
        said = []
        with timing.quiet_stderr(said):
            os.write(2, b"kineto says hello\\n")
        print(repr(said))
        """
    result = run(
        sys.executable, "-c", "import sys\nsys.path.insert(0, 'benchmarks')\n" + textwrap.dedent(script), cwd=project
    )
    assert result.stdout.splitlines() == [
        "(1.5, 'cuda graph') False",
        "(1.5, 'cuda graph') False",
        "['kineto says hello\\n']",
    ], result.stdout
    assert result.stderr.count("bench.py: torch.profiler saw no GPU activity: GPU times from CUDA graphs") == 1


def test_gpu_timer_interleaves_the_implementations_in_one_profile(project):
    """GpuTimer.each profiles the calls of all its fns in rounds, one of each per round after a flush, each round
    starting with the next fn, and gives each fn the median of its own calls (no fns: nothing profiled, the
    profiler kept); where the joint profile raises, it times each fn alone and returns the exception of the one that
    raised."""
    script = """
        import torch
        import timing

        torch.cuda.synchronize = lambda: None
        order = []
        timer = timing.GpuTimer()
        timer.use_profiler, timer.flush = True, lambda: order.append("flush")
        # the GPU time of profiled call i (after the 3 unprofiled ones): 1, 10, 100 for fns a, b, c, plus the round
        calls = lambda: [name for name in order if name != "flush"][3:]
        timing.device_us_per_call = lambda events: [10 ** "abc".index(n) + i // 3 for i, n in enumerate(calls())]
        timing.unlinked = lambda events: (0, 3 * timing.GPU_CALLS)
        fns = [lambda name=name: order.append(name) for name in "abc"]
        print(timer.each(fns))
        print("".join(calls()[:9]), len(order), timer.each([]), timer.use_profiler)

        def broken():
            raise ValueError("no such shape")

        timing.device_us_per_call = lambda events: [5.0] * timing.GPU_CALLS
        timing.unlinked = lambda events: (0, timing.GPU_CALLS)
        print(timer.each([fns[0], broken]))
        """
    lines = in_project(project, textwrap.dedent(script)).splitlines()
    assert lines[0] == "[(15.5, 'profiler'), (24.5, 'profiler'), (114.5, 'profiler')]"  # base + median of 0..29
    assert lines[1] == "abcbcacab 186 [] True"  # (flush, call) x 3 fns x (1 unprofiled + 30 profiled rounds)
    assert lines[2] == "[(5.0, 'profiler'), ValueError('no such shape')]"


def test_host_time_per_call(project):
    """host_us on a clock that each call advances by 2 or 3 µs: per fn the median round and the share spent in the
    final synchronize (1 ms of 1.8 ms: the GPU set the pace); the fns take turns round by round, each starting a
    round in turn; a fn that raises leaves the rounds, its exception returned in its place."""
    script = """
        import itertools
        from timing import host_us

        now, order, waited = [0.0], [], [0.0]
        def make(name, us):
            def call():
                now[0] += us * 1e-6
                order.append(name)
            return call
        def boom():
            raise ValueError("no such shape")
        def wait():
            now[0] += waited[0]
        def show(found):
            return [f if isinstance(f, Exception) else tuple(round(v, 6) for v in f) for f in found]
        def timed(fns, calls=2000, rounds=5, warmup=10):
            return show(host_us(fns, calls, rounds, warmup, synchronize=wait, clock=lambda: now[0]))
        print(timed([make("a", 2), make("b", 3)]))
        print(" ".join(f"{name}{len(list(run))}" for name, run in itertools.groupby(order)))
        waited[0] = 1e-3
        print(timed([make("a", 2)]))
        waited[0] = 0.0
        print(timed([boom, make("a", 2)], calls=20, rounds=2, warmup=1))
        """
    lines = in_project(project, script).splitlines()
    assert lines[0] == "[(2.0, 0.0), (3.0, 0.0)]"
    assert lines[1] == "a10 b10 a400 b800 a800 b800 a800 b400"  # warmup, then rounds ab, ba, ab, ba, ab
    assert lines[2] == f"[({round(2.0 + 1e3 / 400, 6)}, {round(1e-3 / (400 * 2e-6 + 1e-3), 6)})]"
    assert lines[3] == "[ValueError('no such shape'), (2.0, 0.0)]"


FAKE_KERNEL = '''
"""A CPU stand-in for the built kernel: the ops' semantics in torch (differentiable); WRONG shifts one output."""
import torch
import torch.nn.functional as F

WRONG = []


def _norm(x, eps):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x, weight=None, eps=1e-6):
    n = _norm(x, eps).to(x.dtype)
    y = n * weight if weight is not None else n
    return y + 1 if "rms_norm" in WRONG else y


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6):
    h = x + residual
    return rms_norm(h, weight, eps), h


def adaln(x, scale, shift, eps=1e-6):
    return (_norm(x, eps) * (1 + scale.float()) + shift.float()).to(x.dtype)


def geglu(x, approximate="none"):
    h, g = x.float().chunk(2, -1)
    return (h * F.gelu(g, approximate=approximate)).to(x.dtype)


def _rotated(x):
    real, imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack([-imag, real], -1).flatten(-2)


def rope3d(x, cos, sin):
    return (x.float() * cos + _rotated(x).float() * sin).to(x.dtype)


def rope3d_qk(q, k, cos, sin):
    return rope3d(q, cos, sin), rope3d(k, cos, sin)


def rope3d_qk_grid(q, k, frames, height, width, rope_interpolation_scale=None):
    from cases.rope3d import ltx_cos_sin

    cos, sin = ltx_cos_sin(q.shape[0], (frames, height, width), q.shape[-1], q.device)
    return rope3d_qk(q, k, cos, sin)
'''

RUN_ON_CPU = """
    sys.path.insert(0, sys.argv[1])
    import functools
    import types
    import torch
    import bench, fake_kernel, timing

    bench.host_us = functools.partial(timing.host_us, calls=50, rounds=5, warmup=2, synchronize=lambda: None)
    ctx = bench.Context(
        kernel=fake_kernel,
        eager_timer=lambda fn: (fn(), 0.010)[1],
        gpu_timer=types.SimpleNamespace(each=lambda fns: [(fn(), (8.0, "profiler"))[1] for fn in fns]),
        compile=False,
        copy_gbs=4000.0,
        spec_gbs=None,
        note=lambda text: None,
        status=lambda text: None,
        device=torch.device("cpu"),
    )
    """


def test_every_tiny_case_checks_outputs_and_gradients_on_cpu(project, tmp_path):
    """run_case on the CPU with a stand-in kernel: every op's tiny cases pass the float64 checks in both modes and
    every dtype (ours, eager, F.rms_norm), with host times; a wrong ours stops the case; a wrong peer is marked."""
    (tmp_path / "fake_kernel.py").write_text(FAKE_KERNEL)
    script = """
        cases = [c for c in bench.select_cases(list(bench.case_modules()), None, quick=True) if c.host]
        runs = bench.units(cases, ["bf16", "fp16", "fp32"], ["forward", "train"])
        for case, dtype, mode in runs:
            rows = bench.run_case(case, dtype, mode, ctx)
            bad = [r["impl"] + ": " + r["note"] for r in rows if not r["valid"] or r["note"]]
            host = all(r["host_us"] > 0 for r in rows)
            print(case.label, dtype, mode, len(rows), rows[0]["ours_vs_best_gpu"], host, bad or "clean")
        case = next(c for c in cases if c.variant == "weight")
        fake_kernel.WRONG.append("rms_norm")
        for mode in ("forward", "train"):
            try:
                bench.run_case(case, "bf16", mode, ctx)
            except bench.CaseFailure as error:
                print("FAILED", mode, error)
        fake_kernel.WRONG.clear()
        impls = case.impls
        def wrong_peer(kernel, t):
            found = impls(kernel, t)
            fn, args = found["F.rms_norm"]
            found["F.rms_norm"] = (lambda *a: fn(*a) * 1.1, args)
            return found
        case.impls = wrong_peer
        rows = bench.run_case(case, "bf16", "train", ctx)
        print("PEER", [(r["impl"], r["valid"], r["ours_vs_gpu"]) for r in rows], rows[0]["best_gpu_impl"])
        """
    lines = in_project(project, textwrap.dedent(RUN_ON_CPU) + textwrap.dedent(script), tmp_path).splitlines()
    checked = [line for line in lines if not line.startswith(("FAILED", "PEER"))]
    assert len(checked) == 10 * 3 * 2, lines  # 10 tiny cases (every op's variants) x 3 dtypes x 2 modes
    assert all(line.endswith("1.0 True clean") for line in checked), [x for x in checked if "clean" not in x]
    assert any(line.startswith("rmsnorm/weight/qwen3-8b.hidden.1x4096 bf16 train 3 ") for line in checked)
    failed = [line for line in lines if line.startswith("FAILED")]
    assert failed[0].startswith("FAILED forward ours does not match the float64 reference (output): 4096 of 4096")
    assert failed[1].startswith("FAILED train ours does not match the float64 reference (outputs and gradients)")
    assert lines[-1] == "PEER [('ours', True, None), ('eager', True, 1.0), ('F.rms_norm', False, None)] eager"


def test_float64_reference_defaults_to_eager_and_checks_dtypes(project):
    """A case without `reference` is checked against its eager implementation on float64 copies; outputs of
    another dtype, and NaN, fail."""
    script = """
        import torch
        import torch.nn.functional as F
        from cases._common import Case, rel
        from checks import check, mismatch, references

        x = torch.randn(4, 8, dtype=torch.bfloat16)
        case = Case(
            "silu", "forward", "tiny.4x8", (4, 8), None,
            lambda kernel, t: {"ours": (F.silu, (t["x"],)), "eager": (F.silu, (t["x"],))},
            None, lambda dtype, t: (rel(dtype, 4), 0.0), grads=("x",),
        )
        expected, grad_outs, grads = references(case, {"x": x}, torch.bfloat16, ["x"], None)
        print(expected[0].dtype, grads[0].dtype, grad_outs[0].dtype, tuple(grad_outs[0].shape))
        x.requires_grad_(True)
        y = F.silu(x)
        (g,) = torch.autograd.grad(y, [x], grad_outs)
        print(check(case, torch.bfloat16, {"x": x}, ((y,), (g,)), expected, grads, ["x"]))
        print(mismatch(y.float(), expected, [torch.bfloat16], 0.1, 0.0))
        print(mismatch(torch.full_like(y, float("nan")), expected, [torch.bfloat16], 0.1, 1.0).split(" (")[0])
        """
    lines = in_project(project, script).splitlines()
    assert lines[:2] == ["torch.float64 torch.float64 torch.bfloat16 (4, 8)", "None"], lines
    assert lines[2] == "got (4, 8) torch.float32, expected (4, 8) torch.bfloat16"
    assert lines[3] == "32 of 32 elements off"


def test_bench_dry_run_lists_modes_and_host_cases(project):
    """--quick keeps a few forward+backward runs (one per op and the fused add, and one tiny shape); a full run has
    forward+backward for every op's variants, at the tiny (host time) shapes too."""
    result = run(sys.executable, "benchmarks/bench.py", "--dry-run", "--quick", "--dtypes", "bf16", cwd=project)
    train = [line.split()[0] for line in result.stdout.splitlines() if " train " in line]
    assert train == [
        "rmsnorm/weight/qwen3-8b.hidden.1x4096",
        "rmsnorm/weight/qwen3-8b.hidden.8192x4096",
        "rmsnorm/fused_add/qwen3-8b.add_norm.8192x4096",
        "rope3d/qk/ltx-2b.attn1.2x7392x2048",
        "geglu/tanh/ltx-2b-sized.14784x16384",
        "adaln/BSD/ltx-2b.norm1-modulated.2x7392x2048",
    ], result.stdout
    assert (
        "rmsnorm/weight/qwen3-8b.hidden.1x4096                          bf16  forward      0.025  yes" in result.stdout
    )
    full = run(sys.executable, "benchmarks/bench.py", "--dry-run", "--dtypes", "bf16", cwd=project).stdout
    train = {line.split()[0] for line in full.splitlines() if " train " in line}
    for op, variants in {"rmsnorm": ["weight", "no_weight", "fused_add"], "adaln": ["B1D", "BSD"]}.items():
        assert all(any(name.startswith(f"{op}/{v}/") for name in train) for v in variants), train
    for needed in ["qwen3-8b.q_norm.8192x32x128", "qwen3-8b.k_norm-rows.32768x128", "geglu/erf/", "rope3d/qk_grid/"]:
        assert any(needed in name for name in train), needed
    assert "geglu/tanh/ltx-2b-sized.1x16384" in train and len(train) == 21
    forward = run(sys.executable, "benchmarks/bench.py", "--dry-run", "--modes", "forward", cwd=project).stdout
    assert " train " not in forward and " forward " in forward
    bad = run(sys.executable, "benchmarks/bench.py", "--dry-run", "--modes", "sideways", cwd=project, check=False)
    assert bad.returncode == 2 and "--modes: sideways not one of forward,train" in bad.stderr


def test_an_interrupted_run_writes_the_runs_that_finished(project, tmp_path):
    """Ctrl-C (or `timeout -s INT`) during the third run: results.json and results.md hold the two that finished,
    say that the run was interrupted, and bench.py exits with status 1. The GPU parts are stand-ins (CPU only)."""
    script = f"""
        import json
        import torch
        import bench
        finished = []

        def run_case(case, dtype, mode, ctx):
            if len(finished) == 2:
                raise KeyboardInterrupt
            finished.append(case.label)
            return [{{**row, "case": case.name, "variant": case.variant}} for row in json.loads(sys.argv[1])]

        torch.cuda.is_available = lambda: True
        torch.cuda.get_device_name = lambda: "stand-in GPU"
        bench.load_kernel = lambda build: (None, "a stand-in")
        bench.copy_bandwidth = lambda gpu_timer, eager_timer: 4000.0
        bench.run_case = run_case
        status = bench.main(["--ops", "rmsnorm", "--dtypes", "bf16", "--no-plot", "--out", {str(tmp_path)!r}])
        print(json.dumps({{"status": status, "finished": finished}}))
        """
    rows = [new_row("ours", 39.6, 45.0), new_row("eager", 90.0, 95.0)]
    printed = json.loads(in_project(project, script, json.dumps(rows)).strip().splitlines()[-1])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert printed["status"] == 1 and len(printed["finished"]) == 2
    assert saved["meta"]["interrupted"].startswith("after 2 of ")
    assert len(saved["rows"]) == 4 and {r["case"] for r in saved["rows"]} <= {
        c.split("/")[-1] for c in printed["finished"]
    }
    assert any(failure.startswith("interrupted after 2 of ") for failure in saved["failures"])
    assert "interrupted: after 2 of" in (tmp_path / "results.md").read_text()
