"""bench.py's output: the terminal tables, results.md and results.png (results.json is bench.py's rows as they are),
and --compare: two runs' results.json, case by case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cases._common import optional

MODES = {"forward": "", "train": ", forward+backward"}  # a row's "mode" (absent in older files: forward)
RATIOS = {"gpu": "gpu_us", "time": "time_us", "host": "host_us"}  # ratio name -> the time it compares
COLUMNS = ["variant", "case", "dtype", "impl", "GPU µs", "GB/s", "% copy", "eager-call µs", "host µs", "ours × (GPU)"]
COLUMNS.append("note")
HOST_COLUMNS = ["op", "variant", "case", "dtype", "mode", "impl", "host µs", "ours × (host)", "note"]
TEXT_COLUMNS = {"op", "variant", "case", "dtype", "mode", "impl", "note"}
# A GPU time whose bytes per second beat the memory's spec bandwidth (gpus.yml) by more than SUSPECT_MARGIN is not
# believed: some of the call's kernels were not counted, or it moved fewer bytes than the case says must move. Its
# row is marked SUSPECT and left out of the GPU-time comparisons. Without a spec figure for the GPU, the bound is
# the copy bandwidth measured in the same run plus COPY_MARGIN: a torch copy runs below the spec (H100 3002-3015
# GB/s of 3350, H200 4225-4256 of 4800), and a row kernel timed fairly beat it by 5% (H100, bf16 RMSNorm 1024 x
# 4096: 5.31 µs in three runs, 105% of copy, 94% of spec; the template's docs/benchmarks.md, "2026-12-07
# (interleaved)"), which the copy plus 5% had marked SUSPECT.
SUSPECT_MARGIN = 0.05
COPY_MARGIN = 0.15
EXPLANATION = """\
GPU µs: the device time of the kernels (memsets, memcpys) one call launches, L2 cleared before it (torch.profiler,
median of 30 calls; "GPU time: cuda graph" where the profiler was not usable). GB/s: bytes that must move
(each input read once, each output written once; forward+backward: the case's count) / GPU time; % copy: of the
copy bandwidth measured in this run. eager-call µs: triton's do_bench median, L2 cleared before each call: what an
eager model sees (host overhead included). host µs: wall time per call of 2000 calls on a tiny shape, in rounds of
200 that the implementations take in turn, each synchronized at its end (GPU idle), also in a table of its own.
ours × (GPU): the row's GPU time / ours; on ours' row, the fastest other implementation's / ours, and which it was.
Every implementation's output (forward+backward: and its gradients) was checked against a float64 reference first;
WRONG rows are timed but never compared. A GPU time faster than the memory's spec bandwidth allows for its bytes (by
more than 5%; without a spec figure, the copy bandwidth by more than 15%) is shown as SUSPECT, never compared."""


def fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "us":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if kind == "x":
        return f"{value:.2f}×"
    return f"{value:.0f}"


def derive(rows: list[dict], copy_gbs: float | None, spec_gbs: float | None) -> list[dict]:
    """One case's rows (one dtype and mode) with their GB/s, % copy and % spec (from the GPU time) and ratios."""
    for row in rows:
        us, moved = row.get("gpu_us"), row.get("bytes")
        row["gbs"] = moved / us / 1e3 if us and moved else None
        row["pct_copy"] = 100 * row["gbs"] / copy_gbs if row["gbs"] and copy_gbs else None
        row["pct_spec"] = 100 * row["gbs"] / spec_gbs if row["gbs"] and spec_gbs else None
        pct, bound, of = (
            (row["pct_spec"], SUSPECT_MARGIN, "spec") if spec_gbs else (row["pct_copy"], COPY_MARGIN, "copy")
        )
        row["suspect"] = bool(pct and pct > 100 * (1 + bound))
        if row["suspect"] and "SUSPECT" not in row.get("note", ""):
            why = (
                f"SUSPECT: {fmt(us, 'us')} µs is {pct:.0f}% of the {of} bandwidth for its bytes (kernels not "
                f"counted, or fewer bytes moved than counted); not compared"
            )
            row["note"] = f"{row.get('note', '')} {why}".strip()
    return add_ratios(rows)


