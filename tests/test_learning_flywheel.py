"""The learning CLI end to end: train-bc from a campaign, and the flywheel on a tiny budget."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from assay.cli.app import app  # noqa: E402

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.sim
def test_train_bc_cli_and_bad_input(tmp_path):
    store = str(tmp_path / "store")
    campaign = tmp_path / "demos.yaml"
    campaign.write_text("name: demos\nseed: 1\nepisodes: 3\nhorizon: 100\ntasks: [metaworld/reach@1]\npolicies: [expert]\n")
    assert invoke("run", str(campaign), "--store", store).exit_code == 0
    out = tmp_path / "ckpt" / "bc.pt"
    result = invoke("train-bc", "--data", "campaign=demos", "--out", str(out), "--store", store, "--epochs", "2",
                    "--hidden", "16", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["demos"] == 3 and document["path"] == str(out) and out.is_file()
    assert document["version"].startswith("builtin-1-c")
    bad = invoke("train-bc", "--data", "colour=red", "--out", str(out), "--store", store)
    assert bad.exit_code == 2 and "KEY one of campaign" in bad.stderr
    bad = invoke("train-bc", "--data", "campaign=demos", "--out", str(out), "--store", store, "--hidden", "wide")
    assert bad.exit_code == 2 and "--hidden" in bad.stderr


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.extended  # make test-extended; make test runs `assay flywheel --task` in the README tour and the design below
def test_flywheel_runs_end_to_end_on_a_tiny_budget(tmp_path):
    store = tmp_path / "store"
    args = ["flywheel", "--task", "metaworld/reach@1", "--base", "3", "--extra", "3", "--probe", "6", "--eval", "6",
            "--epochs", "10", "--horizon", "100", "--store", str(store), "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (row,) = document["results"]
    # one training seed: the pooled test is that seed's test, on the same discordant pairs
    assert document["pooled"] == {"pairs": 6, "base": row["base"]["successes"], "control": row["control"]["successes"],
                                  "flywheel": row["flywheel"]["successes"], "flywheel_only": row["flywheel_only"],
                                  "control_only": row["control_only"], "mcnemar_p": row["mcnemar_p"]}
    assert row["flywheel"]["successes"] - row["control"]["successes"] == row["flywheel_only"] - row["control_only"]
    for arm in ("base", "control", "flywheel"):
        assert row[arm]["trials"] == 6 and 0 <= row[arm]["low"] <= row[arm]["rate"] <= row[arm]["high"] <= 1
    assert row["contaminated"] == {"base": 0, "control": 0, "flywheel": 0}  # held-out seeds only
    assert 0 < row["recovery_demos"] <= 3 and row["recovery_frames"] > 0 and 0 < row["mcnemar_p"] <= 1
    if row["control"]["rate"] > row["base"]["rate"]:
        gain = (row["flywheel"]["rate"] - row["base"]["rate"]) / (row["control"]["rate"] - row["base"]["rate"])
        assert row["gain_ratio"] == pytest.approx(gain)
    else:
        assert row["gain_ratio"] is None
    # rerunning resumes every campaign (nothing reruns) and, training being deterministic, gives the same result
    again = invoke(*args)
    assert again.exit_code == 0 and json.loads(again.stdout)["results"] == [row]


def assert_budget_groups(rep: dict) -> None:
    """The primary pair at one budget of its own, the secondary arms at one budget of theirs, never above it."""
    base, budget = rep["base"], rep["budget"]
    extra = {arm: (s["episodes"] - base["episodes"], s["frames"] - base["frames"])
             for arm, s in rep["data"].items() if arm != "base"}
    assert extra["targeted"] == extra["random"] == (budget["episodes"], budget["frames"])
    secondary = budget["secondary"]
    assert {extra[arm] for arm in secondary["arms"]} == {(secondary["episodes"], secondary["frames"])}
    assert secondary["episodes"] <= budget["episodes"] and secondary["frames"] <= budget["frames"]
    primary_pair = min(budget["available"][a]["episodes"] for a in ("targeted", "random"))
    assert budget["episodes"] == min(primary_pair, 2)  # whatever the secondary arms found


TINY_DESIGN = """name: tiny
task: metaworld/reach@1
horizon: 80
slice: {component: 3, threshold: 0.0}
primary: {test: ttest, unit: replicate}
base_demos: 3
extra_demos: 2
pool: 12
probe: 6
eval: 4
replicates: 2
epochs: 5
hidden: [16]
bootstrap: 200
"""


@pytest.mark.sim
@pytest.mark.slow
def test_flywheel_design_runs_end_to_end_and_a_rerun_resumes_everything(tmp_path):
    """23 s at load 5, about 2 min at load 12, on the shared 2 cores (2 replicates x (12 expert + 6 probe + 5 x 4 evaluation episodes), 10 tiny trainings);
    the rerun reads everything back in a few seconds."""
    from assay.store import Store

    design = tmp_path / "tiny.yaml"
    design.write_text(TINY_DESIGN)
    store = tmp_path / "store"
    args = ["flywheel", "--design", str(design), "--store", str(store), "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert json.loads((store / "learning" / "flywheel" / "tiny.json").read_text()) == document
    assert [rep["replicate"] for rep in document["replicates"]] == [0, 1]
    seeds = []
    for rep in document["replicates"]:
        budget = rep["budget"]
        assert budget["episodes"] <= 2 and budget["frames"] > 0
        # the shortfall warning is there exactly when some arm found fewer than the 2 extra demos asked
        short = sorted(arm for arm, got in budget["available"].items() if got["episodes"] < 2)
        assert (rep["shortfall"] is None) == (not short) == (budget["episodes"] == budget["secondary"]["episodes"] == 2)
        if short:
            assert all(f"{arm} {budget['available'][arm]['episodes']}" in rep["shortfall"] for arm in short)
        assert set(rep["outcomes"]) == {"base", "random", "targeted", "recovery", "ponr", "oracle"}
        assert all(len(o) == 4 for o in rep["outcomes"].values())
        assert rep["contaminated"] == dict.fromkeys(rep["outcomes"], 0) and rep["scene_overlap"] == 0
        seeds.append(set(rep["outcomes"]["base"]))
    assert not seeds[0] & seeds[1]  # each replicate draws its own evaluation seeds
    analysis = document["analysis"]
    assert analysis["primary"]["pairs"] == 8 and analysis["rates"]["base"]["trials"] == 8
    assert document["power"]["planned_pairs"] == 8 and document["power"]["enough"] is False
    assert document["leakage"] == {"contaminated": 0, "scene_overlap": 0}
    # every extra arm trained on the same episodes and frames; the checkpoints' own provenance agrees
    from assay.learning.leakage import checkpoint_provenance

    for rep in document["replicates"]:
        extra = {arm: size for arm, size in rep["data"].items() if arm != "base"}
        assert_budget_groups(rep)
        assert extra["random"] == {"episodes": rep["base"]["episodes"] + rep["budget"]["episodes"],
                                   "frames": rep["base"]["frames"] + rep["budget"]["frames"]}
        for arm, checkpoint in rep["checkpoints"].items():
            assert len(checkpoint_provenance(checkpoint["path"])) == rep["data"][arm]["episodes"]
    with Store(store) as opened:
        episodes = len(opened.catalog.episodes())
    stamps = {p: p.stat().st_mtime_ns for p in (store / "learning" / "flywheel").rglob("*.pt")}
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == document  # same numbers, exactly
    with Store(store) as opened:
        assert len(opened.catalog.episodes()) == episodes  # no episode reran
    assert {p: p.stat().st_mtime_ns for p in (store / "learning" / "flywheel").rglob("*.pt")} == stamps  # nothing retrained
    # the report of an evaluation campaign shows the experiment
    campaign = document["replicates"][0]["campaigns"]["eval"]
    report = invoke("report", campaign, "--store", str(store), "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r.html").read_text()
    assert "Flywheel: targeted vs random data" in html
    assert "primary endpoint (declared), targeted − random: two-sided t test over the replicate differences" in html
    assert "secondary: McNemar exact over the pooled (replicate, scene) pairs" in html and "budget group" in html
    table = invoke("flywheel", "--design", str(design), "--store", str(store))
    assert table.exit_code == 0 and "gain ratio" in table.stdout and "mining chose" in table.stdout
    assert "each arm's extra data" in table.stdout and "primary pair" in table.stdout
    for rep in document["replicates"]:  # the table carries each replicate's shortfall warning, if any
        assert (rep["shortfall"] is None) or f"replicate {rep['replicate']}: {rep['shortfall']}" in table.stdout
    bad = invoke("flywheel", "--design", str(design), "--task", "metaworld/reach@1", "--store", str(store))
    assert bad.exit_code == 2 and "not both" in bad.stderr
    assert invoke("flywheel", "--store", str(store)).exit_code == 2


def test_flywheel_design_bad_input_is_one_line(tmp_path):
    missing = invoke("flywheel", "--design", str(tmp_path / "nope.yaml"), "--store", str(tmp_path / "s"))
    assert missing.exit_code == 2 and "cannot read design file" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\nreplicates: 0\n"
                   "primary: {test: ttest, unit: replicate}\n")
    result = invoke("flywheel", "--design", str(bad), "--store", str(tmp_path / "s"))
    assert result.exit_code == 2 and "bad.yaml:4: replicates" in result.stderr
    neither = invoke("flywheel", "--store", str(tmp_path / "s"))
    assert neither.exit_code == 2 and "--design" in neither.stderr


@pytest.mark.sim
def test_relabels_and_recoveries_replay_each_failure_in_its_own_variant(tmp_path):
    """An episode run at control.gain 0.5 reproduces only in that variant: the relabels read it there, a
    record claiming nominal is refused (ReplayMismatch). About 2 s (one 40-step reach episode, a few replays)."""
    import dataclasses

    import numpy as np

    from assay.errors import ReplayMismatch
    from assay.failures.replay import Replayer, Replayers
    from assay.learning.data import episode_demo
    from assay.learning.flywheel_run import relabel
    from assay.learning.runs import run_grid
    from assay.spec import NOMINAL, PolicySpec
    from assay.store import Store

    with Store(tmp_path / "store") as store:
        plan, records = run_grid(store, "gain", ["metaworld/reach@1"], [PolicySpec(name="expert", builtin="expert")],
                                 1, 5, 40, variants=[{"control.gain": 0.5}])
        (record,) = records
        assert record.variant_name == "control.gain=0.5"
        demo = episode_demo(store, record)
        with Replayers(plan.tasks[0]) as replayers:
            own = replayers.for_record(record)
            assert own.variant.name == "control.gain=0.5" and replayers.for_record(record) is own
            replayed = np.asarray(own.replay(record.seed, demo.actions).states[:-1])
            assert replayed.shape == demo.observations.shape
            assert np.abs(replayed - demo.observations).max() <= 1e-9  # the recorded states, step for step
            nominal = Replayer(plan.tasks[0], NOMINAL)
            try:
                check = nominal.verify(record.seed, demo.actions, demo.observations)
            finally:
                nominal.close()
            assert not check.ok and check.first_mismatch is not None and check.first_mismatch <= 2  # diverges at once
            (label,) = relabel(store, replayers, [record])
            assert label.variant_key == record.variant_key and label.purpose == "relabel"
            assert np.array_equal(label.observations, demo.observations)
            # the expert ran this episode: its relabels of its own states are the actions it recorded
            assert np.allclose(label.actions, demo.actions, atol=1e-6)
            claimed = dataclasses.replace(record, variant={}, variant_key="nominal", variant_name="nominal")
            with pytest.raises(ReplayMismatch, match="variant nominal.*diverges"):
                relabel(store, replayers, [claimed])


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.extended  # make test-extended; the scene design and the per-variant replays stay in make test
def test_flywheel_variant_design_runs_end_to_end_and_a_rerun_reproduces_it(tmp_path):
    """The example variant design's distribution and slice (nominal + control.gain 0.5, base on nominal only) on
    reach at a tiny budget: pool, probe and evaluation run in both variants, the arms' data come from where
    they should, six arms at one budget, and a rerun gives the same document. About 35 s, the rerun 15 s
    (the ponr search replays again; nothing retrains, no episode reruns), on the shared 2 cores."""
    from pathlib import Path

    import yaml

    from assay.learning.leakage import checkpoint_provenance
    from assay.store import Store

    example = yaml.safe_load(Path("examples/flywheel/push-gain-variant-slice.yaml").read_text())
    tiny = {"name": "tinyv", "task": "metaworld/reach@1", "horizon": 80, "variants": example["variants"],
            "slice": example["slice"], "primary": {"test": "ttest", "unit": "replicate"}, "base_demos": 3, "extra_demos": 2, "pool": 8, "probe": 4, "eval": 3,
            "replicates": 2, "epochs": 5, "hidden": [16], "bootstrap": 200}
    design = tmp_path / "tinyv.yaml"
    design.write_text(yaml.safe_dump(tiny))
    store = tmp_path / "store"
    args = ["flywheel", "--design", str(design), "--store", str(store), "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    gain = "control.gain=0.5"
    assert set(document["by_variant"]) == {"nominal", gain}
    assert document["power"]["planned_pairs"] == 3 * 2 * 2 == document["analysis"]["primary"]["pairs"]
    for name in ("nominal", gain):
        assert document["by_variant"][name]["rates"]["ponr"]["trials"] == 6  # 3 seeds x 2 replicates
    with Store(store) as opened:
        by_key = {r.key: r for r in opened.catalog.episodes()}
        keys = {r.variant_name: r.variant_key for r in by_key.values()}
        for rep in document["replicates"]:
            assert set(rep["outcomes"]) == {"base", "random", "targeted", "recovery", "ponr", "oracle"}
            assert {s.split("|")[0] for s in rep["outcomes"]["base"]} == {"nominal", gain}
            assert rep["inside"] == {s: s.startswith("nominal|") for s in rep["inside"]}  # the slice: nominal
            assert_budget_groups(rep)  # ponr among the secondary arms
            assert rep["mining"]["variants"][gain]["episodes"] == rep["mining"]["variants"]["nominal"]["episodes"] == 4
            data = {arm: checkpoint_provenance(c["path"]) for arm, c in rep["checkpoints"].items()}
            assert {p["variant_key"] for p in data["base"]} == {"nominal"}
            added = {arm: [p for p in prov if p not in data["base"]] for arm, prov in data.items()}
            assert added["oracle"] and {p["variant_key"] for p in added["oracle"]} == {keys[gain]}
            chosen = rep["mining"]["chosen_variants"]
            if chosen is not None:
                assert {p["variant_key"] for p in added["targeted"]} <= {keys[n] for n in chosen}
            composition = rep["composition"]
            for arm in ("random", "targeted", "oracle"):
                assert sum(composition[arm]["variants"].values()) == len(added[arm])
                assert composition[arm]["unresolved"] == 0
            assert composition["oracle"]["outside_slice"] == len(added["oracle"])
            assert composition["targeted"]["in_target"] == len(added["targeted"])  # drawn inside the mined target
            # random draws only from pool episodes after the base's last one (the part its selection never saw)
            index = {(r.variant_key, r.seed): r.episode_index for r in by_key.values()
                     if r.campaign == rep["campaigns"]["pool"]}
            last = max(index[(p["variant_key"], p["seed"])] for p in data["base"])
            assert added["random"] and all(index[(p["variant_key"], p["seed"])] > last for p in added["random"])
            # relabels and recoveries come from the probe's failures, each tagged with its own variant
            probe = {(r.variant_key, r.seed) for r in by_key.values() if r.campaign == rep["campaigns"]["probe"]
                     and r.outcome.value != "success"}
            for arm in ("recovery", "ponr"):
                assert added[arm] and {(p["variant_key"], p["seed"]) for p in added[arm]} <= probe
        episodes = len(by_key)
    stamps = {p: p.stat().st_mtime_ns for p in (store / "learning" / "flywheel").rglob("*.pt")}
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == document  # same numbers, exactly
    with Store(store) as opened:
        assert len(opened.catalog.episodes()) == episodes
    assert {p: p.stat().st_mtime_ns for p in (store / "learning" / "flywheel").rglob("*.pt")} == stamps
    report = invoke("report", document["replicates"][0]["campaigns"]["eval"], "--store", str(store),
                    "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r.html").read_text()
    assert "Per variant (secondary endpoints)" in html and f"variant {gain}: base " in html
    assert "Base trained on variant(s) nominal only" in html


@pytest.mark.sim
@pytest.mark.slow
def test_ponr_recoveries_replay_the_failure_in_its_own_variant(tmp_path):
    """mine_recovery (run_flywheel's PoNR mining and the design's ponr arm) on a random policy's timeout at
    control.gain 0.75: in its own variant the replay verifies and recoveries are written, tagged with that
    variant; the same episode claiming nominal does not verify and yields none. About 7 s on the shared cores."""
    import dataclasses

    from assay.failures.replay import Replayers
    from assay.learning.flywheel import mine_recovery
    from assay.learning.runs import run_grid
    from assay.spec import PolicySpec
    from assay.store import Store

    with Store(tmp_path / "store") as store:
        plan, (record,) = run_grid(store, "gain", ["metaworld/reach@1"], [PolicySpec(name="random", builtin="random")],
                                   1, 7, 80, variants=[{"control.gain": 0.75}])
        assert record.outcome.value == "timeout" and record.variant_name == "control.gain=0.75"
        with Replayers(plan.tasks[0]) as replayers:
            demos, searched = mine_recovery(store, replayers, [record], 2)
            assert searched == 1 and len(demos) == 2
            assert {d.variant_key for d in demos} == {record.variant_key} and {d.seed for d in demos} == {record.seed}
            claimed = dataclasses.replace(record, variant={}, variant_key="nominal", variant_name="nominal")
            assert mine_recovery(store, replayers, [claimed], 2) == ([], 1)


PIXEL_DESIGN = """name: tinyp
task: metaworld/reach@1
horizon: 80
variants: [{}, {light.intensity: 0.3}]
slice: {variants: [{}]}
primary: {test: ttest, unit: replicate}
obs: image+proprio
camera_size: 32
base_demos: 2
extra_demos: 1
pool: 4
probe: 4
eval: 2
replicates: 1
epochs: 1
hidden: [16]
bootstrap: 100
ponr: false
"""


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.extended
def test_a_pixel_flywheel_trains_every_arm_on_recorded_frames(tmp_path):
    """The same machinery with pixel BC under a visual gap (light 0.3 unseen by the base) at a tiny budget: every
    campaign records the front camera, every arm is a pixel-bc checkpoint trained on the frames of the steps
    its (frame-trimmed) demos kept, the relabel arm on its probe episode's frames. About 100 s at load 11."""
    from assay.learning.leakage import checkpoint_provenance
    from assay.policies.pixel_bc import load_pixel_checkpoint
    from assay.store import Store

    design = tmp_path / "tinyp.yaml"
    design.write_text(PIXEL_DESIGN)
    store = tmp_path / "store"
    result = invoke("flywheel", "--design", str(design), "--store", str(store), "--json")
    assert result.exit_code == 0, result.output
    (rep,) = json.loads(result.stdout)["replicates"]
    assert set(rep["outcomes"]) == {"base", "random", "targeted", "recovery", "oracle"}  # ponr: false
    assert_budget_groups(rep)
    for arm, checkpoint in rep["checkpoints"].items():
        data = load_pixel_checkpoint(checkpoint["path"])
        assert data["config"]["image_size"] == 32, arm
        assert len(checkpoint_provenance(checkpoint["path"])) == rep["data"][arm]["episodes"]
    assert rep["composition"]["oracle"]["variants"] == {"light.intensity=0.3": 1}
    with Store(store) as opened:
        evaluation = opened.catalog.episodes(campaign=rep["campaigns"]["eval"])
        assert {r.policy_spec["builtin"] for r in evaluation} == {"pixel-bc"}
        pool = opened.catalog.episodes(campaign=rep["campaigns"]["pool"])
        assert all((store / "videos" / r.key[:2] / f"{r.key}.front.mp4").is_file() for r in pool)
    bad = tmp_path / "bad.yaml"
    bad.write_text(PIXEL_DESIGN.replace("ponr: false", "ponr: true"))
    refused = invoke("flywheel", "--design", str(bad), "--store", str(store))
    assert refused.exit_code == 2 and "PoNR recovery demos have no camera frames; set ponr: false" in refused.stderr
