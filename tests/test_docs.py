"""The docs say what copier.yml does: every question, its default and its values are documented."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from .conftest import ALL_OPS, ROOT


def questions() -> dict:
    config = {}
    for document in yaml.safe_load_all((ROOT / "copier.yml").read_text().replace("!include", "# include")):
        config.update(document or {})
    found = {key: q for key, q in config.items() if not key.startswith("_") and q.get("when") is not False}
    found["ops"]["choices"] = {op: op for op in ALL_OPS}  # rendered from ops.yml
    return found


def test_every_question_is_documented_with_its_values():
    table = (ROOT / "docs" / "questions.md").read_text()
    rows = {m[1]: m[0] for m in re.findall(r"^(\| `([a-z_]+)` \|.*)$", table, re.M)}
    assert set(rows) == set(questions()), "docs/questions.md must list exactly the questions of copier.yml"
    for key, question in questions().items():
        for value in (question.get("choices") or {}).values():
            assert f"`{value}`" in rows[key], f"{key}: value {value!r} is not documented"
        default = question["default"]
        shown = f"[{', '.join(default)}]" if isinstance(default, list) else str(default).replace("{{ name }}", "<name>")
        assert f"`{shown}`" in rows[key], f"{key}: default {shown!r} is not documented"


def test_example_answers_use_known_keys_and_values():
    answers = yaml.safe_load((ROOT / "docs" / "example-answers.yml").read_text())
    known = questions()
    assert set(answers) <= set(known)
    for key in ("ops", "gpus", "precisions"):
        assert set(answers[key]) <= set(known[key]["choices"].values())


def bash_blocks(path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)


def as_run_here(command: str) -> str:
    """A documented command, aimed at this checkout (its working tree) instead of the published address."""
    return command.replace("gh:org/cuda-kernel-template", f"-r HEAD {ROOT}").replace("python3 ", f"{sys.executable} ")


@pytest.mark.parametrize("doc", ["README.md", "docs/non-interactive.md"])
def test_generate_commands_work_as_written_from_any_folder(doc, tmp_path):
    commands = [b for b in bash_blocks(ROOT / doc) if "copier copy" in b and "TEMPLATE" not in b]
    assert commands, f"{doc} shows no copier copy command"
    for i, block in enumerate(commands):
        folder = tmp_path / str(i)
        folder.mkdir()
        script = as_run_here(block)
        if "--defaults" not in script:  # the interactive command: answered by its defaults here
            script = script.replace("copier copy --trust", "copier copy --trust --defaults")
        result = subprocess.run(["bash", "-c", script], cwd=folder, capture_output=True, text=True, stdin=None)
        assert result.returncode == 0, f"{doc}: {block}\n{result.stderr[-2000:]}"
        assert len(list(folder.glob("*/build.toml"))) == 1, f"{doc}: {block} made no project"


def test_exit_code_table_examples(tmp_path):
    """Each exit status of docs/non-interactive.md, with the example message it shows."""
    table = (ROOT / "docs" / "non-interactive.md").read_text().split("## Exit codes", 1)[1]
    rows = dict(re.findall(r"^\| (\d) \|[^|]*\| `?([^|`]*)`? ", table, re.M))
    assert set(rows) == {"0", "1", "2", "4"}
    runs = {
        "1": ["--trust", "--defaults", "-d", "ops=rmsnorm"],
        "2": ["--trust", "--defaults", "--bogus"],
        "4": ["--defaults"],
    }
    for code, args in runs.items():
        result = subprocess.run(
            [sys.executable, "-m", "copier", "copy", *args, "-r", "HEAD", str(ROOT), str(tmp_path / code)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == int(code), (code, result.stderr[-2000:])
        lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        shown = rows[code].strip()
        assert any(shown in line for line in lines), (code, shown, lines[-5:])
        assert not (tmp_path / code).exists(), f"exit {code} wrote {tmp_path / code}"
