"""After `copier update`: find what the update left unresolved and make it impossible to miss.

Copier exits 0 after an update that leaves conflicts: files marked unmerged in the index (inline markers), `.rej`
files (`--conflict rej`), or markers written by this template's own migrations. This script lists them on stderr
and writes them to REPORT, a git-ignored file of the project; the next migration task in copier.yml reads that
file and fails the update with a last line that names the files (copier prints a failed task's command last).
"""

import json
import subprocess
import sys
from pathlib import Path

REPORT = Path(".copier-update-report.yml")
MARKER = b"<<<<<<< "


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def unresolved() -> list[str]:
    """Files of this project (paths relative to it) with unresolved conflicts."""
    prefix = git("rev-parse", "--show-prefix").strip()  # the project's folder inside its repository, or ""
    top = Path(git("rev-parse", "--show-toplevel").strip())
    unmerged = git("diff", "--name-only", "--diff-filter=U", "--relative").split()
    # Porcelain paths are relative to the repository's top, whatever the current folder. "??" untracked, "!!" ignored.
    status = [
        (line[:2], line[3:].removeprefix(prefix))
        for line in git("status", "--porcelain", "--ignored", "-uall", ".").splitlines()
    ]
    untracked = [path for code, path in status if code == "??"]
    rejects = [path for _, path in status if path.endswith(".rej")]
    changed = git("diff", "--name-only", "--relative").split() + untracked
    marked = [
        path
        for path in changed
        if (top / prefix / path).is_file()
        and any(line.startswith(MARKER) for line in (top / prefix / path).read_bytes().splitlines())
    ]
    return sorted(set(unmerged + rejects + marked))


def main() -> int:
    files = unresolved()
    if files:
        print("copier update left conflicts in:", *files, sep="\n  ", file=sys.stderr)
        message = (
            f"copier update left conflicts in {len(files)} file(s): {', '.join(files)}. Resolve the <<<<<<< markers "
            "(and any .rej file), then git add the files"
        )
    else:
        message = ""
    # JSON is YAML: one line, any file name quoted safely.
    REPORT.write_text(json.dumps({"conflicts": files, "message": message}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
