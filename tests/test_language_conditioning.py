"""Instruction conditioning for behaviour cloning: MiniLM embeddings in, language changes the action."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")

from assay.errors import AssayError  # noqa: E402
from assay.learning import Demo, TrainConfig, train_bc  # noqa: E402
from assay.learning.language import Conditioning, condition_rows  # noqa: E402
from assay.policies.bc import BCPolicy  # noqa: E402
from assay.policies.language import EMBED_DIM, embed, embed_each  # noqa: E402
from assay.policies.protocol import PolicyContext  # noqa: E402
from assay.sim import default_registry  # noqa: E402

REACH, PUSH = "push the puck to the goal", "reach the goal"


def _demo(task: str, instruction: str, sign: float, seed: int) -> Demo:
    states = np.random.default_rng(seed).normal(size=(40, 6))
    actions = np.full((40, 2), sign * 0.5)  # the task is in the words only: the states look alike
    return Demo(f"k{seed}", task, "h", "nominal", seed, "episode", states, actions, instruction)


@pytest.fixture(scope="module")
def demos():
    return [_demo("metaworld/push@1", REACH, 1.0, i) for i in range(3)] + \
           [_demo("metaworld/reach@1", PUSH, -1.0, 10 + i) for i in range(3)]


def test_embeddings_are_unit_vectors_cached_and_batch_invariant():
    one = embed_each([REACH])
    both = embed_each([PUSH, REACH, REACH])
    assert one.shape == (1, EMBED_DIM) and one.dtype == np.float32
    assert np.array_equal(both[1], one[0]) and np.array_equal(both[2], one[0])
    assert abs(float(np.linalg.norm(one[0])) - 1.0) < 1e-5
    assert float(one[0] @ both[0]) < 0.9  # different instructions, different vectors
    assert np.allclose(embed([REACH])[0], one[0], atol=1e-5)  # the router's batch embedding agrees


def test_condition_rows_repeat_per_frame(demos):
    tasks = sorted({d.task_id for d in demos})
    hot = condition_rows(demos, tasks, Conditioning.TASK)
    assert hot.shape == (240, 2) and hot[0].tolist() == [1.0, 0.0] and hot[-1].tolist() == [0.0, 1.0]
    rows = condition_rows(demos, tasks, "instruction")
    assert rows.shape == (240, EMBED_DIM) and np.array_equal(rows[0], embed_each([REACH])[0])
    with pytest.raises(AssayError, match="have none"):
        condition_rows([_demo("metaworld/push@1", "", 1.0, 0)], tasks, "instruction")
    with pytest.raises(AssayError, match="valid: task, instruction"):
        TrainConfig(conditioning="vision")


def test_an_instruction_conditioned_checkpoint_reads_the_words(demos, tmp_path):
    config = TrainConfig(seed=0, epochs=60, hidden=(32,), conditioning="instruction")
    a = train_bc(demos, config, tmp_path / "a.pt")
    b = train_bc(demos, config, tmp_path / "b.pt")
    assert Path(a.path).read_bytes() == Path(b.path).read_bytes()  # deterministic, embeddings included
    saved = torch.load(a.path, weights_only=True)["config"]
    assert saved["conditioning"] == "instruction" and saved["embed_dim"] == EMBED_DIM
    policy = BCPolicy(path=a.path)
    task = default_registry().get("metaworld/push@1")
    states = np.zeros((3, 6), np.float32)
    policy.reset(PolicyContext(task, (1, 2, 3), (REACH, PUSH, "sing a song")))
    actions = policy.act({"state": states, "env_ids": np.arange(3)})
    assert actions[0, 0] > 0.3 and actions[1, 0] < -0.3  # the words pick the behaviour, not the task id
    alone = policy.act({"state": states[1:2], "env_ids": np.array([1])})
    assert np.array_equal(alone[0], actions[1])  # a row never depends on its batch-mates


@pytest.mark.sim
@pytest.mark.slow
def test_semantic_profile_command_runs_end_to_end(tmp_path):
    """The experiment's command at toy size: demos, instruction-conditioned BC, three policies, every factor."""
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app

    report = tmp_path / "semantic.html"
    result = CliRunner().invoke(app, ["semantic-profile", "--tasks", "metaworld/reach@1", "--demos", "3", "--episodes",
                                      "1", "--epochs", "2", "--horizon", "60", "--store", str(tmp_path / "store"),
                                      "--report", str(report), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["checkpoint"]["tasks"] == ["metaworld/reach@1"] and document["nominal"]["expert"] == [1, 1]
    rows = document["retention"]
    assert {r["policy"] for r in rows} == {"language-bc", "router", "expert"} and len(rows) == 30
    assert document["expert_retention_exactly_one"] is True
    assert all(r["retention"] == 1.0 for r in rows if r["policy"] == "expert")
    assert "semantic retention exactly 1.0" in report.read_text()
