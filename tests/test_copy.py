"""`copier copy` never half-writes a project: a destination that holds files is refused before anything is written
(unless --overwrite), a destination inside a git work tree gets no nested repository, and the first commit carries
the user's git identity when one is configured."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import ROOT, run


def copy(dst, *args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "-r", "HEAD", *args, str(ROOT), str(dst)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_destination_with_files_is_refused_before_writing(tmp_path):
    dst = tmp_path / "k"
    dst.mkdir()
    (dst / "README.md").write_text("mine\n")
    result = copy(dst)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "already holds files" in last and "--overwrite" in last, last
    assert files(dst) == ["README.md"] and (dst / "README.md").read_text() == "mine\n"
    assert copy(dst, "--overwrite").returncode == 0
    assert (dst / "build.toml").is_file()


def test_destination_inside_a_work_tree_gets_no_nested_repository(tmp_path):
    mono = tmp_path / "mono"
    run("git", "init", "-q", mono)
    dst = mono / "kernels" / "k1"
    result = copy(dst)
    assert result.returncode == 0, result.stderr
    assert not (dst / ".git").exists()
    assert "git add kernels/k1" in result.stdout
    assert run("git", "status", "--porcelain", cwd=mono).stdout.strip() == "?? kernels/"  # nothing staged for them


def test_first_commit_uses_the_users_identity(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    dst = tmp_path / "k"
    result = copy(dst, env={"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
    assert result.returncode == 0, result.stderr
    author = run("git", "log", "-1", "--format=%an <%ae>", cwd=dst).stdout.strip()
    assert author == "Ada Lovelace <ada@example.org>"


def test_first_commit_without_an_identity_uses_the_templates(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1"}
    dst = tmp_path / "k"
    result = copy(dst, env=env)
    assert result.returncode == 0, result.stderr
    assert run("git", "log", "-1", "--format=%an", cwd=dst).stdout.strip() == "cuda-kernel-template"
