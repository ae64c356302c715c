"""Names are keys (issue 50): campaign, policy and task names are stored in Unicode NFC, and a control or invisible
character in one is refused in one line."""

from __future__ import annotations

import unicodedata

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import SpecError
from assay.spec import PolicySpec, TaskSpec, campaign_from_data
from tests.record_store import fake_store
from tests.stats_fixtures import records

COMPOSED, DECOMPOSED = "caf\u00e9", "cafe\u0301"  # "café" as one code point, and as e + a combining accent
BASE = {"episodes": 1, "tasks": ["metaworld/reach-v3"], "policies": ["expert"]}


def test_cafe_in_either_form_is_one_campaign_and_one_policy_name():
    assert COMPOSED != DECOMPOSED and unicodedata.normalize("NFC", DECOMPOSED) == COMPOSED
    one = campaign_from_data({**BASE, "name": COMPOSED})
    other = campaign_from_data({**BASE, "name": DECOMPOSED})
    assert other.name == COMPOSED and other.content_hash() == one.content_hash()
    policy = PolicySpec(name=f"{DECOMPOSED}-policy", builtin="expert")
    assert policy.name == f"{COMPOSED}-policy"


@pytest.mark.parametrize("name", ["nightly\n", "night\tly", "night\u200bly", "nightly\u202e", "a\x00b"])
def test_a_campaign_name_with_a_control_character_is_refused_in_one_line(name):
    with pytest.raises(SpecError) as caught:
        campaign_from_data({**BASE, "name": name})
    message, hidden = str(caught.value), next(c for c in name if not c.isalnum())
    assert "\n" not in message and "campaign name" in message and f"U+{ord(hidden):04X}" in message


@pytest.mark.parametrize("name", ["expert\n", "exp\u200bert"])
def test_a_policy_name_with_a_control_character_is_refused_in_one_line(name):
    with pytest.raises(SpecError) as caught:
        campaign_from_data({**BASE, "name": "c", "policies": [{"name": name, "builtin": "expert"}]})
    assert "\n" not in str(caught.value) and "policy name" in str(caught.value)


def test_a_task_name_with_a_control_character_is_refused():
    with pytest.raises(SpecError, match="U\\+000A"):
        campaign_from_data({**BASE, "name": "c", "tasks": ["metaworld/reach-v3\n"]})
    with pytest.raises(ValueError, match="task name"):
        TaskSpec.model_validate({"name": "toy/reach\n", "version": 1, "backend": "toy", "env_name": "r",
                                 "instructions": ["reach"], "horizon": 5, "control_hz": 10, "state_dim": 1,
                                 "action": {"dim": 1, "low": [-1], "high": [1]}})


def test_results_finds_a_campaign_by_either_form_of_its_name(tmp_path):
    root = fake_store(tmp_path / "store", COMPOSED, records({("p", "t@1"): "SF"}))
    result = CliRunner().invoke(app, ["results", "--store", str(root), "--campaign", DECOMPOSED, "--json"])
    assert result.exit_code == 0, result.output
