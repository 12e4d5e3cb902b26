"""`copier update` keeps every user edit, stops before changing anything when an answer change would lose some,
and says so, with exit status 1, when it leaves conflicts. Each test runs copier's CLI on a template repository made
in a temporary folder, with two tagged releases: v0.1.0 (an older state) and v0.2.0 (the working tree under test).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernels._rust import Build

from .conftest import ROOT, cuda_home, render, run

LAYOUT_MOVE_BASE = "77246b3"  # main before the CUDA sources moved to kernel_src/


def git(*args, cwd):
    return run("git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args, cwd=cwd)


def copier(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "copier", *map(str, args)], cwd=cwd, capture_output=True, text=True)


def last_line(result) -> str:
    return (result.stderr.strip().splitlines() or [""])[-1]


def make_template(tmp_path: Path, old: str | None = None, edit_old=None) -> Path:
    """A template repository: v0.1.0 = `old` (a commit of this repository) or the working tree changed by
    `edit_old(template_dir)`; v0.2.0 = the working tree."""
    template = tmp_path / "template-repo"
    ignore = shutil.ignore_patterns(".git", ".nox", "__pycache__", ".venv")
    git("init", "-q", str(template), cwd=tmp_path)
    if old:
        archive = subprocess.run(["git", "-C", ROOT, "archive", old], capture_output=True, check=False)
        if archive.returncode:
            pytest.fail(f"commit {old} is not in this clone (CI needs the full history): {archive.stderr.decode()}")
        subprocess.run(["tar", "-x", "-C", template], input=archive.stdout, check=True)
    else:
        shutil.copytree(ROOT, template, ignore=ignore, dirs_exist_ok=True)
        edit_old(template)
    git("add", "-A", cwd=template)
    git("commit", "-qm", "old", cwd=template)
    git("tag", "v0.1.0", cwd=template)
    for path in template.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.copytree(ROOT, template, ignore=ignore, dirs_exist_ok=True)
    git("add", "-A", cwd=template)
    git("commit", "-qm", "new", cwd=template)
    git("tag", "v0.2.0", cwd=template)
    return template


def generate(template: Path, project: Path, *data: str) -> Path:
    result = copier("copy", "--trust", "--defaults", "-r", "v0.1.0", *data, template, project)
    assert result.returncode == 0, result.stderr
    return project


def commit_all(project: Path, message: str = "user edits") -> None:
    git("add", "-A", cwd=project)
    git("commit", "-qm", message, cwd=project)


def update(project: Path, *data: str):
    return copier("update", "--trust", "--defaults", "-r", "v0.2.0", *data, cwd=project)


def unresolved(project: Path) -> list[str]:
    unmerged = run("git", "ls-files", "-u", cwd=project).stdout.split()
    marked = [
        str(p.relative_to(project))
        for p in project.rglob("*")
        if p.is_file() and ".git" not in p.parts and "<<<<<<< " in p.read_text(errors="replace")
    ]
    return unmerged + marked + [str(p) for p in project.rglob("*.rej")]


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_update_from_older_release_keeps_user_edits(tmp_path):
    def older_wording(template):
        readme = template / "template" / "README.md.jinja"
        readme.write_text(readme.read_text().replace("# {{ name }}", "# {{ name }} (old heading)", 1))

    project = generate(make_template(tmp_path, edit_old=older_wording), tmp_path / "project")
    assert "(old heading)" in (project / "README.md").read_text()
    append(project / "tests" / "test_rms_norm.py", "\n\n# user note: keep me\n")
    (project / "NOTES.md").write_text("my notes\n")
    commit_all(project)

    result = update(project)
    assert result.returncode == 0, result.stderr
    assert unresolved(project) == []
    assert "(old heading)" not in (project / "README.md").read_text()
    assert "# user note: keep me" in (project / "tests" / "test_rms_norm.py").read_text()
    assert (project / "NOTES.md").read_text() == "my notes\n"
    assert "_commit: v0.2.0" in (project / ".copier-answers.yml").read_text()


OWN_KERNEL = """\
// The user's own kernel, added by hand next to the template's.
#include <cuda_runtime.h>

