"""``assay trace diff``: the known answers. Change exactly one layer (the policy's weights, the controller's gain,
friction, the light) and the diff names that layer first in every one of the four; an unchanged pair (re-run
with the opt-in trace groups: tracing changes nothing) names none. Meta-World, a few short episodes each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Store

runner = CliRunner()
BASE = {"episodes": 3, "horizon": 30, "tasks": ["metaworld/pick-place"], "policies": ["expert"]}
CAMERA = {"cameras": [{"name": "front", "width": 24, "height": 24}], "video_fps": 8}


def _mlp(seed: int) -> dict:
    return {"name": "mlp", "builtin": "mlp", "params": {"hidden": [32], "seed": seed, "state_dim": 39, "action_dim": 4}}


CAMPAIGNS = {
    "expert": BASE,
    "unchanged": {**BASE, "trace": ["physics.forces", "controller.effort"]},  # re-run: other keys, same episodes
    "gain": {**BASE, "variants": [{"control.gain": 1.5}]},  # the controller
    "friction": {**BASE, "variants": [{"friction": 0.3}]},  # physics
    "camera": {**BASE, **CAMERA},
    "light": {**BASE, **CAMERA, "variants": [{"light.intensity": 0.5}]},  # rendering
    "weights-0": {**BASE, "policies": [_mlp(0)]},
    "weights-1": {**BASE, "policies": [_mlp(1)]},  # the policy
    "other-seeds": {**BASE, "seed": 1},
    "two-policies": {**BASE, "episodes": 1, "policies": ["expert", "random"]},
}
KNOWN = [("expert", "gain", "controller"), ("expert", "friction", "physics"), ("camera", "light", "render"),
         ("weights-0", "weights-1", "policy")]


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diffs")
    with Store(root) as store:
        for name, data in CAMPAIGNS.items():
            run_campaign(prepare_campaign(campaign_from_data({"name": name, **data})), store, InlineExecutor(root))
    return root


def _diff(root: Path, a: str, b: str) -> dict:
    result = runner.invoke(app, ["trace", "diff", a, b, "--store", str(root), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.sim
def test_each_changed_layer_is_named_first_in_every_pair(store_root: Path):
    named = {}
    for a, b, layer in KNOWN:
        found = _diff(store_root, a, b)
        assert found["pairs"] == 3
        first = {pair["first"]["layer"] for pair in found["by_pair"] if pair["first"] is not None}
        assert first == {layer}, (b, found["verdict"])  # every pair, not only the majority
        assert found["named"] == layer and found["verdict"].startswith(f"first diverges in {layer} (")
        named[b] = found
    assert sum(found["named"] == layer for (_, b, layer) in KNOWN for found in [named[b]]) == 4  # 4 of 4
    # what the change should part first, and when: the gain moves the target at once; the light the first frame
    # drawn in a step (at 8 of 80 frames/s the video's second, which follows step 9)
    assert {p["first"]["column"] for p in named["gain"]["by_pair"]} == {"layer.controller.target"}
    assert all(p["first"]["step"] == 0 for p in named["gain"]["by_pair"])
    assert {(p["first"]["column"], p["first"]["step"]) for p in named["light"]["by_pair"]} == {("layer.render.mean", 9)}
    assert all(set(p["layers"]) == {"render"} for p in named["light"]["by_pair"])  # nothing but the frames parts
    assert all(p["layers"]["policy"] > p["layers"]["physics"] for p in named["friction"]["by_pair"])


@pytest.mark.sim
def test_an_unchanged_pair_names_no_layer(store_root: Path):
    found = _diff(store_root, "expert", "unchanged")
    assert found["pairs"] == 3 and found["named"] is None
    assert all(pair["first"] is None and pair["a"] != pair["b"] for pair in found["by_pair"])  # re-run, not reused
    assert found["verdict"] == "no layer diverges beyond the noise band in 3 paired episodes; success never changes"
    text = runner.invoke(app, ["trace", "diff", "expert", "unchanged", "--store", str(store_root)])
    assert text.exit_code == 0 and text.output.strip().endswith("success never changes")


@pytest.mark.sim
def test_the_text_report_names_the_layer_and_where_success_changes(store_root: Path):
    result = runner.invoke(app, ["trace", "diff", "expert", "gain", "--store", str(store_root)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("first diverges in controller (layer.controller.target) at step 0 (median over the 3 "
                           "of 3 pairs where it parts first); ")


@pytest.mark.sim
@pytest.mark.parametrize(("a", "b", "said"), [
    ("expert", "other-seeds", "'expert' and 'other-seeds' share no (task, seed): expert ran "),
    ("expert", "nowhere", "no campaign 'nowhere' in this store; known: "),
    ("two-policies", "expert", "side 'two-policies' has two episodes of task metaworld/pick-place@1 seed "),
    ("two-policies:mlp", "expert", "campaign 'two-policies' has no policy 'mlp'; valid: expert, random"),
])
def test_bad_sides_are_one_line(store_root: Path, a: str, b: str, said: str):
    result = runner.invoke(app, ["trace", "diff", a, b, "--store", str(store_root)])
    assert result.exit_code == 2 and said in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.sim
def test_a_named_policy_pairs_a_campaign_of_several(store_root: Path):
    found = _diff(store_root, "two-policies:expert", "expert")
    assert found["pairs"] == 1 and found["named"] is None and found["skipped"] == {"unpaired": 2}
