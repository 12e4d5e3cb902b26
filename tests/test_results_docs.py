"""The benchmark figures of README.md and docs/benchmarks.md come from committed results files in docs/results/:
the tables between `<!-- results NAME: FILES -->` markers are what docs/results/summarize.py writes from FILES, and
a figure quoted in the prose is in a results file that its section links to."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "docs" / "results" / "summarize.py"
DOCS = ["README.md", "docs/benchmarks.md"]
# A figure: a number with a decimal point that is not part of a version ("2.13.0", "torch 2.11")
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?!\d|\.\d)")
VERSION_BEFORE = re.compile(r"(torch|triton|transformers|diffusers|python|kernels|CUDA|copier|nox)[ =]+$")


def summarize():
    spec = importlib.util.spec_from_file_location("summarize", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tracked(paths: list[Path]) -> set[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *map(str, paths)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {(ROOT / name).resolve() for name in listed}


@pytest.mark.parametrize("doc", DOCS)
def test_tables_are_what_their_results_files_give(doc):
    module = summarize()
    path = ROOT / doc
    text = path.read_text()
    assert module.rewrite(path, text, {}) == text, (
        f"{doc}: a results table is out of date: python {SCRIPT.relative_to(ROOT)}"
    )


@pytest.mark.parametrize("doc", DOCS)
def test_tables_name_committed_results_files(doc):
    module = summarize()
    path = ROOT / doc
    blocks = list(module.MARKER.finditer(path.read_text()))
    assert blocks, f"{doc}: no results table between markers"
    files = [file for block in blocks for file in module.block_files(path, block)]
    assert all(f.is_relative_to(ROOT / "docs" / "results") for f in files), (
        f"{doc}: results files live in docs/results/"
    )
    untracked = sorted(set(files) - tracked(files))
    assert not untracked, f"{doc}: tables come from results files that are not committed: {untracked}"


def test_the_headline_and_the_summary_tables_are_generated():
    names = {doc: {m["name"] for m in summarize().MARKER.finditer((ROOT / doc).read_text())} for doc in DOCS}
    assert "e2e-headline" in names["README.md"]
    assert {"summary", "precisions", "e2e-table", "e2e-ranges", "every-shape", "runs"} <= names["docs/benchmarks.md"]


def figures_outside_tables(doc: str) -> list[tuple[str, list[Path], list[str]]]:
    """(heading, results files it links to, figures) of each section of a document, the generated tables left out."""
    path = ROOT / doc
    text = summarize().MARKER.sub("", path.read_text())
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # commands
    found = []
    for section in re.split(r"\n(?=#)", text):
        links = re.findall(r"\]\(((?:docs/)?results/[^)#\s]+)\)", section)
        files = []
        for link in links:
            target = (path.parent / link).resolve()
            files += sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
        figures = [m[0] for m in FIGURE.finditer(section) if not VERSION_BEFORE.search(section[: m.start()])]
        found.append((section.split("\n", 1)[0], files, figures))
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_quoted_figures_are_in_the_results_files_their_section_links_to(doc):
    problems = []
    for heading, files, figures in figures_outside_tables(doc):
        texts = [f.read_text(errors="replace") for f in files if f.is_file()]
        for figure in dict.fromkeys(figures):
            pattern = re.compile(rf"(?<![\d.]){re.escape(figure)}(?!\d)")
            if not any(pattern.search(t) for t in texts):
                problems.append(f"{heading[:60]!r}: {figure}")
    assert not problems, f"{doc}: figures in no results file their section links to: " + "; ".join(problems)


def test_the_check_catches_a_changed_figure(tmp_path):
    """A figure edited by hand in a table, or quoted in prose without a source, fails the checks above."""
    module = summarize()
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    block = next(m for m in module.MARKER.finditer(text) if m["name"] == "e2e-table")
    edited = text.replace(block["body"], block["body"].replace("| 1.38× |", "| 1.39× |"))
    assert edited != text
    assert module.rewrite(doc, edited, {}) == text
    assert FIGURE.findall("Qwen3 1.21× faster, torch 2.11.0, 2.13.0") == ["1.21"]
    assert VERSION_BEFORE.search("on the H200 (torch ")


def test_every_shape_merges_a_table_that_several_runs_have(tmp_path):
    """Runs split by --ops each write a host-time table: the every-shape block keeps the rows of all of them (a row
    in two files from the later one), not only the last file's table."""
    module = summarize()
    head = "| op | variant | case | dtype | mode | impl | host µs | note |\n|---|---|---|---|---|---|---|---|\n"

    def results(name: str, rows: list[str]) -> object:
        path = tmp_path / name
        path.write_text(
            "# x: micro benchmarks\n\n- date: d\n\n## host time per call\n\n" + head + "\n".join(rows) + "\n"
        )
        return module.Results(path)

    first = results(
        "a.md",
        [
            "| rope3d | one | c | bf16 | forward | **ours** | **19.2** |  |",
            "| geglu | erf | c | bf16 | forward | eager | 9.9 |  |",
        ],
    )
    second = results(
        "b.md",
        [
            "| rmsnorm | weight | c | bf16 | forward | **ours** | **13.6** |  |",
            "| geglu | erf | c | bf16 | forward | eager | 8.8 |  |",
        ],
    )
    block = module.every_shape([first, second], tmp_path / "doc.md")
    table = [line for line in block.splitlines() if line.startswith("| ") and "op |" not in line]
    assert [cells.split(" | ")[0] for cells in table] == ["| rope3d", "| geglu", "| rmsnorm"]
    assert "8.8" in block and "9.9" not in block and block.count("## host time per call") == 1
