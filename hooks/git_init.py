"""Make a freshly generated project a git repository with every file tracked.

kernel-builder's Nix flakes only see tracked files and derive the op namespace from the git tree, so a new
project starts as a repository with one commit, as `kernel-builder init` leaves it. The commit is made with the
user's git identity when one is configured. A project generated inside an existing work tree (a monorepo) gets no
repository of its own: this script says which folder to `git add` there.
Run by copier in the new project's folder, on `copier copy` only.
"""

import subprocess
import sys
from pathlib import Path


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], check=check, capture_output=True, text=True)


def main() -> int:
    top = git("rev-parse", "--show-toplevel", check=False)
    if top.returncode == 0:  # inside an existing work tree: never nest a repository in it
        folder = Path.cwd().resolve().relative_to(Path(top.stdout.strip()).resolve())
        print(
            f"note: {Path.cwd()} is inside the git repository {top.stdout.strip()}, so no repository was made; "
            f"track the project there with `git add {folder.as_posix() or '.'}` (Nix flakes see only tracked files)"
        )
        return 0
    git("init", "--quiet")
    git("add", "-A")
    identity = []
    if not (
        git("config", "user.name", check=False).stdout.strip()
        and git("config", "user.email", check=False).stdout.strip()
    ):
        identity = ["-c", "user.name=cuda-kernel-template", "-c", "user.email=cuda-kernel-template@localhost"]
    git(*identity, "commit", "--quiet", "--no-verify", "-m", "Generated with cuda-kernel-template")
    return 0


if __name__ == "__main__":
    sys.exit(main())
