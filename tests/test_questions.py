"""copier.yml: defaults, the non-interactive contract, and one clear error per bad answer with nothing written."""

from __future__ import annotations

import yaml

from .conftest import ROOT, copier_cli, render

EXAMPLE_ANSWERS = ROOT / "docs" / "example-answers.yml"


def copy_non_interactive(*args):
    """`copier copy` as agents run it: trusted, defaults for whatever is not given, from this working tree."""
    return copier_cli("copy", "--trust", "--defaults", "--vcs-ref", "HEAD", *args)


def test_defaults_render(tmp_path):
    project = render(tmp_path / "p")
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["name"] == "my-kernel" and answers["ops"] == ["rmsnorm"]
    assert answers["gpus"] == ["h100", "h200"] and answers["precisions"] == ["bf16"] and answers["version"] == 1
    assert "python_name" not in answers and "capabilities" not in answers  # derived values are not recorded


def test_cli_with_data_and_data_file(tmp_path):
    result = copy_non_interactive(
        "--data-file",
        EXAMPLE_ANSWERS,
        "--data",
        "name=from-cli",
        ROOT,
        tmp_path / "p",
    )
    assert result.returncode == 0, result.stderr
    answers = yaml.safe_load((tmp_path / "p" / ".copier-answers.yml").read_text())
    expected = yaml.safe_load(EXAMPLE_ANSWERS.read_text())
    assert answers["name"] == "from-cli"  # --data wins over --data-file
    for key in ("ops", "gpus", "precisions", "repo_id", "version", "license"):
        assert answers[key] == expected[key], key


BAD_ANSWERS = {
    "bad name": (["name=My_Kernel"], "name must match"),
    "name ending in a dash": (["name=kernel-"], "name must match"),
    "unknown op": (["ops=[conv]"], "Invalid choice for 'ops'"),
    "unknown GPU": (["gpus=[v100]"], "Invalid choice for 'gpus'"),
    "empty ops": (["ops=[]"], "choose at least one op"),
    "empty GPUs": (["gpus=[]"], "choose at least one GPU"),
    "empty precisions": (["precisions=[]"], "choose at least one precision"),
    "unknown precision": (["precisions=[fp8]"], "Invalid choice for 'precisions'"),
    "unknown key": (["gpu=h100"], "unknown answer key(s) gpu"),
    "negative version": (["version=-1"], "version must be a non-negative integer"),
    "version not an integer": (["version=one"], "invalid literal for int()"),
    "repo id without org": (["repo_id=kernel"], "repo_id must look like org/name"),
    "bad license": (["license=Apache 2.0"], "license must be an SPDX id"),
}


def test_bad_answers_fail_with_one_line_and_write_nothing(tmp_path):
    for case, (data, message) in BAD_ANSWERS.items():
        dst = tmp_path / case.replace(" ", "-")
        args = [arg for d in data for arg in ("--data", d)]
        result = copy_non_interactive(*args, ROOT, dst)
        assert result.returncode != 0, case
        last = result.stderr.strip().splitlines()[-1]
        assert message in last, f"{case}: the last line should say what is wrong, got {last!r}"
        assert not dst.exists(), f"{case}: {dst} was written"


def test_unknown_key_in_data_file_is_rejected(tmp_path):
    answers = yaml.safe_load(EXAMPLE_ANSWERS.read_text()) | {"precision": ["fp16"]}  # typo of `precisions`
    (tmp_path / "answers.yml").write_text(yaml.safe_dump(answers))
    result = copy_non_interactive(
        "--data-file",
        tmp_path / "answers.yml",
        ROOT,
        tmp_path / "p",
    )
    assert result.returncode != 0
    assert "unknown answer key(s) precision" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "p").exists()


def test_non_interactive_without_defaults_says_how(tmp_path):
    result = copier_cli("copy", "--trust", "--vcs-ref", "HEAD", ROOT, tmp_path / "p")
    assert result.returncode != 0
    assert "--defaults" in result.stderr
