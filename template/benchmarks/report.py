"""bench.py's output: the terminal tables, results.md and results.png (results.json is bench.py's rows as they are)."""

from __future__ import annotations

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
