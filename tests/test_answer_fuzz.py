"""Answer fuzzing: hypothesis draws answers to copier.yml's questions.

Every valid draw must render a project whose build.toml kernel-builder's own parser accepts (with one
[kernel.<stem>] section per chosen op and the chosen GPUs' capabilities) and whose Python is ruff clean. Every
draw with one invalid answer must fail through copier's CLI with exit status 1, a last stderr line naming the
question (or the unknown key), and nothing written.

The default profile is bounded for CI (2 cores, well under 90 s) and derandomized, so CI runs the same examples
every time. For a longer, randomized search run locally:

    HYPOTHESIS_PROFILE=long python -m pytest tests/test_answer_fuzz.py

(`long` draws 25 times as many examples; hypothesis prints a `@reproduce_failure` blob for any failure). No
example database is written (`database=None`) and hypothesis' caches go to a temporary folder, so a clean clone
stays clean.

Cases this fuzzing found: a repo_id past ~87 characters rendered doc code blocks that `ruff format` rewraps (hence
copier.yml's 80-character limit, drawn on both sides here), and a trailing newline passed the name, repo_id and
license regexes (`$`) and rendered a build.toml that is not TOML (drawn as invalid here).
"""

from __future__ import annotations

import json
import os
import string
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from kernels._rust import Build

from .conftest import ALL_GPUS, ALL_OPS, ALL_PRECISIONS, GPU_SPECS, ROOT, STEMS, copier_cli, render, run

PROFILES = {"ci": 1, "long": 25}  # profile -> factor on each test's example count
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"HYPOTHESIS_PROFILE must be one of {', '.join(PROFILES)}, got {PROFILE!r}")


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples * PROFILES[PROFILE],
        deadline=None,  # a render takes seconds
        derandomize=PROFILE == "ci",
        database=None,  # no example database (and hypothesis_home below: no .hypothesis/ folder in the checkout)
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


@pytest.fixture(autouse=True, scope="module")
def hypothesis_home(tmp_path_factory):
    """Hypothesis caches (Unicode tables, constants of local modules) under ./.hypothesis/: keep them out of it."""
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)


MULTISELECT = {"ops": ALL_OPS, "gpus": ALL_GPUS, "precisions": ALL_PRECISIONS}
KNOWN_KEYS = ["name", "repo_id", "license", "version", "ops", "gpus", "precisions"]

# --------------------------------------------------------------------------------------------------------
# Valid answers
# --------------------------------------------------------------------------------------------------------


def subsets(choices: list[str]) -> st.SearchStrategy[list[str]]:
    """A non-empty subset in any order (copier records it in the choices' order)."""
    return st.lists(st.sampled_from(choices), min_size=1, unique=True)


# Strings come from explicit alphabets (hypothesis shrinks them well and needs no Unicode tables for them).
LOWER, UPPER, DIGITS = string.ascii_lowercase, string.ascii_uppercase, string.digits
ALNUM = LOWER + UPPER + DIGITS


def word(first: str, rest: str, max_rest: int, *, last: str = "", min_rest: int = 0) -> st.SearchStrategy[str]:
    """One character of `first`, `min_rest` to `max_rest` of `rest`, then one of `last` (if given)."""
    middle = st.lists(st.sampled_from(rest), min_size=min_rest, max_size=max_rest).map("".join)
    return st.tuples(st.sampled_from(first), middle, *([st.sampled_from(last)] if last else [])).map("".join)


# ^[a-z][-a-z0-9]*[a-z0-9]$ in 2..60 characters: any, long ones (hypothesis favours short lists), and names
# whose package shadows a well-known module (import sorting must not change).
names = st.one_of(
    word(LOWER, LOWER + DIGITS + "-", 58, last=LOWER + DIGITS),
    word(LOWER, LOWER + DIGITS + "-", 58, last=LOWER + DIGITS, min_rest=40),
    st.sampled_from(["ab", "a0", "a-0", "x--y", "torch", "numpy", "kernels", "pytest", "os", "k" * 60]),
)
# org/name in at most 80 characters (copier.yml: the project shows it on one line, e.g. `kernel =
# get_kernel("<repo_id>", version=<version>)` in Markdown code blocks that `ruff format` checks): any, long ones, and
# the longest.
REPO_ID_MAX = 80
REPO_PART = ALNUM + "-_."
repo_ids = st.one_of(
    st.builds("{}/{}".format, word(ALNUM, REPO_PART, 29), word(ALNUM, REPO_PART, 48)),
    st.builds("{}/{}".format, word(ALNUM, REPO_PART, 29, min_rest=20), word(ALNUM, REPO_PART, 48, min_rest=35)),
    st.just("o" * 30 + "/" + "n" * (REPO_ID_MAX - 31)),
)


