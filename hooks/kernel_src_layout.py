"""Carry a project made before the layout move (CUDA sources in `<package>_cuda/`) to `kernel_src/`, edits included.

Copier cannot follow a renamed folder: it would delete `<package>_cuda/` with the user's edits in it. So, as a
migration around `copier update`:

- `before` (in the project, before copier compares it with the old template): for each tracked file of
  `<package>_cuda/` that came from the template, keep the user's version and the template's original (from the
  template's git history, at the project's recorded commit) under the git directory, and put the original back in
  place, so that copier sees no edit there and removes the folder cleanly. `[kernel.*]` sections the user added to
  build.toml are taken out the same way (the new build.toml has a marked place for them).
- `after` (once copier is done): each edited file is merged three ways into its `kernel_src/` counterpart (the
  user's version, the original, the new template's file); conflicts get the usual markers, and the update report
  names them. A file with no counterpart (common.cuh was split) is kept as the user left it, in kernel_src/. Files
  of the user's own in the old folder move to kernel_src/; the saved build.toml sections return below the marked
  place, with their paths moved too. Nothing is staged or committed.

Does nothing for projects already on the new layout.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).resolve().parents[1]  # copier's clone of the template, with its history
NEW_DIR = Path("kernel_src")
TEMPLATE_STEMS = {"rms_norm", "rope3d", "geglu", "adaln"}  # [kernel.*] sections the old template wrote
HELPERS = ["dispatch.cuh", "vec.cuh", "reduce.cuh", "launch.cuh"]


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True)


def state_dir() -> Path:
    return Path(git("rev-parse", "--git-path", "copier-kernel-src").stdout.decode().strip()).resolve()


def answers() -> dict:
    return yaml.safe_load(Path(".copier-answers.yml").read_text())


def split_sections(text: str) -> list[str]:
    """build.toml as a list of chunks, each starting at a [header] line (the first chunk may have none)."""
    return re.split(r"(?m)^(?=\[)", text)


def user_sections(text: str) -> tuple[str, list[str]]:
    """build.toml without the [kernel.*] sections the template never writes, and those sections."""
    kept, theirs = [], []
    for chunk in split_sections(text):
        match = re.match(r"\[kernel\.([^\]]+)\]", chunk)
        (theirs if match and match[1] not in TEMPLATE_STEMS else kept).append(chunk)
    return "".join(kept), theirs


def before(data: dict) -> int:
    recorded = answers()
    old_dir = Path(recorded["name"].replace("-", "_") + "_cuda")
    tracked = git("ls-files", "-z", "--", old_dir.as_posix()).stdout.decode().split("\0")
    tracked = [Path(p) for p in tracked if p]
    if not tracked or NEW_DIR.exists():
        return 0
    for key in ("name", "ops"):
        if key in data and yaml.safe_load(str(data[key])) != recorded.get(key):
            sys.exit(
                f"error: this update moves {old_dir}/ to kernel_src/; run it once without changing `{key}`, "
                "commit, then change the answer in a second update"
            )
    commit = recorded["_commit"]
    state = state_dir()
    shutil.rmtree(state, ignore_errors=True)
    (state / "ours").mkdir(parents=True)
    (state / "base").mkdir()
    manifest = {"old_dir": old_dir.as_posix(), "files": {}, "sections": []}
    for path in tracked:
        name = path.relative_to(old_dir).as_posix()
        ours = path.read_bytes()
        original = git("show", f"{commit}:template/{{{{ python_name }}}}_cuda/{name}", cwd=TEMPLATE, check=False)
        if original.returncode != 0:  # rendered (config.h) or the user's own file: handled after the update
            manifest["files"][name] = "own" if not name == "config.h" else "generated"
            continue
        base = original.stdout
        manifest["files"][name] = "edited" if ours != base else "unchanged"
        if ours != base:
            (state / "ours" / name).parent.mkdir(parents=True, exist_ok=True)
            (state / "base" / name).parent.mkdir(parents=True, exist_ok=True)
            (state / "ours" / name).write_bytes(ours)
            (state / "base" / name).write_bytes(base)
            path.write_bytes(base)
            git("add", "--", path.as_posix())
    build = Path("build.toml")
    text, sections = user_sections(build.read_text())
    if sections:
        manifest["sections"] = sections
        build.write_text(text.rstrip("\n") + "\n")
        git("add", "--", "build.toml")
    (state / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


def after() -> int:
    state = state_dir()
    if not (state / "manifest.json").exists():
        return 0
    manifest = json.loads((state / "manifest.json").read_text())
    old_dir = Path(manifest["old_dir"])
    notes = []
    for name, kind in manifest["files"].items():
        target = NEW_DIR / name
        if kind == "edited":
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                merged = subprocess.run(
                    [
                        "git",
                        "merge-file",
                        "-p",
                        "-L",
                        "your edits",
                        "-L",
                        "old template",
                        "-L",
                        "new template",
                        state / "ours" / name,
                        state / "base" / name,
                        target,
                    ],
                    capture_output=True,
                )
                target.write_bytes(merged.stdout)
                notes.append(f"{target}: your edits merged" + (" (with conflicts)" if merged.returncode else ""))
            else:
                target.write_bytes((state / "ours" / name).read_bytes())
                notes.append(f"{target}: your edited {old_dir / name}, kept as it was (the template no longer has it)")
        elif kind == "own" and (old_dir / name).exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(old_dir / name, target)
            notes.append(f"{target}: moved from {old_dir / name}")
    # The user's own sources may include the old all-in-one header: give them one that includes its successors.
    common = NEW_DIR / "common.cuh"
    if not common.exists() and any(
        b'"common.cuh"' in path.read_bytes() for path in NEW_DIR.rglob("*") if path.is_file()
    ):
        common.write_text(
            "// Written when this project moved to kernel_src/: your sources include common.cuh, which the template\n"
            "// split by concern. Include the headers you need instead, then delete this file.\n#pragma once\n"
            + "".join(f'#include "{h}"\n' for h in HELPERS)
        )
        notes.append(f"{common}: includes {', '.join(HELPERS)} for your sources that include common.cuh")
    if manifest["sections"]:
        build = Path("build.toml")
        moved = [s.replace(f'"{old_dir.as_posix()}/', '"kernel_src/').rstrip("\n") + "\n" for s in manifest["sections"]]
        build.write_text(build.read_text().rstrip("\n") + "\n\n" + "\n".join(moved))
        notes.append("build.toml: your [kernel.*] sections are back, below the marked place, paths in kernel_src/")
    if old_dir.exists() and not any(p.is_file() for p in old_dir.rglob("*")):
        shutil.rmtree(old_dir)
    # Unstage what `before` staged; files with conflicts recorded by copier keep their index entries.
    unmerged = set(git("diff", "--name-only", "--diff-filter=U", "--relative").stdout.decode().split())
    restage = [p for p in ["build.toml", old_dir.as_posix()] if p not in unmerged]
    git("reset", "-q", "--", *restage, check=False)
    shutil.rmtree(state, ignore_errors=True)
    print(f"Moved {old_dir}/ to kernel_src/ (docs/updating.md):", *notes, sep="\n  ", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(before(json.loads(sys.argv[2])) if sys.argv[1] == "before" else after())
