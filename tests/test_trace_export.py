"""``assay trace export``: Perfetto/Chrome trace JSON checked against the Trace Event Format's documented fields,
OTLP/JSON checked by parsing it into opentelemetry-proto's ``TracesData``, and the one-line refusals."""

from __future__ import annotations

import base64
import functools
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

import assay.run.executors as executors
from assay.cli.app import app
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.worker import Worker
from assay.spec import campaign_from_data
from assay.store import Store
from assay.store.trace import Layer, read_trace
from assay.store.trace_export import Exported, Mark, otlp, perfetto
from tests.test_integrity import CAMPAIGN as PENDULUM

runner = CliRunner()
TRACED = {"name": "traced", "episodes": 2, "envs_per_worker": 2, "horizon": 15, "tasks": ["metaworld/pick-place"],
          "policies": ["expert"], "cameras": [{"name": "front", "width": 24, "height": 24}], "video_fps": 20,
          "trace": ["physics.forces"]}
# The Trace Event Format (Chrome's "Trace Event Format" document, which Perfetto's JSON importer follows): the
# phases this exporter writes and the metadata events it names.
PHASES = {"X", "i", "C", "M"}
METADATA = {"process_name": "name", "process_sort_index": "sort_index", "thread_name": "name",
            "thread_sort_index": "sort_index"}


@pytest.fixture(scope="module")
def traced_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("traced")
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(TRACED)), store, InlineExecutor(root))
    return root


def _episodes(root: Path) -> list[Exported]:
    with Store(root) as store:
        records = sorted(store.catalog.episodes(campaign="traced"), key=lambda r: r.seed)
        return [Exported(r, read_trace(store, r), (Mark(5, "point of no return"),)) for r in records]


def check_trace_events(document: dict) -> dict[tuple[int, int], list[dict]]:
    """Assert the documented fields of every event; return the complete events by (pid, tid)."""
    assert set(document) >= {"traceEvents", "displayTimeUnit"} and document["displayTimeUnit"] in ("ms", "ns")
    json.dumps(document, allow_nan=False)  # JSON proper: no NaN or infinity anywhere
    spans: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for event in document["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["name"], str) and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in METADATA and METADATA[event["name"]] in event["args"], event
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0, event
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0, event
            spans[(event["pid"], event["tid"])].append(event)
        elif event["ph"] == "i":
            assert event["s"] in ("g", "p", "t"), event
        else:  # a counter: its values are numbers
            assert event["args"] and all(isinstance(v, (int, float)) for v in event["args"].values()), event
    return spans


def _nested(spans: list[dict]) -> bool:
    """Complete events on one thread nest or follow one another (a viewer draws them as one stack)."""
    open_ends: list[float] = []
    for span in sorted(spans, key=lambda s: (s["ts"], -s["dur"])):
        while open_ends and open_ends[-1] <= span["ts"] + 1e-3:
            open_ends.pop()
        if open_ends and span["ts"] + span["dur"] > open_ends[-1] + 1e-3:
            return False
        open_ends.append(span["ts"] + span["dur"])
    return True


@pytest.mark.sim
def test_perfetto_export_has_a_lane_per_layer_and_valid_events(traced_store: Path):
    episodes = _episodes(traced_store)
    document = perfetto(episodes)
    spans = check_trace_events(document)
    events = document["traceEvents"]
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(pid, layer.value) for pid in (1, 2) for layer in Layer}
    assert all(_nested(lane) for lane in spans.values())
    names = defaultdict(set)
    for e in events:
        names[e["cat"] if "cat" in e else e["ph"]].add(e["name"].split(" ")[0])
    assert {"act"} <= names["policy"] and {"step"} <= names["physics"] and {"draw"} <= names["render"]
    assert {"record"} <= names["recorder"] and {"set-up", "reset", "episode", "point"} <= names["executor"]
    assert {"replan", "action"} & names["action"] and {"command", "saturated"} & names["controller"]
    episode = [e for e in events if e["name"] == "episode"]
    assert len(episode) == 2 and all(e["args"]["renderer"].startswith(("osmesa", "egl", "glfw")) for e in episode)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"controller.tracking_error", "physics.contacts", "physics.penetration"}
    physics = [e for e in events if e.get("cat") == "physics" and e["ph"] == "X" and e["pid"] == 1]
    assert len(physics) == 15 and all("layer.physics.contact_force" in e["args"] for e in physics)
    # one clock: the two episodes of one batch start together; the policy's request precedes its step
    first = {pid: min(e["ts"] for e in events if e.get("cat") == "physics" and e["pid"] == pid) for pid in (1, 2)}
    acts = [e for e in events if e.get("cat") == "policy" and e["pid"] == 1]
    assert abs(first[1] - first[2]) < 1e6 and min(a["ts"] for a in acts) <= first[1]