SPDX_IDS = [
    "Apache-2.0",
    "MIT",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "0BSD",
    "GPL-2.0-only",
    "GPL-3.0-or-later",
    "LGPL-2.1+",
    "AGPL-3.0-only",
    "MPL-2.0",
    "EPL-2.0",
    "BSL-1.0",
    "ISC",
    "Zlib",
    "Unlicense",
    "CC0-1.0",
    "CC-BY-4.0",
    "Python-2.0",
    "LicenseRef-proprietary",
]
licenses = st.one_of(st.sampled_from(SPDX_IDS), word(ALNUM, ALNUM + "-.+", 40))
versions = st.integers(min_value=0, max_value=1000)


@st.composite
def valid_answers(draw, keys=KNOWN_KEYS) -> dict:
    """All answers (`keys` of them), each drawn valid."""
    strategies = {
        "name": names,
        "repo_id": repo_ids,
        "license": licenses,
        "version": versions,
        **{key: subsets(choices) for key, choices in MULTISELECT.items()},
    }
    return {key: draw(strategies[key]) for key in keys}


def capabilities(gpus: list[str]) -> list[str]:
    return sorted({GPU_SPECS[g]["compute_capability"] for g in gpus}, key=float)


@fuzz_settings(examples=20)
@given(answers=valid_answers())
def test_valid_answers_render_parse_and_lint(answers):
    with tempfile.TemporaryDirectory() as tmp:
        project = render(Path(tmp) / "p", **answers)
        Build.open(str(project))  # kernel-builder's own parser: raises on any schema error
        config = tomllib.loads((project / "build.toml").read_text())
        general = config["general"]
        assert (general["name"], general["version"], general["license"], general["hub"]["repo-id"]) == (
            answers["name"],
            answers["version"],
            answers["license"],
            answers["repo_id"],
        )
        assert list(config["kernel"]) == [STEMS[op] for op in ALL_OPS if op in answers["ops"]]
        for stem, kernel in config["kernel"].items():
            assert kernel["cuda-capabilities"] == capabilities(answers["gpus"]), stem
        recorded = yaml.safe_load((project / ".copier-answers.yml").read_text())
        for key, choices in MULTISELECT.items():
            assert recorded[key] == [c for c in choices if c in answers[key]], key
        for key in ("name", "repo_id", "license", "version"):
            assert recorded[key] == answers[key], key
        run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=project)
        run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", ".", cwd=project)


# --------------------------------------------------------------------------------------------------------
# Invalid answers: one at a time, the others drawn valid, all through the CLI
# --------------------------------------------------------------------------------------------------------


def cli_value(value) -> str:
    """An answer as `--data key=value` takes it: multiselect answers in YAML flow-list syntax."""
    return f"[{', '.join(value)}]" if isinstance(value, list) else str(value)


def insert(draw, text: str, piece: str) -> str:
    at = draw(st.integers(0, len(text)))
    return text[:at] + piece + text[at:]


def insert_item(draw, items: list[str], item: str) -> list[str]:
    at = draw(st.integers(0, len(items)))
    return [*items[:at], item, *items[at:]]


def unknown_choice(key: str) -> st.SearchStrategy[str]:
    near_misses = {
        "ops": ["rms_norm", "RMSNorm", "rope", "gelu", "conv", "layernorm"],
        "gpus": ["H100", "v100", "sm_90", "a10", "rtx4090", "mi300x"],
        "precisions": ["fp8", "BF16", "bfloat16", "float32", "int8", "tf32"],
    }[key]
    fresh = word(LOWER, LOWER + DIGITS + "_", 12)
    return st.one_of(st.sampled_from(near_misses), fresh).filter(lambda v: v not in MULTISELECT[key])


@st.composite
def bad_multiselect(draw, key: str) -> str:
    """A valid subset with an unknown value slipped in."""
    chosen = draw(st.lists(st.sampled_from(MULTISELECT[key]), unique=True))
    bad = draw(unknown_choice(key))
    return cli_value(insert_item(draw, chosen, bad))


@st.composite
def bad_names(draw) -> str:
    name = draw(names)
    how = draw(st.sampled_from(["uppercase", "underscore", "leading digit", "trailing dash", "leading dash"]))
    if how == "uppercase":
        at = draw(st.integers(0, len(name) - 1))
        return name[:at] + draw(st.sampled_from(UPPER)) + name[at + 1 :]
    if how == "underscore":
        return insert(draw, name, "_")
    if how == "leading digit":
        return draw(st.sampled_from(DIGITS)) + name
    if how == "trailing dash":
        return name + "-"
    return "-" + name


