"""Protocol manifests (hashes, the shipped set, bad input), campaigns built from them, and the reportable stamp on
complete, partial and tampered traversals (no simulator: plans and counts; the episodes run in
tests/test_protocol_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.errors import ManifestError
from assay.metrics.completeness import CellCount, Completeness
from assay.metrics.stamp import campaign_stamp
from assay.protocols import build_campaign
from assay.protocols.build import with_knob
from assay.spec import PolicySpec
from assay.spec.protocol import Manifest, parse_manifest, read_manifest, shipped_protocols
from assay.store.aggregates import CellTotals

# The shipped manifests' hashes: a change to what a protocol runs changes its hash and must bump its version.
GOLDEN = {
    "lerobot-libero-0.4.4@1": "sha256:7ce7e2046a3803d048d6a29b59a78a519e3ea9112ffdca19b1d9120f46e23eec",
    "lerobot-libero-main@1": "sha256:ae9c7bdc41a5e7f8ef85d20bb31afab61d0c262cf4d13fd08622b5fdebc57c0b",
    "libero-plus@1": "sha256:32fdedee8d8e31636c8ac422d361275c27a065b2bac9a2cd902f17c5d21d0965",
    "libero-pro@1": "sha256:23a3b4bba4c473cb1c212c4278e320b3514de62392e450969b025a32eb8df1c2",
    "libero-pro-harness@1": "sha256:4c98c2e7fa83487e018f2b4fb86e7fe2d5cc5c55014b3dbe3550fb297f7c017f",
    "openpi-libero@1": "sha256:3af7ee678a5f1a703943987c4d2fe2369dd5e3fe1f1a5821789dff79bfea0148",
    "openvla-oft-libero@1": "sha256:8a865b5be69f386f1d60d0b543584ff2ee4fe0566cdbc9131834c429e14cc302",
}
REACH = "metaworld/reach@1"
EXPERT = PolicySpec(name="expert", builtin="expert")


def metaworld_manifest(**knobs) -> dict:
    """A small Meta-World protocol (the tests' own), as JSON data."""
    return {"schema_version": 1, "name": "mw-test", "version": 1, "backend": "metaworld",
            "suites": [{"name": "mt", "tasks": [REACH, "metaworld/button-press-topdown@1"], "horizon": 120}],
            "knobs": {"trials_per_task": 3, "seed": 0, "settle_steps": 0, "prompt": "variant", "control_hz": 80.0,
                      "image": {"cameras": ["front"], "render": [32, 32], "policy_input": [32, 32], "resize": "none"},
                      **knobs},
            "variants": [{"label": "nominal"}, {"label": "question", "factors": {"instruction.form": "question"}}]}


def test_the_shipped_manifests_hash_as_recorded():
    registry = shipped_protocols()
    assert {m.ref: m.content_hash() for m in registry.all()} == GOLDEN
    for manifest in registry.all():
        assert manifest.hash == manifest.content_hash()
    openpi = registry.get("openpi-libero")
    assert [(s.name, s.horizon, len(s.tasks)) for s in openpi.suites] == [
        ("spatial", 220, 10), ("object", 280, 10), ("goal", 300, 10), ("10", 520, 10)]
    assert (openpi.knobs.trials_per_task, openpi.knobs.settle_steps, openpi.knobs.replan_steps, openpi.knobs.prompt,
            openpi.knobs.image.render, openpi.knobs.image.policy_input) == (50, 10, 5, "task", (256, 256), (224, 224))
    lerobot = {r: registry.get(f"lerobot-libero-{r}") for r in ("0.4.4", "main")}
    assert {r: m.knobs.image.render for r, m in lerobot.items()} == {"0.4.4": (256, 256), "main": (360, 360)}
    assert lerobot["0.4.4"].normative()["suites"] == lerobot["main"].normative()["suites"]  # only the image differs
    assert registry.get("libero-pro-harness").knobs.prompt == "variant"  # env.language_instruction, the BDDL's
    assert len(registry.get("libero-pro").cells()) == 40 * 5 + 35  # environment: not the 5 living-room LIBERO-10 ones


def test_the_hash_covers_what_runs_and_not_its_documentation():
    manifest = parse_manifest(metaworld_manifest(), "test")
    assert manifest.content_hash() == parse_manifest({**metaworld_manifest(), "title": "x", "sources": {"a": "b"},
                                                     "notes": ["n"]}, "test").content_hash()
    for change in ({"trials_per_task": 4}, {"settle_steps": 1}, {"prompt": "task"}, {"replan_steps": 2}):
        assert parse_manifest(metaworld_manifest(**change), "t").content_hash() != manifest.content_hash(), change
    data = metaworld_manifest()
    data["suites"][0]["horizon"] = 121
    assert parse_manifest(data, "t").content_hash() != manifest.content_hash()
    # golden: the canonical JSON of the normative fields, SHA-256
    assert manifest.content_hash() == "sha256:" + __import__("hashlib").sha256(json.dumps(
        manifest.normative(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def test_bad_manifests_and_unknown_protocols_are_one_line_errors(tmp_path: Path):
    data = {**metaworld_manifest(), "hash": "sha256:" + "0" * 64}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=r"^.*mw-test@1: its recorded hash sha256:0{64} is not the hash of its "
                                            r"content, sha256:[0-9a-f]{64}; a changed protocol is a new version") as e:
        read_manifest(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ManifestError, match=r"^unknown protocol 'openpi-libro'; known: lerobot-libero-0.4.4@1, .*"):
        shipped_protocols().get("openpi-libro")
    with pytest.raises(ManifestError, match=r"^unknown protocol 'openpi-libero@9'"):
        shipped_protocols().get("openpi-libero@9")
    with pytest.raises(ManifestError, match=r"^protocol openpi-libero@1 has no suite 'spatil'; valid: spatial, "):
        shipped_protocols().get("openpi-libero").chosen(("spatil",))
    with pytest.raises(ManifestError, match=r"^t: knobs.prompt: Input should be 'task' or 'variant'$"):
        parse_manifest(metaworld_manifest(prompt="file"), "t")


def test_a_campaign_built_from_a_manifest_runs_its_knobs():
    manifest = parse_manifest(metaworld_manifest(prompt="task", replan_steps=4, settle_steps=2), "t")
    plan = build_campaign(manifest, EXPERT)
    spec = plan.spec
    assert (spec.name, spec.episodes, spec.seed, spec.replan_every, spec.prompt) == (
        "mw-test-v1-expert", 3, 0, 4, "task")
    assert spec.protocol.hash == manifest.content_hash() and spec.protocol.suites is None
    assert {(t.id, t.horizon, t.settle_steps, tuple((c.name, c.width) for c in t.cameras)) for t in plan.tasks} == {
        (REACH, 120, 2, (("front", 32),)), ("metaworld/button-press-topdown@1", 120, 2, (("front", 32),))}
    assert len(plan.jobs) == 2 * 2 * 3
    assert {j.instruction for j in plan.jobs if j.task.id == REACH} == {"reach the goal position"}  # prompt: task
    variant = build_campaign(parse_manifest(metaworld_manifest(), "t"), EXPERT)
    assert {j.instruction for j in variant.jobs if j.task.id == REACH} == {"reach the goal position",
                                                                          "can you reach the goal position?"}


def test_a_served_simulator_runs_a_protocol_campaign_as_the_same_campaign(tmp_path: Path):
    """``assay run --protocol ... --simulator BACKEND=URL``: every job names the simulator; the campaign, its hash
    and its keys are the ones run in process (an execution setting); a URL that is not ws:// is one line."""
    from assay.cli.protocol_build import campaign_plan
    from assay.errors import SpecError

    path = tmp_path / "mw.json"
    path.write_text(json.dumps(metaworld_manifest()))
    here, in_process, _ = campaign_plan(None, str(path), "expert", None)
    spec, served, manifest = campaign_plan(None, str(path), "expert", None, ["metaworld=ws://127.0.0.1:8711"])
    assert manifest is not None and spec.simulators == {"metaworld": "ws://127.0.0.1:8711"}
    assert {j.simulator for j in served.jobs} == {"ws://127.0.0.1:8711"}
    assert {j.simulator for j in in_process.jobs} == {None}
    assert spec.content_hash() == here.content_hash()
    assert [j.key for j in served.jobs] == [j.key for j in in_process.jobs]
    with pytest.raises(SpecError, match="write BACKEND=ws://HOST:PORT"):
        campaign_plan(None, str(path), "expert", None, ["metaworld=host:1"])


def test_a_remote_policy_resizes_when_the_harness_does():
    from assay.protocols.build import protocol_policy

    openpi = shipped_protocols().get("openpi-libero")
    remote = PolicySpec(name="pi05", remote="ws://127.0.0.1:8000", version="pi05_libero")
    assert protocol_policy(openpi, remote).params == {"image_size": [224, 224]}
    assert protocol_policy(openpi, EXPERT) == EXPERT
    with pytest.raises(ManifestError, match=r"^protocol openpi-libero@1 sends 224x224 images; policy 'pi05' asks for "
                                            r"image_size \[256, 256\] \(leave it out\)$"):
        protocol_policy(openpi, remote.model_copy(update={"params": {"image_size": [256, 256]}}))


def _counts(plan, recorded: int | None = None, errors: int = 0) -> tuple[Completeness, list[CellTotals]]:
    """The plan's cells with ``recorded`` episodes each (default: all planned), ``errors`` of the first cell's."""
    cells, totals = [], []
    for i, cell in enumerate(plan.resolved()["cells"]):
        got = cell["planned"] if recorded is None else recorded
        cells.append(CellCount(cell["policy"], cell["task"], cell["variant"], cell["planned"], got))
        totals.append(CellTotals("c", cell["policy"], cell["task"], "k", cell["variant"], got, got, 0, 0,
                                 errors if i == 0 else 0, 0, 0.0, 0.0))
    return Completeness(tuple(cells)), totals


def test_the_stamp_on_complete_partial_and_tampered_traversals():
    manifest = parse_manifest(metaworld_manifest(), "t")
    known = [*shipped_protocols().all(), manifest]
    plan = build_campaign(manifest, EXPERT)
    resolved = plan.resolved()
    stamp = campaign_stamp(resolved, *_counts(plan), known)
    assert stamp.reportable and stamp.policies == {"expert": "reportable"}
    assert stamp.label == f"reportable: mw-test@1 {manifest.content_hash()[:15]}…"
    partial = campaign_stamp(resolved, *_counts(plan, recorded=1), known)
    assert not partial.reportable
    assert partial.label == "diagnostic: expert: incomplete: 4 of 12 planned episodes recorded; 4 partial"
    errors = campaign_stamp(resolved, *_counts(plan, errors=1), known)
    assert errors.reasons == ("expert: 1 error episode(s) to re-run (--retry-errors)",)
    # tampered: the campaign claims the manifest but runs another horizon; or the manifest changed since
    other = build_campaign(with_knob(manifest, "horizon", parse_manifest({**metaworld_manifest(), "suites": [
        {"name": "mt", "tasks": [REACH, "metaworld/button-press-topdown@1"], "horizon": 60}]}, "t")), EXPERT)
    forged = other.resolved()
    forged["campaign"]["protocol"] = resolved["campaign"]["protocol"]
    tampered = campaign_stamp(forged, *_counts(other), known)
    assert tampered.reasons == (f"horizon of {REACH}: the manifest's 120, the campaign's 60",
                                "horizon of metaworld/button-press-topdown@1: the manifest's 120, the campaign's 60")
    edited = parse_manifest(metaworld_manifest(trials_per_task=4), "t")
    changed = campaign_stamp(resolved, *_counts(plan), [edited])
    assert changed.reasons == (f"manifest mw-test@1 hashes {edited.content_hash()}, not the "
                               f"{manifest.content_hash()} the campaign ran",)
    none = dict(resolved, campaign={k: v for k, v in resolved["campaign"].items() if k != "protocol"})
    assert campaign_stamp(none, *_counts(plan), known).label == (
        "diagnostic: no protocol: the campaign names no manifest (assay run --protocol NAME)")


def test_the_stamp_sees_fewer_trials_other_variants_and_unresized_images():
    manifest = parse_manifest(metaworld_manifest(), "t")
    known = [manifest]
    fewer = build_campaign(parse_manifest(metaworld_manifest(trials_per_task=2), "t"), EXPERT).resolved()
    fewer["campaign"]["protocol"] = build_campaign(manifest, EXPERT).resolved()["campaign"]["protocol"]
    plan_cells = Completeness(tuple(CellCount(c["policy"], c["task"], c["variant"], c["planned"], c["planned"])
                                    for c in fewer["cells"]))
    reasons = campaign_stamp(fewer, plan_cells, [], known).reasons
    assert reasons[0] == "trials per task: the manifest's 3, the campaign's 2"
    assert reasons[1] == ('episodes of metaworld/button-press-topdown@1 x instruction.form="question": 2 planned, the '
                          "manifest's 3")
    data = metaworld_manifest()
    data["variants"] = [{"label": "nominal"}]
    one = build_campaign(parse_manifest(data, "t"), EXPERT).resolved()
    one["campaign"]["protocol"] = fewer["campaign"]["protocol"]
    assert campaign_stamp(one, Completeness(()), [], known).reasons == (
        "variants: 2 of the manifest's 4 (task, variant) cells not planned (first metaworld/button-press-topdown@1 x "
        "question (no such variant planned))",)
    openpi = shipped_protocols().get("openpi-libero")
    plan = build_campaign(openpi, EXPERT, ("spatial",))
    stamp = campaign_stamp(plan.resolved(), *_counts(plan), [openpi])
    assert stamp.reasons == ("expert: receives 256x256 images, the protocol's policy 224x224 (the harness resizes with "
                             "resize_with_pad, which Assay does for a remote policy only)",)


def test_a_knob_switched_alone():
    manifest = parse_manifest(metaworld_manifest(), "t")
    other = parse_manifest(metaworld_manifest(prompt="task", replan_steps=5), "t")
    switched = with_knob(manifest, "prompt", other)
    assert switched.knobs.prompt == "task" and switched.knobs.replan_steps is None
    assert switched.content_hash() != manifest.content_hash()
    with pytest.raises(ManifestError, match=r"^unknown knob 'colour'; valid: horizon, replan, image, settle, prompt, "):
        with_knob(manifest, "colour", other)


def test_manifest_validation():
    data = metaworld_manifest()
    data["variants"].append({"label": "x", "factors": {}, "tasks": ["metaworld/push@1"]})
    with pytest.raises(ManifestError, match=r"names task metaworld/push@1, which no suite lists"):
        parse_manifest(data, "t")
    with pytest.raises(ManifestError, match=r"resize 'none' needs policy_input \[24, 24\] equal to render"):
        parse_manifest(metaworld_manifest(image={"cameras": ["front"], "render": [32, 32], "policy_input": [24, 24],
                                                 "resize": "none"}), "t")
    assert Manifest.model_validate(metaworld_manifest()).hash is None


def test_a_diff_of_protocols_over_different_tasks_is_one_line(tmp_path):
    from assay.protocols.diff import protocol_diff
    from assay.run import InlineExecutor
    from assay.store import Store

    p = {**metaworld_manifest(), "name": "mw-p"}
    q = {**metaworld_manifest(), "name": "mw-q", "suites": [{"name": "mt", "tasks": [REACH, "metaworld/push@1"],
                                                            "horizon": 120}]}
    with Store(tmp_path / "store", create=True) as store, pytest.raises(ManifestError) as caught:
        protocol_diff(parse_manifest(p, "p"), parse_manifest(q, "q"), [EXPERT], store, InlineExecutor(store.data_root))
    assert str(caught.value) == (
        "protocols mw-p@1 and mw-q@1 run different tasks (1 only in mw-p@1, 1 only in mw-q@1; mw-p@1 only: "
        "metaworld/button-press-topdown@1): a diff needs the same tasks on paired seeds")
    q["suites"] = p["suites"]
    q["variants"] = [{"label": "nominal"}]
    with Store(tmp_path / "store") as store, pytest.raises(ManifestError, match=r"^protocols mw-p@1 and mw-q@1 run "
                                                                             r"different variants \(4 and 2 "):
        protocol_diff(parse_manifest(p, "p"), parse_manifest(q, "q"), [EXPERT], store, InlineExecutor(store.data_root))