def add_ratios(rows: list[dict]) -> list[dict]:
    """One case's rows with, for each of the three times (RATIOS): on every other row, `ours_vs_<time>` = its time /
    ours; on ours' row, `best_<time>_impl`, the fastest other implementation, and `ours_vs_best_<time>` = its time /
    ours (above 1: ours is faster). Rows whose output was wrong (valid False), times missing and SUSPECT GPU times
    are left out."""

    def usable(row: dict, key: str) -> bool:
        return bool(row.get(key)) and not (key == "gpu_us" and row.get("suspect"))

    ours = next((r for r in rows if r["impl"] == "ours"), None)
    for name, key in RATIOS.items():
        mine = ours.get(key) if ours and usable(ours, key) else None
        others = [r for r in rows if r["impl"] != "ours" and r.get("valid", True) and usable(r, key)]
        compared = {id(r) for r in others}
        for row in rows:
            row[f"ours_vs_{name}"] = row[key] / mine if mine and id(row) in compared else None
            row[f"best_{name}_impl"] = row[f"ours_vs_best_{name}"] = None
        if mine and others:
            best = min(others, key=lambda r: r[key])
            ours[f"best_{name}_impl"], ours[f"ours_vs_best_{name}"] = best["impl"], best[key] / mine
    return rows


def ours_cell(row: dict, name: str) -> str:
    """The "ours ×" cell of one time: this row's time / ours, or on ours' row, the fastest other's / ours (named)."""
    if row["impl"] == "ours":
        ratio = row.get(f"ours_vs_best_{name}")
        return f"{ratio:.2f}× vs {row[f'best_{name}_impl']}" if ratio else "-"
    return fmt(row.get(f"ours_vs_{name}"), "x")


def gpu_note(row: dict) -> str:
    """How the GPU time was measured, where not plainly by the profiler."""
    method = row.get("gpu_method")
    return f"GPU time: {method}" if method and method != "profiler" else ""


GPU_CELLS = [("gpu_us", "us"), ("gbs", ""), ("pct_copy", "")]  # the table's cells from the GPU time


def table_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            r["variant"],
            r["case"],
            r["dtype"],
            r["impl"],
            *(["SUSPECT", "-", "-"] if r.get("suspect") else [fmt(r.get(k), u) for k, u in GPU_CELLS]),
            fmt(r.get("time_us"), "us"),
            fmt(r.get("host_us"), "us"),
            ours_cell(r, "gpu"),
            "; ".join(filter(None, [gpu_note(r), r["note"]])),
        ]
        for r in rows
    ]


def host_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [r["op"], r["variant"], r["case"], r["dtype"], r.get("mode", "forward"), r["impl"]]
        + [fmt(r["host_us"], "us"), ours_cell(r, "host"), r.get("host_note", "")]
        for r in rows
        if r.get("host_us") is not None
    ]