@st.composite
def bad_repo_ids(draw) -> str:
    repo_id = draw(repo_ids)
    if draw(st.booleans()):
        return repo_id.replace("/", draw(st.sampled_from(["", "-", "_", "."])))  # no slash
    return insert(draw, repo_id, draw(st.sampled_from([" ", "  "])))  # a space anywhere, ends included


@st.composite
def long_repo_ids(draw) -> str:
    """Well-formed, but past REPO_ID_MAX (Hub namespaces reach 42 characters, repository names 96)."""
    org = draw(word(ALNUM, REPO_PART, 41))
    return f"{org}/{draw(word(ALNUM, REPO_PART, 95, min_rest=REPO_ID_MAX - len(org) - 1))}"


@st.composite
def bad_licenses(draw) -> str:
    return insert(draw, draw(licenses), " ")  # a space anywhere, ends included


def trailing_newline(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid value and a newline (which `$` in a validator's regex would let through)."""
    return strategy.map(lambda value: value + "\n")


unknown_keys = st.one_of(
    st.sampled_from(["gpu", "op", "precision", "Name", "repo-id", "repoid", "licence", "python_name", "op_specs"]),
    word(LOWER + UPPER, LOWER + UPPER + DIGITS + "-_", 15),
).filter(lambda k: k not in KNOWN_KEYS)

# kind -> (question made invalid (None: a key), strategy of its CLI value, parts of the last line): in a part,
# {bad} is the value, {json} the value as JSON (as the validators quote it), {n} its length.
INVALID = {
    **{f"unknown {key}": (key, bad_multiselect(key), [f"Invalid choice for '{key}': "]) for key in MULTISELECT},
    **{
        f"empty {key}": (key, st.sampled_from(["[]", "[ ]"]), [f"question '{key}': choose at least"])
        for key in MULTISELECT
    },
    "bad name": ("name", bad_names(), ["question 'name': name must match ^[a-z][-a-z0-9]*[a-z0-9]$", "got {json}"]),
    "name with a trailing newline": ("name", trailing_newline(names), ["question 'name': name must", "got {json}"]),
    "name too long": (
        "name",
        word(LOWER, LOWER + DIGITS + "-", 80, last=LOWER + DIGITS, min_rest=60),
        ["question 'name': name must be at most 60 characters", "got {n}"],
    ),
    "bad repo_id": ("repo_id", bad_repo_ids(), ["question 'repo_id': repo_id must look like org/name, got {json}"]),
    "repo_id with a trailing newline": (
        "repo_id",
        trailing_newline(repo_ids),
        ["question 'repo_id': repo_id must look like org/name, got {json}"],
    ),
    "repo_id too long": (
        "repo_id",
        long_repo_ids(),
        [f"question 'repo_id': repo_id must be at most {REPO_ID_MAX} characters", "got {n}"],
    ),
    "license with a space": ("license", bad_licenses(), ["question 'license': license must be an SPDX", "got {json}"]),
    "license with a trailing newline": (
        "license",
        trailing_newline(licenses),
        ["question 'license': license must be an SPDX", "got {json}"],
    ),
    "negative version": (
        "version",
        st.integers(max_value=-1).map(str),
        ["question 'version': version must be a non-negative integer, got {bad}"],
    ),
    "unknown key": (None, unknown_keys, ["question 'name': unknown answer key(s) {bad}; valid keys: name,"]),
}


@pytest.mark.parametrize("kind", list(INVALID))
@fuzz_settings(examples=2)
@given(data=st.data())
def test_invalid_answer_fails_with_one_line_and_writes_nothing(kind, data):
    question, strategy, parts = INVALID[kind]
    others = data.draw(valid_answers(keys=[k for k in KNOWN_KEYS if k != question]), label="valid answers")
    bad = data.draw(strategy, label=f"invalid {question or 'key'}")
    args = [f"{key}={cli_value(value)}" for key, value in others.items()]
    args.append(f"{bad}=1" if question is None else f"{question}={bad}")
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "p"
        data_args = [a for arg in args for a in ("--data", arg)]  # each value one argv element, spaces included
        result = copier_cli("copy", "--trust", "--defaults", "--vcs-ref", "HEAD", *data_args, ROOT, dst)
        assert result.returncode == 1, f"{kind}: {args} exited {result.returncode}\n{result.stderr}"
        last = result.stderr.strip().splitlines()[-1]
        for part in parts:
            expected = part.format(bad=bad, json=json.dumps(bad), n=len(bad))
            assert expected in last, f"{kind}: the last line should say {expected!r}, got {last!r}"
        assert not dst.exists(), f"{kind}: {dst} was written"
