"""Write the results summaries of README.md and docs/benchmarks.md from committed results files.

Each summary is a block between two marker comments; the first names the block and the results files it comes
from (paths relative to the document):

    <!-- results summary: results/h200-bf16.md, results/h200-geglu-bf16.md -->
    ...written by this script...
    <!-- /results summary -->

The files are the results.md that the generated project's `benchmarks/bench.py` writes and the e2e.md of
`benchmarks/e2e.py` (the .json beside each is the same run); every figure in a block is a cell of one of them,
copied as the file shows it. Where two files have the same row, the later file's row is used.

    python docs/results/summarize.py            # rewrite every block from the files its marker names
    python docs/results/summarize.py --check    # exit 1 when a block is not what its files give (the docs test)
    # after a new run: point the blocks at its files (comma-separated where more than one), then rewrite them
    python docs/results/summarize.py --bench docs/results/h200-2027-01-05-bf16.md \\
        --e2e docs/results/h200-2027-01-05-e2e.md

--bench names the files of the summary, precision and every-shape blocks (full bench.py runs), --e2e the file of
the end-to-end blocks (README's headline too). The dated blocks of docs/benchmarks.md (a section per session) keep
the files their markers name. Prose outside the blocks that quotes a figure names its results file, and
tests/test_results_docs.py checks that the figure is in it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"]
MARKER = re.compile(
    r"<!-- results (?P<name>[\w-]+): (?P<files>[^>]*?) -->\n(?P<body>.*?)<!-- /results (?P=name) -->\n", re.S
)

# The rows of the summary tables: (label, table title in the results file, variant, case). A case that no named
# file has is listed under its table as not in the run.
SUMMARY = [
    ("RMSNorm, Qwen3-8B 8192 x 4096", "rmsnorm", "weight", "qwen3-8b.hidden.8192x4096"),
    ("RMSNorm, Qwen3-8B 16384 x 4096", "rmsnorm", "weight", "qwen3-8b.hidden.16384x4096"),
    ("RMSNorm, Qwen3-8B 128 x 4096", "rmsnorm", "weight", "qwen3-8b.hidden.128x4096"),
    ("RMSNorm no weight, LTX-Video 2 x 7392 x 2048", "rmsnorm", "no_weight", "ltx-2b.norm1.2x7392x2048"),
    ("RMSNorm per head, Qwen3 q_norm 8192 x 32 x 128", "rmsnorm", "weight", "qwen3-8b.q_norm.8192x32x128"),
    ("fused add + RMSNorm 8192 x 4096", "rmsnorm", "fused_add", "qwen3-8b.add_norm.8192x4096"),
    ("RoPE3D one tensor 2 x 7392 x 2048", "rope3d", "one", "ltx-2b.attn1.2x7392x2048"),
    ("RoPE3D q+k fused 2 x 7392 x 2048", "rope3d", "qk", "ltx-2b.attn1.2x7392x2048"),
    ("RoPE3D cos/sin in the kernel 2 x 7392 x 2048", "rope3d", "qk_grid", "ltx-2b.attn1.2x7392x2048"),
    ("GEGLU erf 14784 x 16384", "geglu", "erf", "ltx-2b-sized.14784x16384"),
    ("GEGLU tanh 14784 x 16384", "geglu", "tanh", "ltx-2b-sized.14784x16384"),
    ("AdaLN (B,1,D) 2 x 7392 x 2048", "adaln", "B1D", "ltx-2b.norm1-modulated.2x7392x2048"),
    ("AdaLN (B,S,D) 2 x 7392 x 2048", "adaln", "BSD", "ltx-2b.norm1-modulated.2x7392x2048"),
]
TRAIN = [
    ("RMSNorm forward+backward 8192 x 4096", "rmsnorm, forward+backward", "weight", "qwen3-8b.hidden.8192x4096"),
    ("fused add forward+backward 8192 x 4096", "rmsnorm, forward+backward", "fused_add", "qwen3-8b.add_norm.8192x4096"),
    ("AdaLN (B,S,D) forward+backward", "adaln, forward+backward", "BSD", "ltx-2b.norm1-modulated.2x7392x2048"),
]
QUICK = [
    row
    for row in SUMMARY
    if row[0].startswith(("RMSNorm", "fused", "AdaLN")) and "16384" not in row[0] and "128 x" not in row[0]
] + TRAIN
MODELS = {
    "ltx": "LTX-Video 2B transformer, batch 2",
    "qwen3": "Qwen3-8B decoder layers, batch 1",
    "sd": "SDXL transformer blocks (GEGLU), batch 2",
}


class ResultsError(Exception):
    """A results file or a marker that this script cannot use; the message says which and why."""


# ------------------------------------------------------------------------------------------------------------
# Reading results files
# ------------------------------------------------------------------------------------------------------------
class Results:
    """One results.md (bench.py) or e2e.md (e2e.py): its "- key: value" lines and its tables, each row a dict of
    column -> cell as the file shows it (bold marks removed)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            text = path.read_text()
        except OSError as error:
            raise ResultsError(f"{path}: cannot read it ({type(error).__name__})") from None
        self.meta = dict(re.findall(r"^- ([^:\n]+): (.*)$", text.split("\n|", 1)[0], re.M))
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.sections: dict[str, str] = {}  # table title -> its "## title" section as written
        title = ""
        for block in re.split(r"\n(?=## )", text):
            if block.startswith("## "):
                title = block[3:].split("\n", 1)[0]
                self.sections[title] = block.rstrip("\n")
            lines = [line for line in block.splitlines() if line.startswith("|")]
            if len(lines) > 2:
                columns = cells(lines[0])
                self.tables[title] = [dict(zip(columns, cells(line), strict=False)) for line in lines[2:]]
        if not self.tables:
            raise ResultsError(f"{path}: no results table (not a results.md of bench.py or an e2e.md of e2e.py)")

    def link(self, doc: Path) -> str:
        name = os.path.relpath(self.path, doc.parent)
        return f"[{name}]({name})"

    def rows(self, title: str) -> list[dict[str, str]]:
        return self.tables.get(title, [])


def cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [part.strip().strip("*").replace("\\|", "|") for part in parts]


def number(cell: str) -> float:
    found = re.match(r"[\d.]+", cell)
    return float(found[0]) if found else float("inf")


def time_column(rows: list[dict[str, str]]) -> str:
    """The time a bench table compares: the GPU time (bench.py since 2026-12-01), else the cold-L2 call time."""
    return "GPU µs" if rows and "GPU µs" in rows[0] else "µs"


def bench_case(files: list[Results], title: str, variant: str, case: str, dtype: str) -> list[dict[str, str]]:
    """The rows of one case (every implementation), from the last file that has it."""
    for results in reversed(files):
        rows = [r for r in results.rows(title) if (r["variant"], r["case"], r["dtype"]) == (variant, case, dtype)]
        if rows:
            return rows
    return []


def fastest_other(rows: list[dict[str, str]], time: str) -> tuple[dict[str, str], str] | None:
    """The fastest implementation other than ours (rows marked WRONG left out), and "its time / ours" as the file
    shows it (above 1: ours is faster)."""
    ours = next(r for r in rows if r["impl"] == "ours")
    others = [r for r in rows if r["impl"] != "ours" and "WRONG" not in r["note"] and r[time] != "-"]
    if not others:
        return None
    if "ours × (GPU)" in ours:  # bench.py since 2026-12-01: ours' row names the fastest other and the ratio
        ratio, _, name = ours["ours × (GPU)"].partition(" vs ")
        return next(r for r in others if r["impl"] == name), ratio
    best = min(others, key=lambda r: number(r[time]))
    return best, best["ours ×"]


# ------------------------------------------------------------------------------------------------------------
# The blocks
# ------------------------------------------------------------------------------------------------------------
def sources(files: list[Results], doc: Path) -> str:
    links = [results.link(doc) for results in files]
    if len(links) == 1:
        return f"From {links[0]}"
    return f"From {', '.join(links[:-1])} and {links[-1]} (a case in more than one: the last one's row)"


def missing_note(missing: list[str]) -> list[str]:
    return ["", f"Not in these files: {'; '.join(missing)}."] if missing else []


