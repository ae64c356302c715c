"""The wording of spec loading's unknown-field line: a separator before the valid names, with or without a guess."""

from __future__ import annotations

import pytest

from assay.errors import SpecError
from assay.spec import CampaignSpec, load_campaign
from assay.spec.loading import _unknown_field

BASE = "name: t\nepisodes: 2\ntasks: [gymnasium/Pendulum-v1]\npolicies: [random]\n"
CAMPAIGN_FIELDS = ", ".join(sorted(CampaignSpec.model_fields))


def test_a_key_like_nothing_valid_reads_unknown_field_then_the_valid_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + "zzz: 1\n")
    with pytest.raises(SpecError) as raised:
        load_campaign(path)
    assert str(raised.value) == f"{path}:5: zzz: unknown field; valid: {CAMPAIGN_FIELDS}"


@pytest.mark.parametrize(("loc", "expected"), [
    (("zzz",), f"unknown field; valid: {CAMPAIGN_FIELDS}"),
    (("horizn",), f"unknown field; did you mean 'horizon'? valid: {CAMPAIGN_FIELDS}"),
    (("policies", 0, "qqq"), "unknown field; valid: builtin, entrypoint, name, params, remote, version"),
    (("policies", 1, "parms"),
     "unknown field; did you mean 'params'? valid: builtin, entrypoint, name, params, remote, version"),
    (("nowhere", "zzz"), "unknown field"),  # no model owns the mapping: nothing to list
])
def test_the_unknown_field_line_with_and_without_a_close_name(loc, expected):
    assert _unknown_field(loc, CampaignSpec) == expected
    assert "field valid" not in _unknown_field(loc, CampaignSpec)
