"""The docs say what copier.yml does: every question, its default and its values are documented."""

from __future__ import annotations

import re

import yaml

from .conftest import ROOT


def questions() -> dict:
    config = {}
    for document in yaml.safe_load_all((ROOT / "copier.yml").read_text().replace("!include", "# include")):
        config.update(document or {})
    return {key: q for key, q in config.items() if not key.startswith("_") and q.get("when") is not False}


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
