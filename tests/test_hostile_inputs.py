"""Hostile campaign files (issue 25): every one is one line on stderr and exit status 2.

The corpus in ``tests/data/hostile_campaigns`` holds deep nesting, self-referencing
anchors, alias bombs, YAML tags, non-finite numbers, overlong names, a policy module
that raises on import, Rich markup in keys and values, bad encodings and every kind of
wrong field. None of them may crash with a traceback, hang, or create the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import SpecError
from assay.spec import load_campaign
from assay.spec.loading import MAX_FILE_BYTES

CORPUS = sorted((Path(__file__).parent / "data" / "hostile_campaigns").glob("*.yaml"))
runner = CliRunner()


def test_the_corpus_is_large():
    assert len(CORPUS) >= 81


def _refused(path: Path, store: Path) -> str:
    result = runner.invoke(app, ["run", str(path), "--store", str(store), "--executor", "inline"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, (path.name, result.exit_code, result.output[-500:], repr(result.exception))
    assert len(lines) == 1 and lines[0].startswith("error: "), (path.name, lines[:5])
    assert "Traceback" not in result.output
    assert not store.exists(), f"{path.name}: a refused campaign created the store"
    return lines[0]


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_hostile_campaign_is_one_line_and_exit_2(path, tmp_path):
    _refused(path, tmp_path / "store")


def test_markup_in_a_message_is_printed_literally(tmp_path):
    line = _refused(next(p for p in CORPUS if p.stem == "markup-key"), tmp_path / "store")
    assert "[/bold]: unknown field" in line


def test_bracketed_valid_ranges_survive_printing(tmp_path):
    line = _refused(next(p for p in CORPUS if p.stem == "factor-out-of-range"), tmp_path / "store")
    assert "valid: [0, 5]" in line


@pytest.mark.parametrize("stem, words", [
    ("billion-laughs", "more than 100,000 values"),
    ("self-alias-list", "an alias refers to a value that contains it"),
    ("alias-cycle-policy", "an alias refers to a value that contains it"),
    ("deep-list-nesting", "nesting too deep"),
    ("deep-map-nesting", "nesting"),
    ("nan-factor", "variants[0].action.noise: nan is not a finite number"),
    ("inf-episodes", "episodes: inf is not a finite number"),
    ("python-object-tag", "is not allowed in a campaign"),
    ("set-tag-policies", "is not allowed in a campaign"),
    ("bad-int-tag", "seed: cannot read value"),
    ("invalid-utf8", "not UTF-8 text"),
    ("long-name", "at most 100 characters"),
    ("bool-episodes", "episodes: Input should be a valid integer"),
    ("huge-seed", "seed: Input should be less than or equal to"),
    ("module-raises-on-import", "raised ValueError: this module refuses to be imported"),
    ("int-key", "must be a word"),
])
def test_the_reason_is_named(stem, words, tmp_path):
    line = _refused(next(p for p in CORPUS if p.stem == stem), tmp_path / "store")
    assert words in line, line


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nepisodes: 1\ntasks: [metaworld/reach@1]\npolicies: [expert]\ndescription: "
                    + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(SpecError, match="at most 1,048,576 are read"):
        load_campaign(path)


def test_limits_leave_ordinary_aliases_alone(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("name: anchors\nepisodes: 2\ntasks: [metaworld/reach@1]\n"
                    "policies: [expert, {name: shaky, builtin: degraded-expert, params: &p {action_noise: 0.5}},"
                    " {name: shaky2, builtin: degraded-expert, params: *p}]\n")
    spec = load_campaign(path)
    assert spec.policies[1].params == spec.policies[2].params == {"action_noise": 0.5}