__global__ void user_scale_kernel(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
"""


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """A project generated before the layout move, edited by its user, then updated to the working tree."""
    tmp_path = tmp_path_factory.mktemp("layout-move")
    template = make_template(tmp_path, old=LAYOUT_MOVE_BASE)
    project = generate(template, tmp_path / "project")
    edits = {
        "kernel_src/rms_norm.cu": ("my_kernel_cuda/rms_norm.cu", "\n// user: tuned for my model\n"),
        # A module whose end the template has not changed since then: an edit appended right after lines an update
        # changes comes back in conflict markers, as any three-way merge gives (docs/updating.md: the op modules lost
        # their Python autograd at the end, layers.py's last class changed for mixed precision)
        "torch-ext/my_kernel/_common.py": (
            "torch-ext/my_kernel/_common.py",
            "\n\ndef user_helper():\n    return 1\n",
        ),
        "tests/test_rms_norm.py": ("tests/test_rms_norm.py", "\n\ndef test_user_case():\n    assert True\n"),
    }
    for old, text in edits.values():
        append(project / old, text)
    (project / "my_kernel_cuda" / "user_scale.cu").write_text(OWN_KERNEL)
    section = '\n[kernel.user_scale]\nbackend = "cuda"\ndepends = []\nsrc = ["my_kernel_cuda/user_scale.cu"]\n'
    append(project / "build.toml", section)
    (project / "NOTES.md").write_text("my notes\n")
    commit_all(project)
    result = update(project)
    return project, result, {new: text for new, (_, text) in edits.items()}


def test_layout_move_keeps_every_edit(moved):
    project, result, edits = moved
    assert result.returncode == 0, result.stdout + result.stderr
    assert unresolved(project) == []
    assert not (project / "my_kernel_cuda").exists()
    for path, text in edits.items():
        assert (project / path).read_text().endswith(text), path
    assert (project / "kernel_src" / "user_scale.cu").read_text() == OWN_KERNEL
    assert (project / "NOTES.md").read_text() == "my notes\n"
    build = (project / "build.toml").read_text()
    assert 'src = ["kernel_src/user_scale.cu"]' in build and "my_kernel_cuda" not in build
    Build.open(str(project))


def test_layout_move_differs_from_a_fresh_render_by_the_user_changes_only(moved, tmp_path):
    project, _, edits = moved
    fresh = render(tmp_path / "fresh")
    ours = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    theirs = {str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert ours - theirs == {"kernel_src/user_scale.cu", "NOTES.md"}
    assert theirs - ours == set()
    for path in sorted(ours & theirs - {".copier-answers.yml", "build.toml"}):
        mine, new = (project / path).read_text(), (fresh / path).read_text()
        assert mine == new + edits.get(path, ""), path
    section = '[kernel.user_scale]\nbackend = "cuda"\ndepends = []\nsrc = ["kernel_src/user_scale.cu"]\n'
    assert (project / "build.toml").read_text() == (fresh / "build.toml").read_text().rstrip("\n") + "\n\n" + section


def test_layout_move_builds(moved):
    project, _, _ = moved
    env = {"CUDA_HOME": str(cuda_home()), "MAX_JOBS": "2", "CUDA_CAPABILITIES": "9.0"}
    run(sys.executable, "setup.py", "build_ext", cwd=project, env=env)
    assert list((project / "torch-ext" / "my_kernel").glob("_my_kernel_cuda_*.so"))


@pytest.fixture
def current(tmp_path):
    """A project of the working tree's release v0.1.0 (identical to v0.2.0 but for a README line), committed."""

    def older_wording(template):
        readme = template / "template" / "README.md.jinja"
        readme.write_text(readme.read_text().replace("# {{ name }}", "# {{ name }} (old heading)", 1))

    return generate(make_template(tmp_path, edit_old=older_wording), tmp_path / "project")


def test_user_kernel_sections_survive_adding_a_template_op(current):
    section = '[kernel.myop]\nbackend = "cuda"\ndepends = ["torch"]\nsrc = ["kernel_src/myop.cu"]\n'
    append(current / "build.toml", "\n" + section)
    commit_all(current)
    result = update(current, "-d", "ops=[rmsnorm, adaln]")
    assert result.returncode == 0, result.stderr
    assert unresolved(current) == []
    build = (current / "build.toml").read_text()
    assert "[kernel.adaln]" in build and build.endswith(section)
    Build.open(str(current))


def test_renaming_stops_before_changing_anything(current):
    append(current / "torch-ext" / "my_kernel" / "rms_norm.py", "\n# user edit\n")
    commit_all(current)
    result = update(current, "-d", "name=renamed-kernel")
    assert result.returncode == 1
    assert "name can't change in an update" in last_line(result)
    assert run("git", "status", "--porcelain", cwd=current).stdout == ""


def test_dropping_an_op_stops_before_deleting_its_files(current):
    append(current / "kernel_src" / "rms_norm.cu", "\n// user edit\n")
    commit_all(current)
    result = update(current, "-d", "ops=[geglu]")
    assert result.returncode == 1
    assert "dropping rmsnorm would delete kernel_src/rms_norm.cu" in last_line(result)
    assert run("git", "status", "--porcelain", cwd=current).stdout == ""
    assert (current / "kernel_src" / "rms_norm.cu").read_text().endswith("// user edit\n")


def test_conflicts_fail_the_update_and_are_named_last(current):
    readme = current / "README.md"
    readme.write_text(readme.read_text().replace("(old heading)", "(my own heading)", 1))
    commit_all(current)
    result = update(current)
    assert result.returncode == 1, result.stderr
    assert "copier update left conflicts in 1 file(s): README.md" in last_line(result)
    assert unresolved(current)


def test_renaming_after_moving_the_package_keeps_the_edits(current):
    append(current / "torch-ext" / "my_kernel" / "rms_norm.py", "\n# user edit\n")
    commit_all(current)
    git("mv", "torch-ext/my_kernel", "torch-ext/renamed_kernel", cwd=current)
    commit_all(current, "rename the package")
    result = update(current, "-d", "name=renamed-kernel")
    assert 'name = "renamed-kernel"' in (current / "build.toml").read_text()
    assert not (current / "torch-ext" / "my_kernel").exists()
    assert "# user edit" in (current / "torch-ext" / "renamed_kernel" / "rms_norm.py").read_text()
    if result.returncode:  # the edited files come back with markers, named on the last line
        assert "torch-ext/renamed_kernel/rms_norm.py" in last_line(result)


def test_version_changes_everywhere_with_one_answer(current, tmp_path):
    """`copier update -d version=2` is the one documented way to bump the version: afterwards the project is what a
    fresh render with version 2 gives, file for file."""
    result = update(current, "-d", "version=2")
    assert result.returncode == 0, result.stderr
    fresh = render(tmp_path / "fresh", version=2)
    files = [p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert any("version=2" in (fresh / f).read_text() or "version = 2" in (fresh / f).read_text() for f in files)
    for file in files:
        if file.name != ".copier-answers.yml":
            assert (current / file).read_text() == (fresh / file).read_text(), file


def test_scaffolded_op_survives_an_update_that_adds_a_template_op(current):
    """An op made with tools/new_op.py lives in the marked places: adding a template op writes above them."""
    scaffold = run(sys.executable, "tools/new_op.py", "swiglu", cwd=current)
    commit_all(current, "add swiglu")
    before = {path: (current / path).read_text() for path in ["kernel_src/swiglu.cu", "tests/test_swiglu.py"]}
    result = update(current, "-d", "ops=[rmsnorm, adaln]")
    assert result.returncode == 0, scaffold.stdout + result.stdout + result.stderr
    assert unresolved(current) == []
    assert all((current / path).read_text() == text for path, text in before.items())
    binding = (current / "torch-ext" / "torch_binding.cpp").read_text()
    assert "register_adaln(ops);" in binding and binding.index("register_adaln(ops);") < binding.index(
        "register_swiglu(ops);"
    )
    build = (current / "build.toml").read_text()
    assert "[kernel.adaln]" in build and "[kernel.swiglu]" in build and '"torch-ext/swiglu.cpp"' in build
    assert "from .swiglu import swiglu" in (current / "torch-ext" / "my_kernel" / "__init__.py").read_text()
    Build.open(str(current))
