"""The policy zoo end to end on a tiny budget: demos with a camera, six checkpoints, their evaluation campaign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

import yaml  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from assay.cli.app import app  # noqa: E402
from assay.learning import leakage_report  # noqa: E402
from assay.learning.zoo import load_manifest  # noqa: E402
from assay.policies.bc import load_checkpoint_data  # noqa: E402
from assay.store import Store  # noqa: E402

TASKS = "metaworld/reach@1,metaworld/button-press-topdown@1"


@pytest.mark.sim
@pytest.mark.slow
def test_zoo_builds_and_evaluates_on_a_tiny_budget(tmp_path):
    store = tmp_path / "store"
    built = CliRunner().invoke(
        app,
        [
            "zoo",
            "build",
            "--tasks",
            TASKS,
            "--demos",
            "3",
            "--epochs",
            "10",
            "--horizon",
            "70",
            "--store",
            str(store),
            "--json",
        ],
    )
    assert built.exit_code == 0, built.output
    manifest = json.loads(built.stdout)
    members = manifest["members"]
    assert len(members) == 6 and len({m["version"] for m in members}) == 6  # six distinct checkpoints
    assert {m["augment"] for m in members} == {"none", "shift"} and {m["image_size"] for m in members} == {48, 64}
    assert load_manifest(manifest["dir"])["members"] == members
    for member in members:  # provenance: the checkpoint names the episodes the manifest says it saw
        data = load_checkpoint_data(member["path"])
        assert [p["key"] for p in data["provenance"]] == member["episodes"] and data["config"]["tasks"] == sorted(
            TASKS.split(",")
        )
    again = CliRunner().invoke(
        app,
        [
            "zoo",
            "build",
            "--tasks",
            TASKS,
            "--demos",
            "3",
            "--epochs",
            "10",
            "--horizon",
            "70",
            "--store",
            str(store),
            "--json",
        ],
    )
    assert [m["version"] for m in json.loads(again.stdout)["members"]] == [
        m["version"] for m in members
    ]  # deterministic

    spec = tmp_path / "zoo.yaml"
    wrote = CliRunner().invoke(
        app, ["zoo", "campaign", manifest["dir"], "-o", str(spec), "--episodes", "1", "--tasks", "metaworld/reach@1"]
    )
    assert wrote.exit_code == 0, wrote.output
    alone = tmp_path / "alone.yaml"
    CliRunner().invoke(app, ["zoo", "campaign", manifest["dir"], "-o", str(alone), "--members", "full", "--no-expert"])
    assert [p["name"] for p in yaml.safe_load(alone.read_text())["policies"]] == ["full"]  # no expert reference
    bad = CliRunner().invoke(app, ["zoo", "campaign", manifest["dir"], "-o", str(spec), "--members", "full,nope"])
    assert bad.exit_code == 2 and "unknown zoo member nope; this zoo has full-shift, full," in bad.output
    ran = CliRunner().invoke(app, ["run", str(spec), "--store", str(store)])
    assert ran.exit_code == 0, ran.output
    with Store(store) as opened:
        records = opened.catalog.episodes(campaign=f"zoo-{manifest['tag']}-nominal")
    assert len(records) == 7 and {r.policy_name for r in records} == {m["name"] for m in members} | {"expert"}
    leaks = leakage_report(records)
    assert sorted(leaks) == sorted(str(Path(m["path"])) for m in members) and all(v == [] for v in leaks.values())


SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


def test_sampled_layout_demos_are_checked_and_leave_older_zoos_their_tags():
    from assay.errors import AssayError
    from assay.learning.zoo import LIBERO_STATE_ZOO, LIBERO_ZOO, STATE, Member, ZooConfig

    assert LIBERO_ZOO.tag() == "1c5854da"  # runs/libero-zoo/zoo's tag: the new options at their defaults add nothing
    assert LIBERO_STATE_ZOO.sampled_demos == 30 and not LIBERO_STATE_ZOO.pixels  # no camera anywhere
    with pytest.raises(AssayError, match=r"^zoo members s train on more sampled-layout demos than the zoo records "
                                         r"\(0 per task, sampled_demos\)$"):
        ZooConfig(tasks=(SOUP,), members=(Member("s", obs=STATE, demos=1, sampled=2),))
    with pytest.raises(AssayError, match="tasks metaworld/reach@1 are not LIBERO's"):
        ZooConfig(tasks=("metaworld/reach@1",), sampled_demos=1, members=(Member("s", obs=STATE, sampled=1),))


@pytest.mark.sim
@pytest.mark.slow
def test_a_member_trains_on_fixed_and_sampled_layout_demos_and_its_checkpoint_names_both(tmp_path):
    from assay.learning.zoo import STATE, Member, ZooConfig, build_zoo

    config = ZooConfig(tasks=(SOUP,), demos=1, epochs=2, horizon=None, demo_seed=0, eval_seed=20, sampled_demos=1,
                       members=(Member("fixed", obs=STATE, demos=1, epochs=2),
                                Member("both", obs=STATE, demos=1, sampled=1, epochs=2)))
    with Store(tmp_path / "store") as store:
        manifest = build_zoo(store, config)
        demos = {r.key: r for r in store.catalog.episodes(campaign=manifest["demo_campaign"])}
        more = {r.key: r for r in store.catalog.episodes(campaign=manifest["sampled_demo_campaign"])}
    assert manifest["demo_successes"] == {SOUP: 1} and manifest["sampled_demo_successes"] == {SOUP: 1}
    fixed, both = manifest["members"]
    assert fixed["sampled"] == 0 and fixed["episodes"] == list(demos)
    assert both["sampled"] == 1 and both["episodes"] == [*demos, *more]
    assert [p["key"] for p in load_checkpoint_data(both["path"])["provenance"]] == both["episodes"]
    [sampled], [demo] = more.values(), demos.values()  # one seed: LIBERO's placement sampler, not initial state 0
    assert sampled.seed == demo.seed and demo.variant_key == "nominal" != sampled.variant_key
