"""Protocols run end to end on Meta-World: the stamp on a complete and a partial traversal, result bundles (round
trip, tamper detection, compare across bundles), and knob attribution with answers known by construction
(tests/protocol_policies.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import BundleError
from assay.metrics.bundle import SUMS, verify_bundle
from assay.protocols.diff import protocol_diff
from assay.run import InlineExecutor
from assay.spec import PolicySpec
from assay.spec.protocol import parse_manifest
from assay.store import Store

pytestmark = pytest.mark.sim
runner = CliRunner()
REACH = "metaworld/reach@1"
TESTS = Path(__file__).parent


def manifest_data(name: str = "mw-test", **knobs) -> dict:
    return {"schema_version": 1, "name": name, "version": 1, "backend": "metaworld",
            "suites": [{"name": "mt", "tasks": [REACH], "horizon": knobs.pop("horizon", 120)}],
            "knobs": {"trials_per_task": 3, "seed": 0, "settle_steps": 0, "prompt": "variant", "control_hz": 80.0,
                      "image": {"cameras": ["front"], "render": [32, 32], "policy_input": [32, 32], "resize": "none"},
                      **knobs},
            "variants": [{"label": "nominal"}, {"label": "question", "factors": {"instruction.form": "question"}}]}


def _cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.stderr.split())


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[Path, Path]:
    """A store with the test protocol run by the expert and by `random` (12 episodes each), and the manifest file."""
    root = tmp_path_factory.mktemp("lab")
    manifest = root / "mw.json"
    manifest.write_text(json.dumps(manifest_data()))
    for policy in ("expert", "random"):
        _cli("run", "--protocol", str(manifest), "--policy", policy, "--store", str(root / "store"), "--executor",
             "inline", "--allow-errors")
    return root / "store", manifest


def test_a_complete_traversal_is_reportable_and_a_partial_one_diagnostic(lab, tmp_path):
    store, manifest = lab
    doc = json.loads(_cli("results", "--store", str(store), "--campaign", "mw-test-v1-expert", "--json"))
    digest = parse_manifest(json.loads(manifest.read_text()), "m").content_hash()
    assert doc["stamp"]["status"] == "reportable" and doc["stamp"]["manifest_hash"] == digest
    assert "— reportable: mw-test@1" in " ".join(_cli("results", "--store", str(store), "--campaign",
                                                       "mw-test-v1-expert").split())
    assert (store / "protocols" / "mw-test.v1.json").is_file()  # the stamp reads the manifest from the store
    partial = tmp_path / "partial"
    shutil.copytree(store, partial)
    with Store(partial) as opened:
        keys = [r.key for r in opened.catalog.episodes(campaign="mw-test-v1-expert")][:2]
        opened.forget(keys)
    text = " ".join(_cli("results", "--store", str(partial), "--campaign", "mw-test-v1-expert").split())
    assert "(nominal only) — diagnostic" in text
    assert "diagnostic: expert: incomplete: 4 of 6 planned episodes recorded" in text or \
        "diagnostic: expert: incomplete:" in text
    doc = json.loads(_cli("results", "--store", str(partial), "--campaign", "mw-test-v1-expert", "--json"))
    assert doc["stamp"]["status"] == "diagnostic" and doc["stamp"]["reasons"][0].startswith("expert: incomplete: 4 of")


def test_a_bundle_round_trips_and_every_tampering_is_one_line(lab, tmp_path):
    store, _ = lab
    out = tmp_path / "bundle"
    _cli("bundle", "mw-test-v1-expert", "-o", str(out), "--store", str(store))
    bundle = verify_bundle(out)
    assert bundle.stamp.reportable and len(bundle.rows) == 6
    assert {(r["policy"], r["variant"], r["successes"], r["scored"]) for r in bundle.results["pooled"]} == {
        ("expert", "nominal", 3, 3), ("expert", 'instruction.form="question"', 3, 3)}
    row = bundle.rows[0]
    assert set(row) >= {"seed", "task", "variant", "protocol_hash", "outcome", "steps", "environment"}
    assert bundle.environments[row["environment"]]["packages"]["metaworld"]  # package versions per episode
    assert json.loads(_cli("bundle", "verify", str(out), "--json"))["sha256"] == bundle.sha256

    def tampered(name: str, change, fix_sums: bool = False) -> str:
        copy = tmp_path / f"t-{name}-{fix_sums}"
        shutil.copytree(out, copy)
        path = copy / name
        path.write_text(change(path.read_text()))
        if fix_sums:
            import hashlib

            sums = (copy / SUMS).read_text().splitlines()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            (copy / SUMS).write_text("".join(f"{digest}  {name}\n" if line.endswith(f"  {name}") else line + "\n"
                                             for line in sums))
        with pytest.raises(BundleError) as caught:
            verify_bundle(copy)
        assert "\n" not in str(caught.value)
        return str(caught.value)

    flip = lambda text: text.replace('"outcome":"success"', '"outcome":"timeout"', 1)  # noqa: E731
    assert "episodes.jsonl has SHA-256" in tampered("episodes.jsonl", flip)
    assert "results.json's cells are not what its episodes give" in tampered("episodes.jsonl", flip, fix_sums=True)
    assert tampered("results.json", lambda t: t.replace('"successes": 3', '"successes": 2', 1),
                    fix_sums=True).endswith("results.json's cells are not what its episodes give")
    extra = tmp_path / "extra"
    shutil.copytree(out, extra)
    (extra / "notes.txt").write_text("x")
    assert _error("bundle", "verify", str(extra)).endswith("notes.txt is not in SHA256SUMS (a file was added)")
    assert _error("bundle", "mw-test-v1-expert", "-o", str(out), "--store", str(store)).endswith(
        "exists and is not an empty directory; give a new one")


def test_compare_pairs_two_bundles_without_a_store(lab, tmp_path):
    store, _ = lab
    for name in ("expert", "random"):
        _cli("bundle", f"mw-test-v1-{name}", "-o", str(tmp_path / name), "--store", str(store))
    doc = json.loads(_cli("compare", "labA:expert", "labB:random", "--bundle", f"labA={tmp_path / 'expert'}",
                          "--bundle", f"labB={tmp_path / 'random'}", "--json"))
    suite = next(r for r in doc["comparisons"] if r["task"] == "suite")
    assert suite["pairing"] == "paired" and suite["pairs"] == 6 and suite["a_rate"] == 1.0


def _diff_manifests() -> tuple[dict, dict]:
    p = manifest_data("mw-p", horizon=100, replan_steps=10)
    q = manifest_data("mw-q", horizon=200, replan_steps=1, prompt="task", settle_steps=5,
                      image={"cameras": ["front"], "render": [48, 48], "policy_input": [48, 48], "resize": "none"})
    for data in (p, q):
        data["variants"] = [{"label": "question", "factors": {"instruction.form": "question"}}]
    return p, q


@pytest.mark.slow
@pytest.mark.extended  # over a minute; make test-extended
def test_knob_attribution_finds_the_known_answers(tmp_path):
    """Each constructed policy is sensitive to one knob (or to two only together); the diff must say exactly that."""
    from assay.policies import add_import_root

    add_import_root(TESTS)
    p, q = (parse_manifest(d, "t") for d in _diff_manifests())

    def entry(name: str, attr: str, **params) -> PolicySpec:
        return PolicySpec(name=name, entrypoint=f"protocol_policies:{attr}", params=params, version="1")

    policies = [PolicySpec(name="expert", builtin="expert"), entry("waiting", "WaitingExpert", wait=100),
                entry("chunked", "ChunkExpert", horizon=10), entry("sized", "SizeGatedExpert", width=48),
                entry("prompted", "PromptGatedExpert"), entry("both", "BothGatedExpert", width=48)]
    with Store(tmp_path / "store", create=True) as store:
        diffs = {d.policy: d for d in protocol_diff(p, q, policies, store, InlineExecutor(store.data_root),
                                                    video_fps=1.0)}
    known = {  # policy -> (the knob that matters and its effect, the total, the interaction)
        "expert": (None, 0.0, 0.0), "waiting": ("horizon", 1.0, 0.0), "chunked": ("replan", 1.0, 0.0),
        "sized": ("image", 1.0, 0.0), "prompted": ("prompt", 1.0, 0.0), "both": (None, 1.0, 1.0)}
    for name, (knob, total, interaction) in known.items():
        diff = diffs[name]
        assert [e.knob for e in diff.effects] == [knob] * (knob is not None) + [
            k for k in ("horizon", "image", "prompt", "replan", "settle") if k != knob], name
        assert {e.knob: e.effect.difference for e in diff.effects} == {
            k: (1.0 if k == knob else 0.0) for k in ("horizon", "replan", "image", "settle", "prompt")}, name
        # 3 pairs: all 3 discordant one way is McNemar p = 0.25, so no effect is significant at this n
        assert not any(e.matters for e in diff.effects) and diff.total.pairs == 3, name
        assert (diff.total.difference, diff.interaction) == (total, interaction), name
        assert diff.same == ("noise", "renderer") and diff.total.pairs == 3



def test_only_a_reportable_bundle_fills_the_reproduced_column(lab, tmp_path):
    store, _ = lab
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps({"schema_version": 2, "protocols": {"standin/reach": {
        "task_prefix": "metaworld/reach", "tasks": 1, "manifest": "mw-test@1:mt", "source": "primary",
        "fields": {"horizon": 120, "settle_steps": 0, "init_states": "sampled from the seed", "episodes_per_task": 3,
                   "camera_size": "32x32", "replan_steps": "whole chunk", "control_hz": 80}}},
        "results": {"standin/expert/reach": {"checkpoint": "the scripted expert", "protocol": "standin/reach",
                                             "rate": "100%", "n": 50, "citation": "this test", "source": "primary",
                                             "reproduced": None}}}))
    bundle = tmp_path / "b"
    _cli("bundle", "mw-test-v1-expert", "-o", str(bundle), "--store", str(store))
    ask = ["reproduce", "standin/expert/reach", "--campaign", "mw-test-v1-expert", "--registry", str(registry),
           "--store", str(store)]
    doc = json.loads(_cli(*ask, "--record", str(bundle), "--json"))
    assert doc["verdict"] == "reproduced" and doc["recorded"]["bundle_sha256"] == verify_bundle(bundle).sha256
    assert (doc["recorded"]["successes"], doc["recorded"]["trials"], doc["recorded"]["protocol"]) == (
        3, 3, "mw-test@1:mt")
    listed = json.loads(_cli("reproduce", "--list", "--registry", str(registry), "--store", str(store), "--json"))
    assert listed["results"]["standin/expert/reach"]["reproduced"]["policy"] == "expert"
    other = tmp_path / "random"
    _cli("bundle", "mw-test-v1-random", "-o", str(other), "--store", str(store))
    assert _error(*ask, "--record", str(other)).endswith(f"bundle {other} is of campaign 'mw-test-v1-random', not "
                                                         "'mw-test-v1-expert'")
    partial = tmp_path / "partial"
    shutil.copytree(store, partial)
    with Store(partial) as opened:
        opened.forget([r.key for r in opened.catalog.episodes(campaign="mw-test-v1-expert")][:1])
    _cli("bundle", "mw-test-v1-expert", "-o", str(tmp_path / "pb"), "--store", str(partial))
    refused = _error("reproduce", "standin/expert/reach", "--campaign", "mw-test-v1-expert", "--registry",
                     str(registry), "--store", str(partial), "--record", str(tmp_path / "pb"))
    assert refused.endswith("only a reportable run fills 'reproduced'")
    assert "is diagnostic: expert: incomplete" in refused
    kept = json.loads((partial / "reproduced.json").read_text())  # the complete run's record, copied; none added
    assert len(kept["standin/expert/reach"]) == 1
