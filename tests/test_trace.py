"""The per-layer trace in the data contract (issue 53): declared fields, their round trip through a step file,
the opt-in groups and the episode key, and that tracing changes no trajectory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from assay.errors import SpecError, TraceError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.closed_loop import rollout
from assay.run.recorder import EpisodeRecorder
from assay.sim import SupportsLayerTrace, perturbed
from assay.spec import NOMINAL, Variant, campaign_from_data, episode_key
from assay.spec.campaign import ResolvedPolicy
from assay.spec.policy import PolicySpec
from assay.store import Store, build_table
from assay.store.trace import (
    EPISODE_FACTS,
    LAYER_PREFIX,
    TRACE_FIELDS,
    TRACE_FORMAT,
    TRACE_VERSION_KEY,
    Kind,
    Layer,
    Stage,
    check_trace_columns,
    episode_trace,
    field_of,
    kind_of,
    read_trace,
)
from assay.testing import ConstantPolicy, FunctionEnv, fake_task
from tests.helpers import untimed
from tests.remote_support import jobs_for

CAMERA = {"name": "front", "width": 24, "height": 24}


class TracedEnv(FunctionEnv):
    """A fake backend with a per-layer trace: a controller target, physics contacts, and a field nobody declared."""

    def layer_trace(self, groups: frozenset[str]) -> dict[str, object]:
        fields: dict[str, object] = {"controller.target": np.array([self.t, 0.0, 1.0]), "physics.contacts": 2.0,
                                     "physics.invented": 1.0}
        if "physics.forces" in groups:
            fields["physics.contact_force"] = 3.5
        return fields


def _recorded(env_factory, task, trace=(), tracing=True) -> EpisodeRecorder:
    [job] = jobs_for(task, [7])
    job = dataclasses.replace(job, trace=tuple(trace))
    policy = ConstantPolicy(2.0, dim=task.action.dim)
    return rollout([perturbed(env_factory(task), NOMINAL)], policy, [job], tracing=tracing)[0]


def test_every_field_is_declared_once_with_a_layer_stage_and_kind():
    columns = [f.column for f in TRACE_FIELDS]
    assert len(columns) == len(set(columns))
    assert {f.layer for f in TRACE_FIELDS} == set(Layer) - {Layer.EXECUTOR}  # the executor's part is per episode
    for f in TRACE_FIELDS:
        assert field_of(f.column + ("x" if f.prefix else "")) is f
    assert field_of("layer.physics.invented") is None and field_of("observation.state") is None
    assert kind_of("trace.server_infer_ms") is Kind.TIMING and kind_of("trace.server_batch_size") is Kind.CONTEXT
    assert kind_of("trace.detected") is Kind.VALUE
    # within a step the policy decides before the controller commands, before physics, before the frame
    assert field_of("action").stage < field_of("layer.controller.target").stage < field_of(
        "layer.physics.contacts").stage < field_of("layer.controller.tracking_error").stage < field_of(
        "layer.render.mean").stage
    assert field_of("layer.controller.tracking_error").stage is Stage.TRACK
    with pytest.raises(TraceError, match="layer.physics.invented are not declared trace fields"):
        check_trace_columns({"layer.physics.invented": 1})


def test_a_backend_trace_is_recorded_as_declared_columns_and_round_trips():
    task = fake_task(horizon=5, action_dim=3)
    recorder = _recorded(TracedEnv, task, trace=("physics.forces",))
    columns = recorder.columns()
    layers = {c for c in columns if c.startswith(LAYER_PREFIX)}
    assert "layer.physics.invented" not in layers  # a backend's undeclared field is not part of the contract
    assert {"layer.controller.target", "layer.physics.contacts", "layer.physics.contact_force",
            "layer.action.applied", "layer.action.clipped", "layer.policy.start_ms", "layer.policy.rows",
            "layer.physics.start_ms", "layer.physics.ms", "layer.recorder.ms"} <= layers
    check_trace_columns(columns)
    assert columns["layer.controller.target"].shape == (5, 3)
    assert columns["layer.controller.target"][:, 0].tolist() == [1, 2, 3, 4, 5]
    assert columns["layer.action.clipped"].tolist() == [3.0] * 5  # the constant 2.0 is clipped to the box's 1.0
    np.testing.assert_array_equal(columns["layer.action.applied"], np.ones((5, 3)))
    starts = columns["layer.physics.start_ms"]
    assert np.all(np.diff(starts) > 0) and np.all(columns["layer.policy.start_ms"] <= starts)
    recorder.executor = {"batch_size": 1, "slot": 0, "setup_ms": 1.5, "idle_ms": 0.0, "pid": 1, "started_unix": 2.0}
    table = build_table(columns, {"episode_key": "k" * 24, **recorder.trace_metadata()})
    assert table.schema.metadata[TRACE_VERSION_KEY] == str(TRACE_FORMAT).encode()
    trace = episode_trace(pa.Table.from_batches(table.to_batches(), table.schema), "k" * 24)
    assert trace.steps == 5 and trace.groups == ("physics.forces",)
    assert set(trace.facts) - {"groups"} <= set(EPISODE_FACTS)
    assert trace.facts["executor.setup_ms"] == 1.5 and trace.facts["end_ms"] > trace.facts["reset.start_ms"]
    np.testing.assert_array_equal(trace.columns["layer.controller.target"], columns["layer.controller.target"])
    assert set(trace.of(Layer.CONTROLLER)) == {"layer.controller.target"}


def test_tracing_off_records_no_trace_and_the_same_episode():
    task = fake_task(horizon=4, action_dim=3)
    on, off = _recorded(TracedEnv, task), _recorded(TracedEnv, task, tracing=False)
    assert on.trajectory_hash() == off.trajectory_hash()
    assert not [c for c in off.columns() if c.startswith(LAYER_PREFIX)] and off.trace_metadata() == {}
    assert isinstance(TracedEnv(task), SupportsLayerTrace) and not isinstance(FunctionEnv(task), SupportsLayerTrace)


def test_a_step_file_without_a_trace_says_so_in_one_line():
    table = pa.table({"step": [0]}).replace_schema_metadata({b"schema_version": b"4"})
    with pytest.raises(TraceError, match=r"^episode kkkkkkkkkkkk recorded no per-layer trace \(its step file "
                                         r"predates trace format 1\): re-run its campaign into a new store"):
        episode_trace(table, "k" * 24)
    newer = table.replace_schema_metadata({TRACE_VERSION_KEY: str(TRACE_FORMAT + 1).encode()})
    with pytest.raises(TraceError, match="read it with a newer Assay"):
        episode_trace(newer, "k" * 24)


def test_trace_groups_are_checked_and_change_the_key_not_the_nominal_one():
    data = {"name": "c", "episodes": 1, "tasks": ["metaworld/reach"], "policies": ["expert"]}
    with pytest.raises(SpecError, match=r"unknown trace group 'physics\.everything'; valid: physics\.forces, "
                                        r"controller\.effort"):
        campaign_from_data({**data, "trace": ["physics.everything"]})
    plain = campaign_from_data(data)
    assert campaign_from_data({**data, "trace": []}).content_hash() == plain.content_hash()  # [] is unset
    traced = campaign_from_data({**data, "trace": ["physics.forces", "controller.effort", "physics.forces"]})
    assert traced.trace == ("controller.effort", "physics.forces")
    assert traced.content_hash() != plain.content_hash()
    task = fake_task()
    policy = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")
    nominal = episode_key(task, Variant(), policy, 3)
    assert episode_key(task, Variant(), policy, 3, trace=()) == nominal  # every key written so far stays
    assert episode_key(task, Variant(), policy, 3, trace=("physics.forces",)) != nominal


@pytest.mark.sim
def test_a_meta_world_campaign_records_every_layer(tmp_path: Path):
    data = {"name": "layers", "episodes": 2, "envs_per_worker": 2, "horizon": 12, "tasks": ["metaworld/pick-place"],
            "policies": ["expert"], "cameras": [CAMERA], "video_fps": 20,
            "variants": [{"control.latency": 1}], "trace": ["physics.forces", "controller.effort"]}
    with Store(tmp_path) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(tmp_path))
        records = sorted(store.catalog.episodes(campaign="layers"), key=lambda r: r.seed)
        trace = read_trace(store, records[0])
    present = {f.layer for c in trace.columns if (f := field_of(c)) is not None}
    assert present == set(Layer) - {Layer.EXECUTOR}
    c = trace.columns
    assert c["layer.controller.target"].shape == (12, 3) and c["layer.action.applied"].shape == (12, 4)
    assert c["layer.action.delay_steps"].tolist() == [1.0] * 12
    np.testing.assert_array_equal(c["layer.action.applied"][0], np.zeros(4))  # the latency's padding
    np.testing.assert_array_equal(c["layer.action.applied"][1:], np.clip(c["action"][:-1], -1, 1))
    assert np.all(c["layer.controller.tracking_error"] >= 0) and np.all(c["layer.physics.contacts"] >= 1)
    assert np.all(c["layer.physics.contact_force"] > 0) and np.all(c["layer.controller.effort"] > 0)
    frames = c["layer.render.frames"]  # 20 of 80 Hz: the video's frame every 4th step, and nothing between
    assert frames.tolist() == [1.0 if (s + 1) % 4 == 0 and s + 1 < 12 else 0.0 for s in range(12)]
    drawn = frames > 0
    assert np.all(c["layer.render.ms"][drawn] > 0) and np.all(np.isnan(c["layer.render.mean"][~drawn]))
    assert np.all((c["layer.render.mean"][drawn] > 0) & (c["layer.render.mean"][drawn] < 255))
    assert trace.facts["executor.batch_size"] == 2 and trace.facts["groups"] == ["controller.effort", "physics.forces"]
    assert json.loads(json.dumps(trace.facts)) == trace.facts


@pytest.mark.sim
def test_tracing_changes_no_trajectory_on_meta_world(tmp_path: Path):
    """Tracing reads the simulator and writes nothing: with and without the opt-in groups the episodes are the
    same, bit for bit (what the wall clock decides aside), under other keys."""
    base = {"episodes": 2, "horizon": 25, "tasks": ["metaworld/pick-place"], "policies": ["expert"]}
    with Store(tmp_path) as store:
        for name, extra in (("plain", {}), ("heavy", {"trace": ["physics.forces", "controller.effort"]})):
            run_campaign(prepare_campaign(campaign_from_data({"name": name, **base, **extra})), store,
                         InlineExecutor(tmp_path))
        plain, heavy = (sorted(store.catalog.episodes(campaign=n), key=lambda r: r.seed) for n in ("plain", "heavy"))
        for a, b in zip(plain, heavy, strict=True):
            assert a.key != b.key and a.trajectory_hash == b.trajectory_hash
            left, right = untimed(store.steps(a)), untimed(store.steps(b))
            shared = [n for n in left.column_names if n in right.column_names]
            assert set(right.column_names) - set(shared) == {"layer.physics.contact_force", "layer.controller.effort",
                                                             "layer.physics.max_contact_force",
                                                             "layer.physics.constraints",
                                                             "layer.physics.constraint_violation",
                                                             "layer.physics.solver_iterations"}
            assert left.select(shared).equals(right.select(shared))


def test_docs_list_every_declared_field_and_group():
    text = (Path(__file__).parent.parent / "docs" / "TRACE.md").read_text()
    from assay.spec.tracing import TRACE_GROUPS

    missing = [f.column for f in TRACE_FIELDS if f"`{f.column}{'*' if f.prefix else ''}`" not in text]
    assert missing == [] and all(group in text for group in TRACE_GROUPS)


@pytest.mark.libero
@pytest.mark.sim
def test_a_libero_episode_records_its_osc_controller_and_physics(tmp_path: Path):
    pytest.importorskip("libero", reason="assay[libero]")
    data = {"name": "libero-layers", "episodes": 1, "horizon": 6, "policies": ["expert"], "cameras": [],
            "tasks": ["libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"],
            "trace": ["physics.forces", "controller.effort"]}
    with Store(tmp_path) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(tmp_path))
        [record] = store.catalog.episodes(campaign="libero-layers")
        trace = read_trace(store, record)
    c = trace.columns
    assert c["layer.controller.target"].shape == (6, 3) and c["layer.action.applied"].shape == (6, 7)
    assert np.all(c["layer.controller.tracking_error"] >= 0) and np.all(c["layer.controller.effort"] > 0)
    assert set(np.unique(c["layer.controller.saturated"])) <= set(range(8))  # of the arm's 7 joints
    assert np.all(c["layer.physics.contacts"] > 0) and np.all(c["layer.physics.constraints"] > 0)
    assert np.all(c["layer.physics.warnings"] == 0)