def gpu_table(files: list[Results], doc: Path, rows: list[tuple[str, str, str, str]], dtype: str = "bf16") -> str:
    """Ours against the fastest other implementation in the same run, one line per case."""
    lines, missing = [], []
    header = None
    for label, title, variant, case in rows:
        found = bench_case(files, title, variant, case, dtype)
        if not found:
            missing.append(label)
            continue
        time = time_column(found)
        header = header or time
        ours = next(r for r in found if r["impl"] == "ours")
        best = fastest_other(found, time)
        other, ratio = (f"{best[0]['impl']} {best[0][time]}", best[1]) if best else ("-", "-")
        graph = ours.get("graph µs", "-")  # bench.py before 2026-12-01: per call in a CUDA graph, small inputs
        mine = ours[time] + (f" ({graph} in a CUDA graph)" if graph != "-" else "")
        lines.append(f"| {label} | {mine} | {ours['% copy']} | {other} | {ratio} |")
    what = "GPU time" if header == "GPU µs" else "median time of a cold-L2 call"
    head = [
        f'{sources(files, doc)}; {dtype}, {what} in µs; "ours vs it" is its time / ours (above 1: ours is faster).',
        "",
        f"| {dtype} | ours µs | % copy | fastest other, µs | ours vs it |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + lines + missing_note(missing)) + "\n"


def precision_table(files: list[Results], doc: Path) -> str:
    """Ours in every precision the files have, µs (% copy), one line per summary case."""
    dtypes = list(dict.fromkeys(r["dtype"] for f in files for rows in f.tables.values() for r in rows if "dtype" in r))
    lines, missing = [], []
    for label, title, variant, case in SUMMARY:
        found = {dtype: bench_case(files, title, variant, case, dtype) for dtype in dtypes}
        if not any(found.values()):
            missing.append(label)
            continue
        row = []
        for rows in found.values():
            ours = next((r for r in rows if r["impl"] == "ours"), None)
            row.append(f"{ours[time_column(rows)]} ({ours['% copy']}%)" if ours else "-")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    head = [
        f"{sources(files, doc)}: ours in every precision the files have.",
        "",
        "| ours, µs (% copy) | " + " | ".join(dtypes) + " |",
        "|---|" + "---|" * len(dtypes),
    ]
    return "\n".join(head + lines + missing_note(missing)) + "\n"


def host_table(files: list[Results], doc: Path) -> str:
    """Host time per call of ours against the fastest other, every case of the files' host tables."""
    lines = []
    title = "host time per call (tiny shapes, GPU idle)"
    for results in files:
        for ours in [r for r in results.rows(title) if r["impl"] == "ours"]:
            ratio, _, name = ours["ours × (host)"].partition(" vs ")
            other = next(
                r
                for r in results.rows(title)
                if r["impl"] == name and all(r[key] == ours[key] for key in ("op", "variant", "case", "dtype", "mode"))
            )
            case = f"{ours['op']} {ours['variant']} {ours['case']}, {ours['mode']}"
            lines.append(f"| {case} | {ours['host µs']} | {name} {other['host µs']} | {ratio} |")
    head = [
        f'{sources(files, doc)}: host time per call, µs (tiny shapes, GPU idle); "ours vs it" is its time / ours.',
        "",
        "| case, mode | ours µs | fastest other, µs | ours vs it |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + lines) + "\n"


KEY_COLUMNS = ("op", "variant", "case", "dtype", "mode", "impl")


def merged_section(title: str, files: list[Results]) -> str:
    """The section of a table that more than one file has (e.g. the host times of runs split by --ops): every row
    of each, a row that more than one has (same op, variant, case, dtype, mode and implementation) from the last,
    in the order the rows first appear; the text around the table from the last file."""
    rows: dict[tuple[str, ...], str] = {}
    head = tail = header = []
    for results in files:
        lines = results.sections[title].split("\n")
        table = [i for i, line in enumerate(lines) if line.startswith("|")]
        head, header, tail = lines[: table[0]], lines[table[0] : table[0] + 2], lines[table[-1] + 1 :]
        columns = cells(header[0])
        keys = [columns.index(c) for c in KEY_COLUMNS if c in columns]
        for line in lines[table[0] + 2 : table[-1] + 1]:
            row = cells(line)
            rows[tuple(row[k] for k in keys)] = line
    return "\n".join([*head, *header, *rows.values(), *tail])


def every_shape(files: list[Results], doc: Path) -> str:
    """Every table of the files, as written; a table in more than one file merged (see merged_section)."""
    titles = list(dict.fromkeys(title for results in files for title in results.sections))
    sections = []
    for title in titles:
        having = [results for results in files if title in results.sections]
        sections.append(having[0].sections[title] if len(having) == 1 else merged_section(title, having))
    return f"{sources(files, doc)}, copied as they are.\n\n" + "\n\n".join(sections) + "\n"


def e2e_rows(files: list[Results]) -> dict[tuple[str, str, str, str], dict[str, str]]:
    """(model, tokens, mode, variant) -> row; a row in more than one file from the last one."""
    found = {}
    for results in files:
        for row in results.rows(""):
            found[row["model"], row["tokens"], row["mode"], row["variant"]] = row
    if not found or "× compile" not in next(iter(found.values())):
        raise ResultsError(f"{files[0].path}: no e2e.md table (model, tokens, mode, variant, ms, × eager, × compile)")
    return found


def e2e_cell(rows: dict, where: tuple[str, str, str], variant: str, column: str) -> str:
    row = rows.get((*where, variant))
    return row[column] if row else "-"


def e2e_table(files: list[Results], doc: Path) -> str:
    rows = e2e_rows(files)
    lines = [
        f"{sources(files, doc)}.",
        "",
        "| model (dims) | tokens | mode | eager ms | kernels ms | kernels × eager | compile ms | compile + kernels ms "
        "| × compile | control × compile |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, tokens, mode in dict.fromkeys(key[:3] for key in rows):
        cell = functools.partial(e2e_cell, rows, (model, tokens, mode))
        both = "compile + kernels"
        cells = [MODELS.get(model, model), tokens, mode, cell("eager", "ms"), cell("kernels", "ms")]
        cells += [cell("kernels", "× eager"), cell("compile", "ms"), cell(both, "ms"), cell(both, "× compile")]
        cells.append(cell("compile (copy)", "× compile"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def span(cells: list[str], what: str) -> str:
    """The lowest and the highest of ratio cells ("1.00×", ...) as "1.00-1.04×"; `what`: which rows, for the error."""
    if not cells:
        raise ResultsError(f"the e2e results have no {what} rows, which the text quotes")
    low, high = min(cells, key=number), max(cells, key=number)
    return high if low == high else f"{low.rstrip('×')}-{high}"


def ratios(rows: dict, variant: str, column: str, models: set[str] | None = None) -> list[str]:
    return [r[column] for (model, _, _, v), r in rows.items() if v == variant and (models is None or model in models)]


def ranges(rows: dict) -> dict[str, str]:
    """The ranges the end-to-end text quotes, by name."""
    both, control = "compile + kernels", "compile (copy)"
    return {
        "kernels": span(ratios(rows, "kernels", "× eager"), "kernels"),
        "compiled": span(ratios(rows, both, "× compile"), both),
        "diffusers": span(ratios(rows, both, "× compile", {"ltx", "sd"}), f"LTX-Video or SDXL {both}"),
        "transformers": span(ratios(rows, both, "× compile", {"qwen3"}), f"Qwen3 {both}"),
        "control": span(ratios(rows, control, "× compile"), f"'{control}' (e2e.py --control)"),
    }


def e2e_ranges(files: list[Results], doc: Path) -> str:
    found = ranges(e2e_rows(files))
    return (
        f"{sources(files, doc)}: against compile alone, compile + kernels runs at {found['compiled']} of its speed; "
        f"in the same run the control (the same work as compile) at {found['control']}. Eager models gain "
        f"{found['kernels']} from the kernels.\n"
    )


def e2e_headline(files: list[Results], doc: Path) -> str:
    rows = e2e_rows(files)
    found = ranges(rows)

    def get(model: str, mode: str) -> str:
        tokens = max((key[1] for key in rows if key[0] == model), key=int, default=None)
        row = rows.get((model, tokens, mode, "kernels"))
        if row is None:
            raise ResultsError(f"{files[-1].path}: no {model} {mode} kernels row, which README.md quotes")
        return row["× eager"]

    qwen3 = max((key[1] for key in rows if key[0] == "qwen3"), key=int, default="?")
    return (
        f"End to end on an H200 ({files[-1].link(doc)}) the kernels make one LTX-Video (2B dimensions) denoising "
        f"step {get('ltx', 'forward')} faster than eager diffusers ({get('ltx', 'train')} with the backward pass) "
        f"and Qwen3-8B decoder layers at {qwen3} tokens {get('qwen3', 'forward')} faster than eager transformers "
        f"({get('qwen3', 'train')} training). Under torch.compile, LTX-Video and SDXL run {found['diffusers']} the "
        "speed of compile alone with the kernels. The transformers RMSNorm layer leaves its norms to inductor there, "
        f"and inductor fuses them with their neighbours; Qwen3 measured {found['transformers']}, running the same "
        "compiled graph as compile alone. In the same run, compiling an unpatched copy of each model measured "
        f"{found['control']} of compile alone.\n"
    )


def runs(files: list[Results], doc: Path) -> str:
    """What each results file is: its date, GPU, command and versions."""
    lines = []
    for results in files:
        meta = results.meta
        versions = [f"torch {meta.get('torch', '?')}"]
        if "competitors" in meta:  # bench.py: "transformers 5.17.0, ..."
            versions.append(meta["competitors"])
        if "libraries" in meta:  # e2e.py: a dict's repr
            versions.append(", ".join(f"{k} {v}" for k, v in ast.literal_eval(meta["libraries"]).items()))
        copy = (
            f"; copy {meta['copy bandwidth (measured, GB/s)']} GB/s"
            if "copy bandwidth (measured, GB/s)" in meta
            else ""
        )
        lines.append(
            f"- {results.link(doc)}: {meta.get('date', '?')[:10]}, {meta.get('gpu', '?')}, "
            f"`{meta.get('command', '?')}`{copy}; {'; '.join(versions)}"
        )
    return "\n".join(lines) + "\n"


BLOCKS = {  # block name -> what writes it, and whether --bench / --e2e sets its files
    "runs": (runs, "all"),
    "summary": (lambda files, doc: gpu_table(files, doc, SUMMARY), "bench"),
    "precisions": (precision_table, "bench"),
    "every-shape": (every_shape, "bench"),
    "quick-gpu": (lambda files, doc: gpu_table(files, doc, QUICK), None),
    "quick-host": (host_table, None),
    "e2e-table": (e2e_table, "e2e"),
    "e2e-ranges": (e2e_ranges, "e2e"),
    "e2e-headline": (e2e_headline, "e2e"),
}


# ------------------------------------------------------------------------------------------------------------
# Rewriting the documents
# ------------------------------------------------------------------------------------------------------------
def block_files(doc: Path, match: re.Match) -> list[Path]:
    names = [name.strip() for name in match["files"].split(",") if name.strip()]
    if match["name"] not in BLOCKS:
        raise ResultsError(f"{doc.name}: unknown block {match['name']!r} (known: {', '.join(BLOCKS)})")
    if not names:
        raise ResultsError(f"{doc.name}: block {match['name']!r} names no results file")
    return [(doc.parent / name).resolve() for name in names]


def wrap(text: str, width: int = 116) -> str:
    """Prose lines wrapped as the rest of the docs are; table rows and headings as they are."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("|", "#")) or len(line) <= width:
            lines.append(line)
        else:
            indent = "  " if line.startswith("- ") else ""
            fill = textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
            lines.append(fill)
    return "\n".join(lines) + "\n"


def rewrite(doc: Path, text: str, chosen: dict[str, list[Path]]) -> str:
    """The document with every block written from its files (`chosen`: the files of the --bench / --e2e blocks)."""
    matches = list(MARKER.finditer(text))
    listed = {m["name"]: block_files(doc, m) for m in matches}
    for name, (_, kind) in BLOCKS.items():
        if kind in chosen and name in listed:
            listed[name] = chosen[kind]
    if "runs" in listed:  # every file another block of this document uses, in order
        listed["runs"] = list(dict.fromkeys(p for name, files in listed.items() if name != "runs" for p in files))
    loaded: dict[Path, Results] = {}

    def write(match: re.Match) -> str:
        # A block set by --bench / --e2e, or "runs", takes the files chosen above; any other its marker's own (a
        # document may hold several, e.g. one quick-gpu block per session)
        own = BLOCKS[match["name"]][1] is None
        paths = block_files(doc, match) if own else listed[match["name"]]
        files = [loaded.setdefault(path, Results(path)) for path in paths]
        names = ", ".join(os.path.relpath(path, doc.parent) for path in paths)
        body = wrap(BLOCKS[match["name"]][0](files, doc))
        return f"<!-- results {match['name']}: {names} -->\n{body}\n<!-- /results {match['name']} -->\n"

    return MARKER.sub(write, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a block is out of date")
    parser.add_argument("--bench", help="comma-separated results.md files of full bench.py runs (summary, precisions)")
    parser.add_argument("--e2e", help="comma-separated e2e.md files of e2e.py runs (end-to-end blocks, README)")
    args = parser.parse_args(argv)
    chosen = {
        kind: [Path(p.strip()).resolve() for p in value.split(",")]
        for kind, value in (("bench", args.bench), ("e2e", args.e2e))
        if value
    }
    if chosen and args.check:
        parser.error("--check compares the blocks with the files their markers name: it takes no --bench / --e2e")
    try:  # every document first, so that an error leaves them all as they were
        new = {doc: rewrite(doc, doc.read_text(), chosen) for doc in DOCS}
    except ResultsError as error:
        print(f"summarize.py: {error}", file=sys.stderr)
        return 2
    stale = [doc.relative_to(ROOT) for doc in DOCS if new[doc] != doc.read_text()]
    if not args.check:
        for doc in DOCS:
            doc.write_text(new[doc])
    if args.check and stale:
        print(f"summarize.py: out of date: {', '.join(map(str, stale))} (run python docs/results/summarize.py)")
        return 1
    print(
        ("rewrote " if stale else "up to date: ")
        + ", ".join(str(p) for p in (stale or [d.relative_to(ROOT) for d in DOCS]))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