@pytest.mark.sim
def test_otlp_export_parses_as_opentelemetry_traces_data(traced_store: Path):
    trace_pb2 = pytest.importorskip("opentelemetry.proto.trace.v1.trace_pb2",
                                    reason="opentelemetry-proto (the test extra) validates OTLP/JSON")
    from google.protobuf import json_format

    document = otlp(_episodes(traced_store))
    json.dumps(document, allow_nan=False)
    # OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping has base64 (the OTLP spec's one
    # exception to it): turn them back before protobuf's parser, which then checks every other field and type.
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = base64.b64encode(bytes.fromhex(span[name])).decode()
    parsed = json_format.Parse(json.dumps(document), trace_pb2.TracesData())
    spans = [s for r in parsed.resource_spans for sc in r.scope_spans for s in sc.spans]
    assert {s.name for s in spans} == {"episode", "executor.setup", "reset", "policy.act", "env.step", "render"}
    by_trace = defaultdict(dict)
    for span in spans:
        assert len(span.trace_id) == 16 and len(span.span_id) == 8
        assert 0 < span.start_time_unix_nano <= span.end_time_unix_nano
        by_trace[span.trace_id][span.span_id] = span
    assert len(by_trace) == 2
    for members in by_trace.values():
        roots = [s for s in members.values() if not s.parent_span_id]
        assert [r.name for r in roots] == ["episode"]
        assert "assay.renderer" in {a.key for a in roots[0].attributes}
        assert all(s.parent_span_id in members for s in members.values() if s.parent_span_id)
        assert {e.name for e in roots[0].events} >= {"point of no return"}
        steps = [s for s in members.values() if s.name == "env.step"]
        attributes = {a.key for a in steps[0].attributes}
        assert {"layer.controller.target", "layer.physics.contacts", "action"} <= attributes


@pytest.mark.sim
def test_the_cli_exports_an_episode_or_a_campaign_sample(traced_store: Path, tmp_path: Path):
    with Store(traced_store) as store:
        key = sorted(r.key for r in store.catalog.episodes(campaign="traced"))[0]
    out = tmp_path / "one.json"
    result = runner.invoke(app, ["trace", "export", key[:10], "--store", str(traced_store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert {pid for pid, _ in check_trace_events(json.loads(out.read_text()))} == {1}
    sample = tmp_path / "sample.json"
    result = runner.invoke(app, ["trace", "export", "--campaign", "traced", "--sample", "2", "--format", "otlp",
                                 "--store", str(traced_store), "-o", str(sample)])
    assert result.exit_code == 0, result.output
    assert len(json.loads(sample.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]) > 30


@pytest.mark.sim
def test_an_episode_key_that_matches_nothing_or_several_is_one_line(traced_store: Path):
    for key, said in (("zzzz", "no episode with key 'zzzz'"), ("", "key prefix '' is ambiguous")):
        result = runner.invoke(app, ["trace", "export", key, "--store", str(traced_store), "-o", "-"])
        assert result.exit_code == 2 and said in result.output and len(result.output.strip().splitlines()) == 1


def test_a_store_that_recorded_no_trace_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(executors, "Worker", functools.partial(Worker, tracing=False))  # as before tracing
    with Store(tmp_path) as store:
        run_campaign(prepare_campaign(campaign_from_data(PENDULUM)), store, InlineExecutor(tmp_path))
        key = next(iter(store.catalog.episodes(campaign=PENDULUM["name"]))).key
    name = PENDULUM["name"]
    for args in (["trace", "export", key, "-o", "-"], ["trace", "export", "--campaign", name, "-o", "-"],
                 ["trace", "diff", name, name]):
        result = runner.invoke(app, [*args, "--store", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert "recorded no per-layer trace (its step file predates trace format 1): re-run its campaign into a " \
               "new store" in result.output and len(result.output.strip().splitlines()) == 1