def tables(rows: list[dict]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, cells) of every table: one per op and mode, then the host times."""
    found = []
    for op in dict.fromkeys(r["op"] for r in rows):
        for mode, suffix in MODES.items():
            body = table_rows([r for r in rows if r["op"] == op and r.get("mode", "forward") == mode])
            if body:
                found.append((op + suffix, COLUMNS, body))
    body = host_rows(rows)
    if body:
        found.append(("host time per call (tiny shapes, GPU idle)", HOST_COLUMNS, body))
    return found


def print_tables(rows: list[dict], console: Any) -> None:
    for title, columns, body in tables(rows):
        impl = columns.index("impl")
        if console is None:
            widths = [max(len(c), *(len(line[i]) for line in body)) for i, c in enumerate(columns)]
            print(f"\n{title}")
            for line in [columns, *body]:
                print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
            continue
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, title_justify="left")
        for column in columns:
            numeric = column not in TEXT_COLUMNS
            table.add_column(column, justify="right" if numeric else "left", no_wrap=column != "note")
        for line in body:  # Text cells: brackets in notes are not rich markup
            table.add_row(*map(Text, line), style="bold" if line[impl] == "ours" else None)
        console.print(table)


def write_markdown(path: Path, name: str, meta: dict, rows: list[dict], failures: list[str]) -> None:
    lines = [f"# {name}: micro benchmarks", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items() if key != "competitors"]
    competitors = meta.get("competitors", {})
    lines.append("- competitors: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in competitors.items()))
    lines += ["", *EXPLANATION.splitlines(), ""]
    for failure in failures:
        lines.append(f"**FAILED** {failure}  ")
    for title, columns, body in tables(rows):
        impl = columns.index("impl")
        lines += ["", f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for line in body:
            line = [cell.replace("|", "\\|") for cell in line]
            if line[impl] == "ours":
                line[impl : impl + 2] = [f"**{line[impl]}**", f"**{line[impl + 1]}**"]
            lines.append("| " + " | ".join(line) + " |")
    path.write_text("\n".join(lines) + "\n")


def plot(
    path: Path, rows: list[dict], impls: list[str], copy_gbs: float, spec_gbs: float | None, title: str
) -> str | None:
    """GB/s (from the GPU time) against bytes moved of the forward rows, one panel per op and one series per
    implementation (`impls`: their order, which gives each its colour and marker); returns why not, if not."""
    matplotlib = optional("matplotlib")
    if matplotlib is None:
        return "matplotlib is not installed"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("mode", "forward") == "forward" and r.get("valid", True) and not r.get("suspect")]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    if not ops:
        return "no forward row has a GPU time"
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for index, impl in enumerate(impls):  # the same colour and marker for an impl in every panel
            points = sorted(
                (r["bytes"], r["gbs"]) for r in rows if r["op"] == op and r["impl"] == impl and r.get("gbs")
            )
            if points:
                ax.plot(*zip(*points), marker="o^sDvP"[index % 6], color=f"C{index % 10}", linestyle="none", label=impl)
        ax.axhline(copy_gbs, color="gray", linestyle="--", linewidth=1, label="copy (measured)")
        if spec_gbs:
            ax.axhline(spec_gbs, color="black", linestyle=":", linewidth=1, label="spec")
        ax.set(xscale="log", xlabel="bytes moved", ylabel="GB/s", title=op)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------------------------------------------
# --compare: new/old of ours' GPU time, case by case (bench.py's docstring says how to run it)
# --------------------------------------------------------------------------------------------------------------
KEY = ("op", "variant", "case", "dtype", "impl")  # what matches a row of one run to a row of the other, with its mode
# What fails a case of ours: THRESHOLD % slower, and also FLOORS[kind] µs slower. In four runs of the same build back
# to back on an H200 (RMSNorm, 62 cases x 2 dtypes), cases of 30 µs and more moved by up to 4%, shorter cold-L2
# eager-call times by up to 2 µs (launch and timer jitter; up to 2x below 10 µs), CUDA-graph times by up to 1.2%.
# The profiler's GPU times have no launch jitter; their floor of 0.5 µs is a guess until runs measure it.
THRESHOLD = 5.0
FLOOR_US = 2.0
FLOORS = {"gpu": 0.5, "graph": 0.0, "cold": FLOOR_US}


def mode(row: dict) -> str:
    return row.get("mode") or "forward"


def case_key(row: dict) -> tuple[str, str, str, str, str]:
    return row["op"], row["variant"], row["case"], row["dtype"], mode(row)


def load_rows(path: Path) -> list[dict]:
    """The rows of a results.json that bench.py wrote (also before it measured GPU and host times); ValueError with
    a one-line reason for anything else."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read it ({type(error).__name__})") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    fields = {*KEY, "time_us"}
    number = (int, float, type(None))
    if not isinstance(rows, list) or not all(
        isinstance(r, dict)
        and fields <= r.keys()
        and all(isinstance(r.get(k), number) for k in ("time_us", "gpu_us", "graph_us", "host_us"))
        and mode(r) in MODES
        for r in rows
    ):
        raise ValueError(f"{path}: not a results.json of bench.py (a list 'rows' of {', '.join(sorted(fields))})")
    return rows


def timed(before: dict, after: dict) -> tuple[float | None, float | None, str]:
    """The two runs' times of one implementation in one case: the GPU time where both runs have one (no launch
    jitter), else per call in a CUDA graph where both have one (older runs), else the eager-call (cold-L2) time. A
    GPU time marked suspect (faster than the copy bandwidth allows) is never compared."""
    for key, kind in (("gpu_us", "gpu"), ("graph_us", "graph")):
        suspect = key == "gpu_us" and (before.get("suspect") or after.get("suspect"))
        if before.get(key) and after.get(key) and not suspect:
            return before[key], after[key], kind
    return before.get("time_us"), after.get("time_us"), "cold"


