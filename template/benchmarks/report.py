"""bench.py's output: the terminal tables, results.md and results.png (results.json is bench.py's rows as they are),
and --compare: two runs' results.json, case by case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cases._common import optional

COLUMNS = ["variant", "case", "dtype", "impl", "µs", "graph µs", "GB/s", "% copy", "% spec", "ours ×", "note"]


def fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "us":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if kind == "x":
        return f"{value:.2f}×"
    return f"{value:.0f}"


def table_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            r["variant"],
            r["case"],
            r["dtype"],
            r["impl"],
            fmt(r["time_us"], "us"),
            fmt(r["graph_us"], "us"),
            fmt(r["gbs"], ""),
            fmt(r["pct_copy"], ""),
            fmt(r["pct_spec"], "") if r["pct_spec"] is not None or r["time_us"] is None else "n/a",
            fmt(r["ours_speedup"], "x"),
            r["note"],
        ]
        for r in rows
    ]


def print_tables(rows: list[dict], console: Any) -> None:
    for op in dict.fromkeys(r["op"] for r in rows):
        body = table_rows([r for r in rows if r["op"] == op])
        if console is None:
            widths = [max(len(c), *(len(line[i]) for line in body)) for i, c in enumerate(COLUMNS)]
            print(f"\n{op}")
            for line in [COLUMNS, *body]:
                print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
            continue
        from rich.table import Table
        from rich.text import Text

        table = Table(title=op, title_justify="left")
        for column in COLUMNS:
            numeric = column not in ("variant", "case", "dtype", "impl", "note")
            table.add_column(column, justify="right" if numeric else "left", no_wrap=column != "note")
        for line in body:  # Text cells: brackets in notes are not rich markup
            table.add_row(*map(Text, line), style="bold" if line[3] == "ours" else None)
        console.print(table)


def write_markdown(path: Path, name: str, meta: dict, rows: list[dict], failures: list[str]) -> None:
    lines = [f"# {name}: micro benchmarks", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items() if key != "competitors"]
    lines.append("- competitors: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in meta["competitors"].items()))
    lines += [
        "",
        "µs: median of cold-L2 calls; graph µs: per call in a replayed CUDA graph (cases under 4 MB);",
        "GB/s: bytes moved (each input read once, each output written once) / time; ours ×: baseline time /",
        "our time.",
        "",
    ]
    for failure in failures:
        lines.append(f"**FAILED** {failure}  ")
    for op in dict.fromkeys(r["op"] for r in rows):
        lines += ["", f"## {op}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for line in table_rows([r for r in rows if r["op"] == op]):
            line = [cell.replace("|", "\\|") for cell in line]
            if line[3] == "ours":
                line[3:5] = [f"**{line[3]}**", f"**{line[4]}**"]
            lines.append("| " + " | ".join(line) + " |")
    path.write_text("\n".join(lines) + "\n")


def plot(
    path: Path, rows: list[dict], impls: list[str], copy_gbs: float, spec_gbs: float | None, title: str
) -> str | None:
    """GB/s against bytes moved, one panel per op and one series per implementation (`impls`: their order, which
    gives each its colour and marker); returns why not, if not."""
    matplotlib = optional("matplotlib")
    if matplotlib is None:
        return "matplotlib is not installed"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for index, impl in enumerate(impls):  # the same colour and marker for an impl in every panel
            points = sorted((r["bytes"], r["gbs"]) for r in rows if r["op"] == op and r["impl"] == impl and r["gbs"])
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
# --compare: new/old of the median GPU time, case by case (bench.py's docstring says how to run it)
# --------------------------------------------------------------------------------------------------------------
KEY = ("op", "variant", "case", "dtype", "impl")  # what matches a row of one run to a row of the other
# What fails a case of ours: THRESHOLD % slower, and for cold-L2 times also FLOOR_US µs slower. In four runs of the same
# build back to back on an H200 (RMSNorm, 62 cases x 2 dtypes), cases of 30 µs and more moved by up to 4%, shorter
# cold-L2 times by up to 2 µs (launch and timer jitter; up to 2x below 10 µs), CUDA-graph times by up to 1.2%.
THRESHOLD = 5.0
FLOOR_US = 2.0


def load_rows(path: Path) -> list[dict]:
    """The rows of a results.json that bench.py wrote; ValueError with a one-line reason for anything else."""
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
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and fields <= r.keys() and isinstance(r["time_us"], (int, float, type(None))) for r in rows
    ):
        raise ValueError(f"{path}: not a results.json of bench.py (a list 'rows' of {', '.join(sorted(fields))})")
    return rows


def timed(before: dict, after: dict) -> tuple[float | None, float | None, str]:
    """The two runs' times of one implementation in one case: per call in a CUDA graph where both runs have one (the
    steadiest: no launch overhead), else the cold-L2 median."""
    if before.get("graph_us") and after.get("graph_us"):
        return before["graph_us"], after["graph_us"], "graph"
    return before["time_us"], after["time_us"], "cold"


def compare(
    old: list[dict], new: list[dict], threshold: float, names: tuple[str, str], selected: set | None = None
) -> tuple[list[str], bool]:
    """The lines of a case-by-case comparison of two runs, a one-line summary last, and whether it fails: a case of
    ours more than `threshold` % slower in `new` than in `old` (cold-L2 times: and more than FLOOR_US), or no case of
    ours in both. `selected`: the (op, variant, case, dtype) this run took; old rows outside it are only counted."""
    old_name, new_name = names
    by_case: list[dict[tuple, dict]] = [{}, {}]  # old's and new's (the two may have the same name: --out)
    for side, rows in enumerate((old, new)):
        for row in rows:
            by_case[side].setdefault(tuple(row[k] for k in KEY[:4]), {})[row["impl"]] = row
    unselected = [case for case in by_case[0] if selected is not None and case not in selected]
    for case in unselected:
        del by_case[0][case]
    limit = 1 + threshold / 100
    lines = [
        f"compare: new/old of the GPU time, {new_name} against {old_name}; ours fails when more than {threshold:g}% "
        f"slower (cold-L2 times: and more than {FLOOR_US:g} µs)",
        f"{'op/variant/case dtype':66} {'time':5} {'ours old':>9} {'ours new':>9} {'new/old':>7} {'':6}  others",
    ]
    slower, compared, only = [], 0, ([], [])
    for case in dict.fromkeys([*by_case[1], *by_case[0]]):
        label = "/".join(case[:3]) + f" {case[3]}"
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
            beyond_noise = kind == "graph" or abs(b - a) > FLOOR_US
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
            f"{len(unselected)} cases of {old_name} not selected in this run (--ops/--dtypes/--shapes/--quick)"
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
