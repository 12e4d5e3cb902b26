"""Make a freshly generated project a git repository with every file tracked.

kernel-builder's Nix flakes only see tracked files and derive the op namespace from the git tree, so a new
project starts as a repository with one commit, as `kernel-builder init` leaves it (it stages the files).
Run by copier in the new project's folder, on `copier copy` only.
"""

import subprocess
import sys
from pathlib import Path


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    if (Path.cwd() / ".git").exists():  # copied into an existing repository: stage, never commit for the user
        git("add", "-A")
        return 0
    git("init", "--quiet")
    git("add", "-A")
    identity = [
        "-c",
        "user.name=cuda-kernel-template",
        "-c",
        "user.email=cuda-kernel-template@localhost",
    ]
    git(
        *identity,
        "commit",
        "--quiet",
        "--no-verify",
        "-m",
        "Generated with cuda-kernel-template",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