def compare(
    old: list[dict], new: list[dict], threshold: float, names: tuple[str, str], selected: set | None = None
) -> tuple[list[str], bool]:
    """The lines of a case-by-case comparison of two runs, a one-line summary last, and whether it fails: a case of
    ours more than `threshold` % slower in `new` than in `old` (and more than FLOORS of its kind of time), or no
    case of ours in both. `selected`: the (op, variant, case, dtype, mode) this run took (a 4-tuple: forward);
    old rows outside it are only counted."""
    old_name, new_name = names
    if selected is not None:
        selected = {tuple(s) if len(s) == 5 else (*s, "forward") for s in selected}
    by_case: list[dict[tuple, dict]] = [{}, {}]  # old's and new's (the two may have the same name: --out)
    for side, rows in enumerate((old, new)):
        for row in rows:
            by_case[side].setdefault(case_key(row), {})[row["impl"]] = row
    unselected = [case for case in by_case[0] if selected is not None and case not in selected]
    for case in unselected:
        del by_case[0][case]
    limit = 1 + threshold / 100
    lines = [
        f"compare: new/old of ours' GPU time (else, in older runs, per call in a CUDA graph, else the cold-L2 "
        f"eager-call time), {new_name} against {old_name}; ours fails when more than {threshold:g}% slower (GPU "
        f"times: and more than {FLOORS['gpu']:g} µs; cold-L2 times: {FLOORS['cold']:g} µs)",
        f"{'op/variant/case dtype':66} {'time':5} {'ours old':>9} {'ours new':>9} {'new/old':>7} {'':6}  others",
    ]
    slower, compared, only = [], 0, ([], [])
    for case in dict.fromkeys([*by_case[1], *by_case[0]]):
        label = "/".join(case[:3]) + f" {case[3]}" + (f" {case[4]}" if case[4] != "forward" else "")
        before, after = by_case[0].get(case, {}), by_case[1].get(case, {})
        for side, here, there in ((0, before, after), (1, after, before)):
            if here and not there:
                only[side].append(label)
            elif there:
                only[side].extend(f"{label} {impl}" for impl in here if impl not in there)
        if "ours" not in before or "ours" not in after:
            continue
        ratios = {}
        for impl in [impl for impl in after if impl in before and impl != "ours"]:
            a, b, _ = timed(before[impl], after[impl])
            ratios[impl] = f"{b / a:.2f}" if a and b else "-"
        a, b, kind = timed(before["ours"], after["ours"])
        mark = ""
        if a and b:
            compared += 1
            beyond_noise = abs(b - a) > FLOORS[kind]
            if b / a > limit and beyond_noise:
                mark = "SLOWER"
                slower.append((b / a, label))
            elif b / a < 2 - limit and beyond_noise:
                mark = "faster"
        others = ", ".join(f"{impl} {ratio}" for impl, ratio in ratios.items())
        cells = f"{fmt(a, 'us'):>9} {fmt(b, 'us'):>9} {f'{b / a:.3f}' if a and b else '-':>7}"
        lines.append(f"{label:66} {kind:5} {cells} {mark:6}  {others}".rstrip())
    for name, labels in zip(names, only):
        if labels:
            lines.append(f"only in {name} ({len(labels)}): {'; '.join(labels)}")
    if unselected:
        lines.append(
            f"{len(unselected)} cases of {old_name} not selected in this run (--ops/--dtypes/--shapes/--quick/--modes)"
        )
    if slower:
        slower.sort(reverse=True)
        named = ", ".join(f"{label} (+{100 * (ratio - 1):.1f}%)" for ratio, label in slower[:5])
        more = f" and {len(slower) - 5} more" if len(slower) > 5 else ""
        lines.append(
            f"compare: {len(slower)} of {compared} cases of ours slower than in {old_name} (re-run them to rule out a "
            f"spike): {named}{more}"
        )
    elif not compared:
        lines.append(f"compare: no case of ours has a time in both {old_name} and {new_name}")
    else:
        lines.append(
            f"compare: no case of ours more than {threshold:g}% slower than in {old_name} ({compared} compared)"
        )
    return lines, bool(slower) or not compared
