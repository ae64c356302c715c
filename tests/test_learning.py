"""Behaviour cloning: determinism, the bc:PATH policy, data queries, beating random, leakage."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from assay.errors import SpecError  # noqa: E402
from assay.learning import DataQuery, DataQueryError, TrainConfig, contaminated, leakage_report, load_demos, train_bc  # noqa: E402
from assay.learning.runs import DEMO_SEED, EVAL_SEED, bc_spec, run_grid, score  # noqa: E402
from assay.policies import make_policy, resolve_policy  # noqa: E402
from assay.policies.bc import BCPolicy  # noqa: E402
from assay.spec import PolicySpec, policy_from_shorthand  # noqa: E402
from assay.store import Store  # noqa: E402

TASK = "metaworld/reach@1"
HORIZON = 100  # the expert reaches in ~50 steps; a short horizon keeps failures cheap


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("learning-store")
    with Store(root) as store:
        run_grid(store, "demos", [TASK], [PolicySpec(name="expert", builtin="expert")], 20, DEMO_SEED, HORIZON)
        yield store


@pytest.fixture(scope="module")
def checkpoint(demo_store, tmp_path_factory):
    demos = load_demos(demo_store, "campaign=demos")
    return train_bc(demos, TrainConfig(seed=0, epochs=30), tmp_path_factory.mktemp("ckpt") / "bc.pt")


def _weights(path: str) -> dict[str, bytes]:
    state = torch.load(path, weights_only=True)["state_dict"]
    return {k: v.numpy().tobytes() for k, v in state.items()}


@pytest.mark.sim
def test_training_is_deterministic_for_a_seed(demo_store, tmp_path):
    demos = load_demos(demo_store, "campaign=demos")[:5]
    config = TrainConfig(seed=7, epochs=3, hidden=(32, 32))
    a, b = train_bc(demos, config, tmp_path / "a.pt"), train_bc(demos, config, tmp_path / "b.pt")
    other = train_bc(demos, TrainConfig(seed=8, epochs=3, hidden=(32, 32)), tmp_path / "c.pt")
    assert _weights(a.path) == _weights(b.path)
    assert Path(a.path).read_bytes() == Path(b.path).read_bytes()
    assert a.version == b.version and a.final_loss == b.final_loss
    assert _weights(a.path) != _weights(other.path) and other.version != a.version
    assert torch.get_num_threads() >= 1 and not torch.are_deterministic_algorithms_enabled()  # settings restored


@pytest.mark.sim
def test_bc_beats_random_on_reach(demo_store, checkpoint):
    assert checkpoint.demos == 20 and checkpoint.tasks == (TASK,)
    policies = [bc_spec("bc", Path(checkpoint.path)), PolicySpec(name="random", builtin="random")]
    _, records = run_grid(demo_store, "bc-vs-random", [TASK], policies, 20, EVAL_SEED, HORIZON)
    bc, rnd = score(records, "bc"), score(records, "random")
    assert bc.trials == rnd.trials == 20
    # beats random: the two 95% intervals do not overlap (30 epochs on 20 demos: ~60% on held-out goals)
    assert bc.successes >= 8 and bc.low > rnd.high, (bc, rnd)
    # held-out seeds: no evaluation episode is in the training data, and the policy says so per episode
    assert leakage_report(records) == {str(Path(checkpoint.path).resolve()): []}
    assert all(r.policy_info == {"task_known": True, "trained_on_seed": False} for r in records if r.policy_name == "bc")


@pytest.mark.sim
def test_leakage_flags_evaluation_on_training_seeds(demo_store, checkpoint):
    _, records = run_grid(demo_store, "bc-on-train-seeds", [TASK], [bc_spec("bc", Path(checkpoint.path))], 3,
                          DEMO_SEED, HORIZON)
    flagged = leakage_report(records)[str(Path(checkpoint.path).resolve())]
    assert sorted(flagged) == sorted(r.key for r in records) and len(flagged) == 3
    assert all(r.policy_info["trained_on_seed"] for r in records)
    other_variant = [{"task_id": r.task_id, "variant_key": "elsewhere", "seed": r.seed} for r in records]
    assert contaminated(records, other_variant) == []  # same seed, another variant: not the same episode


@pytest.mark.sim
def test_leakage_across_horizons_is_caught(demo_store, checkpoint):
    """Trained at horizon 100, evaluated on the same seeds at horizon 60: the same scenes (the task hash
    differs, which on b6a562f let every contaminated seed pass as clean). ``results`` and ``assay leakage``
    say so."""
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app

    _, records = run_grid(demo_store, "bc-other-horizon", [TASK], [bc_spec("bc", Path(checkpoint.path))], 3,
                          DEMO_SEED, 60)
    trained = {p["task_hash"] for p in torch.load(checkpoint.path, weights_only=True)["provenance"]}
    assert {r.task_hash for r in records}.isdisjoint(trained)  # another task hash ...
    assert sorted(leakage_report(records)[str(Path(checkpoint.path).resolve())]) == sorted(r.key for r in records)
    assert all(r.policy_info["trained_on_seed"] for r in records)  # ... the same scenes
    runner = CliRunner()
    found = runner.invoke(app, ["leakage", checkpoint.path, "--campaign", "bc-other-horizon", "--store",
                                str(demo_store.root), "--json"])
    assert found.exit_code == 0, found.output
    document = json.loads(found.stdout)
    assert document["contaminated"] == 3 and document["episodes"] == 3 and sorted(document["keys"]) == sorted(
        r.key for r in records)
    shown = runner.invoke(app, ["results", "--campaign", "bc-other-horizon", "--store", str(demo_store.root), "--json"])
    assert json.loads(shown.stdout)["leakage"][0]["contaminated"] == 3
    text = runner.invoke(app, ["results", "--campaign", "bc-other-horizon", "--store", str(demo_store.root)]).output
    assert "contaminated" in text and "leakage" in text
    missing = runner.invoke(app, ["leakage", checkpoint.path, "--campaign", "nope", "--store", str(demo_store.root)])
    assert missing.exit_code == 2 and "no campaign 'nope'" in missing.output


@pytest.mark.sim  # the checkpoint fixture trains on Meta-World demos
def test_bc_shorthand_and_content_version(checkpoint, tmp_path):
    spec = policy_from_shorthand(f"bc:{checkpoint.path}")
    assert spec.builtin == "bc" and spec.params == {"path": checkpoint.path} and spec.name == "bc-bc"
    version = resolve_policy(spec).version
    digest = hashlib.sha256(Path(checkpoint.path).read_bytes()).hexdigest()[:12]
    assert version == f"builtin-1-c{digest}"
    copy = tmp_path / "copy.pt"
    copy.write_bytes(Path(checkpoint.path).read_bytes())
    assert resolve_policy(policy_from_shorthand(f"bc:{copy}")).version == version  # contents, not the path
    with pytest.raises(SpecError, match="does not exist"):
        resolve_policy(policy_from_shorthand(f"bc:{tmp_path / 'missing.pt'}"))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SpecError, match="not a readable bc checkpoint"):
        make_policy(policy_from_shorthand(f"bc:{tmp_path / 'junk.pt'}"))


@pytest.mark.sim  # the checkpoint fixture trains on Meta-World demos
def test_bc_rows_are_independent_of_batch(checkpoint):
    policy = BCPolicy(path=checkpoint.path)
    states = np.random.default_rng(0).normal(size=(11, policy.state_dim)).astype(np.float32)
    whole = policy.predict(states)
    assert np.array_equal(np.concatenate([policy.predict(states[i:i + 1]) for i in range(11)]), whole)
    assert whole.shape == (11, 4) and np.all(np.abs(whole) <= 1.0)


def test_data_query_parsing():
    query = DataQuery.parse("campaign=a|b, task=metaworld/reach@1, outcome=any, demos=demos")
    assert query == DataQuery(("a", "b"), ("metaworld/reach@1",), (), "any", "demos")
    for bad, message in [("task=x", "names no 'campaign=' and no 'demos='"), ("campaign", "KEY=VALUE"),
                         ("campaign=a,colour=red", "KEY one of campaign"), ("campaign=a,outcome=great", "outcome must be")]:
        with pytest.raises(DataQueryError, match=message):
            DataQuery.parse(bad)


@pytest.mark.sim
def test_data_query_selects_nothing_is_an_error(demo_store):
    with pytest.raises(DataQueryError, match="selects no episode"):
        load_demos(demo_store, "campaign=demos,task=metaworld/pick-place@1")
    with pytest.raises(DataQueryError, match="demos folder"):
        load_demos(demo_store, "campaign=demos,demos=nowhere")


@pytest.mark.sim  # the checkpoint fixture trains on Meta-World demos
def test_bc_passes_the_conformance_kit(checkpoint):
    from assay.sim import default_registry
    from assay.testing import check_policy

    check_policy(BCPolicy(path=checkpoint.path), default_registry().get(TASK), bounded=True)


@pytest.mark.sim
def test_leakage_by_perception_flags_an_imperceptible_variant_and_counts_only_the_checkpoints_own(
        demo_store, checkpoint, tmp_path):
    """Issue 36: a state policy evaluated on its training seeds under ``light.intensity: 0.5`` replays its
    training episodes step for step; the variant key used to make them "new scenes" (0 flagged), and the
    expert's episodes on the same seeds used to be counted as the checkpoint's."""
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app
    from assay.learning.leakage import Perception, leakage, perception

    policies = [bc_spec("bc", Path(checkpoint.path)), PolicySpec(name="expert", builtin="expert")]
    _, records = run_grid(demo_store, "bc-dim-light", [TASK], policies, 2, DEMO_SEED, HORIZON,
                          variants=[{"light.intensity": 0.5}, {"action.noise": 0.3}])
    bc = [r for r in records if r.policy_name == "bc"]
    assert perception(bc[0].policy_spec) == Perception(visual=False, semantic=False)  # its contract: state only
    found = leakage(records, checkpoint.path, demo_store)
    dim = sorted(r.key for r in bc if r.variant_name == "light.intensity=0.5")
    assert found.episodes == 4 and sorted(found.keys) == dim  # the noisy variant changes what it sees: clean
    assert found.perceives == "behavioral factors only"
    result = CliRunner().invoke(app, ["leakage", checkpoint.path, "--campaign", "bc-dim-light", "--store",
                                      str(demo_store.root), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["episodes"], document["contaminated"]) == (4, 2)  # the expert's 4 episodes are not counted
    assert document["by_cell"] == {f"bc | {TASK} | light.intensity=0.5": 2}
    nobody = CliRunner().invoke(app, ["leakage", str(tmp_path / "other.pt"), "--campaign", "bc-dim-light",
                                      "--store", str(demo_store.root)])
    assert nobody.exit_code == 2 and "no episode here ran the checkpoint" in nobody.output
    # a camera policy perceives the light, an instruction-conditioned one the words
    assert Perception(visual=True, semantic=False).sees("visual") and not Perception(semantic=False).sees("semantic")
