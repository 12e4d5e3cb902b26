"""`copier update` from an older tagged version of the template to the current one keeps the user's edits and
leaves no conflicts."""

from __future__ import annotations

import shutil
import sys

from .conftest import ROOT, run


def git(*args, cwd):
    return run("git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args, cwd=cwd)


def test_update_from_older_tag_keeps_user_edits(tmp_path):
    # A template repository with two releases: v0.1.0 (older wording, no GEGLU offered yet) and v0.2.0 (= the
    # working tree under test).
    template = tmp_path / "template"
    shutil.copytree(
        ROOT,
        template,
        ignore=shutil.ignore_patterns(".git", ".nox", "__pycache__", ".venv"),
    )
    git("init", "-q", cwd=template)
    readme = template / "template" / "README.md.jinja"
    current_readme = readme.read_text()
    readme.write_text(current_readme.replace("# {{ name }}", "# {{ name }} (old heading)", 1))
    git("add", "-A", cwd=template)
    git("commit", "-qm", "old", cwd=template)
    git("tag", "v0.1.0", cwd=template)
    readme.write_text(current_readme)
    git("commit", "-qam", "new", cwd=template)
    git("tag", "v0.2.0", cwd=template)

    project = tmp_path / "project"
    run(
        sys.executable,
        "-m",
        "copier",
        "copy",
        "--trust",
        "--defaults",
        "-r",
        "v0.1.0",
        template,
        project,
    )
    assert "(old heading)" in (project / "README.md").read_text()

    # The user edits a generated file and adds one of their own.
    test_file = project / "tests" / "test_rms_norm.py"
    test_file.write_text(test_file.read_text() + "\n\n# user note: keep me\n")
    (project / "NOTES.md").write_text("my notes\n")
    git("add", "-A", cwd=project)
    git("commit", "-qm", "user edits", cwd=project)

    run(
        sys.executable,
        "-m",
        "copier",
        "update",
        "--trust",
        "--defaults",
        "-r",
        "v0.2.0",
        cwd=project,
    )

    assert run("git", "ls-files", "-u", cwd=project).stdout == "", "copier update left conflicts"
    assert not list(project.rglob("*.rej"))
    assert "(old heading)" not in (project / "README.md").read_text()
    assert "# user note: keep me" in test_file.read_text()
    assert (project / "NOTES.md").read_text() == "my notes\n"
    assert "_commit: v0.2.0" in (project / ".copier-answers.yml").read_text()
