"""Episode traces in the formats engineers already read: Chrome/Perfetto trace events and OTLP spans.

* :func:`perfetto`: the Trace Event Format's JSON object (``traceEvents``, ``displayTimeUnit``,
  ``otherData``), which Perfetto UI and ``chrome://tracing`` open. An episode is a process (``pid``), each
  layer a thread of it (``tid``, named by ``thread_name`` metadata events, ordered by ``thread_sort_index``);
  what took time is a complete event (``ph: X``, ``ts``/``dur`` in microseconds), the executor's set-up and
  reset, each policy request, each step's physics, drawing and recording; what happened at an instant is an
  instant event (``ph: i``: a replan, a clipped action, a safety verdict, a saturated controller, a simulator
  warning, success, a caller's marks such as the point of no return); numbers over time are counter events
  (``ph: C``: tracking error, contacts, penetration). Episodes sit on one clock: their batches' start times.
* :func:`otlp`: OpenTelemetry's ``TracesData`` as OTLP/JSON (``resourceSpans`` → ``scopeSpans`` → ``spans``;
  ids in hex, times as nanosecond strings, attributes as ``AnyValue``): a trace per episode, its root span
  the episode, children for set-up, reset, each policy request and each step (the step's value fields as
  attributes, its drawing a child span), marks as span events.

The timestamps are the episode's wall clock (``executor.started_unix`` + the batch's clock); NaN values are
left out (JSON has none).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.store.provenance import renderer_label, renderer_of
from assay.store.records import EpisodeRecord
from assay.store.trace import LAYER_PREFIX, TRACE_FIELDS, TRACE_FORMAT, EpisodeTrace, Kind, Layer, kind_of

FORMATS = ("perfetto", "otlp")
LANES = tuple(Layer)  # one thread per layer, in the order a step passes through them


@dataclass(frozen=True)
class Mark:
    """Something a caller knows about an episode's step (the point of no return): drawn at that step."""

    step: int
    label: str


@dataclass(frozen=True)
class Exported:
    """One episode to export: its catalog record, its trace and its marks."""

    record: EpisodeRecord
    trace: EpisodeTrace
    marks: tuple[Mark, ...] = ()


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


class _Steps:
    """An episode's per-step times (ms on its batch's clock) and values, read once."""

    def __init__(self, trace: EpisodeTrace) -> None:
        c, n = trace.columns, trace.steps
        nan = np.full(n, np.nan)
        self.n = n
        self.start = np.asarray(c.get(LAYER_PREFIX + "physics.start_ms", nan), dtype=np.float64)
        self.physics = np.asarray(c.get(LAYER_PREFIX + "physics.ms", nan), dtype=np.float64)
        self.render = np.nan_to_num(np.asarray(c.get(LAYER_PREFIX + "render.ms", np.zeros(n)), dtype=np.float64))
        self.record = np.nan_to_num(np.asarray(c.get(LAYER_PREFIX + "recorder.ms", np.zeros(n)), dtype=np.float64))
        self.columns = c

    def value(self, column: str, step: int) -> Any:
        """The column's value at ``step`` as JSON data (a list for a vector), None when missing or NaN."""
        values = self.columns.get(column)
        if values is None:
            return None
        value = values[step]
        if isinstance(value, np.ndarray):
            return [round(float(v), 9) for v in value] if np.all(np.isfinite(value)) else None
        if isinstance(value, str):
            return value or None
        number = _number(value)
        return None if number is None else round(number, 9)

    def values(self, step: int, kinds: tuple[Kind, ...] = (Kind.VALUE,)) -> dict[str, Any]:
        """Every trace column of ``kinds`` at ``step``, by column name (NaN left out)."""
        found = {}
        for column in self.columns:
            if kind_of(column) in kinds:
                value = self.value(column, step)
                if value is not None:
                    found[column] = value
        return found

    def requests(self) -> list[tuple[int, int]]:
        """(chunk id, first step) of every policy request the episode executed."""
        chunks = self.columns.get("chunk_id")
        if chunks is None:
            return []
        firsts: dict[int, int] = {}
        for step, chunk in enumerate(chunks):
            firsts.setdefault(int(chunk), step)
        return sorted(firsts.items())


def _facts(trace: EpisodeTrace, name: str, default: float = 0.0) -> float:
    value = trace.facts.get(name)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else default


def _origins(episodes: Sequence[Exported]) -> list[float]:
    """Each episode's batch clock start in µs from the earliest one's, the executor's set-up before it."""
    starts = [_facts(e.trace, "executor.started_unix") for e in episodes]
    setups = [_facts(e.trace, "executor.setup_ms") for e in episodes]
    first = min(s - setup / 1000.0 for s, setup in zip(starts, setups, strict=True)) if episodes else 0.0
    return [(s - first) * 1e6 for s in starts]


def renderer(record: EpisodeRecord) -> str | None:
    """What drew the episode's frames (``backend: GL renderer``), None when it drew none."""
    info = renderer_of(record.provenance)
    return renderer_label(info) if info is not None else None


def _label(record: EpisodeRecord) -> str:
    return (f"{record.policy_name} · {record.task_id} · {record.variant_name} · seed {record.seed} · "
            f"{record.outcome.value} ({record.key[:12]})")


def perfetto(episodes: Sequence[Exported]) -> dict[str, Any]:
    """The episodes' traces as a Trace Event Format JSON object (see the module docstring)."""
    events: list[dict[str, Any]] = []
    for pid, (exported, origin) in enumerate(zip(episodes, _origins(episodes), strict=True), start=1):
        events.extend(_episode_events(exported, pid, origin))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "assay", "trace_format": str(TRACE_FORMAT),
                          "episodes": ", ".join(e.record.key for e in episodes)}}


def _episode_events(exported: Exported, pid: int, origin: float) -> list[dict[str, Any]]:
    record, trace = exported.record, exported.trace
    steps = _Steps(trace)
    tid = {layer: i + 1 for i, layer in enumerate(LANES)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": _label(record)}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    for layer in LANES:
        events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid[layer], "args": {"name": layer.value}},
                   {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid[layer],
                    "args": {"sort_index": tid[layer]}}]

    def at(ms: float) -> float:  # at least 0: the clocks' sub-microsecond rounding never puts an event before it
        return round(max(origin + ms * 1000.0, 0.0), 3)

    def span(layer: Layer, name: str, start_ms: float, dur_ms: float, args: dict[str, Any]) -> None:
        if math.isfinite(start_ms) and math.isfinite(dur_ms):
            events.append({"ph": "X", "name": name, "cat": layer.value, "pid": pid, "tid": tid[layer],
                           "ts": at(start_ms), "dur": round(max(dur_ms, 0.0) * 1000.0, 3), "args": args})

    def instant(layer: Layer, name: str, ms: float, args: dict[str, Any], scope: str = "t") -> None:
        if math.isfinite(ms):
            events.append({"ph": "i", "s": scope, "name": name, "cat": layer.value, "pid": pid, "tid": tid[layer],
                           "ts": at(ms), "args": args})

    setup = _facts(trace, "executor.setup_ms")
    executor = {k: v for k, v in trace.facts.items() if k.startswith("executor.")}
    span(Layer.EXECUTOR, "set-up (policy and environments)", -setup, setup, executor)
    span(Layer.EXECUTOR, "reset", _facts(trace, "reset.start_ms"), _facts(trace, "reset.ms"), {"seed": record.seed})
    span(Layer.EXECUTOR, "episode", _facts(trace, "reset.start_ms"),
         _facts(trace, "end_ms") - _facts(trace, "reset.start_ms"),
         {"outcome": record.outcome.value, "steps": record.steps,
          **({"renderer": renderer(record)} if renderer(record) else {})})
    latency = trace.columns.get("policy_latency_ms")
    requested = trace.columns.get(LAYER_PREFIX + "policy.start_ms")
    for chunk, first in steps.requests():
        args = {"chunk_id": chunk, "first_step": first, **steps.values(first, (Kind.VALUE, Kind.CONTEXT, Kind.TIMING))}
        args = {k: v for k, v in args.items() if k.startswith(("trace.", LAYER_PREFIX + "policy.", "action"))
                or k in ("chunk_id", "first_step", "policy_latency_ms")}
        if requested is not None and latency is not None:
            span(Layer.POLICY, f"act (request {chunk})", float(requested[first]), float(latency[first]), args)
    for step in range(steps.n):
        start = float(steps.start[step])
        physics_end = start + float(steps.physics[step])
        values = steps.values(step)
        span(Layer.PHYSICS, f"step {step}", start, float(steps.physics[step]),
             {"step": step, **{k: v for k, v in values.items() if k.startswith(LAYER_PREFIX + "physics.")}})
        if steps.render[step] > 0 or (steps.value(LAYER_PREFIX + "render.frames", step) or 0) > 0:
            span(Layer.RENDER, f"draw {step}", physics_end, float(steps.render[step]),
                 {"step": step, **{k: v for k, v in values.items() if k.startswith(LAYER_PREFIX + "render.")}})
        span(Layer.RECORDER, f"record {step}", physics_end + float(steps.render[step]), float(steps.record[step]),
             {"step": step})
        action = {k: v for k, v in values.items() if k.startswith((LAYER_PREFIX + "action.", "info.safety."))
                  or k == "chunk_index"}
        instant(Layer.ACTION, "replan" if values.get("chunk_index") == 0 else "action", start, {"step": step,
                                                                                              **action})
        controller = {k: v for k, v in values.items() if k.startswith(LAYER_PREFIX + "controller.")}
        if controller:
            instant(Layer.CONTROLLER, "saturated" if (controller.get(LAYER_PREFIX + "controller.saturated") or 0) > 0
                    else "command", start, {"step": step, **controller})
        for name in ("controller.tracking_error", "physics.contacts", "physics.penetration"):
            value = values.get(LAYER_PREFIX + name)
            if isinstance(value, float):
                events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": at(physics_end),
                               "args": {"value": value}})
        if (values.get(LAYER_PREFIX + "physics.warnings") or 0) > 0:
            instant(Layer.PHYSICS, "simulator warning", physics_end, {"step": step})
    end_of = {s: float(steps.start[s]) + float(steps.physics[s]) for s in range(steps.n)}
    if record.success_step is not None and record.success_step in end_of:
        instant(Layer.EXECUTOR, "success", end_of[record.success_step], {"step": record.success_step}, "p")
    for mark in exported.marks:
        if mark.step in end_of:
            instant(Layer.EXECUTOR, mark.label, float(steps.start[mark.step]), {"step": mark.step}, "p")
    return events


def _hex(*parts: str, length: int) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"doubleValue": float(v)} for v in value]}}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _attributes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [_attribute(k, v) for k, v in values.items() if v is not None]


def otlp(episodes: Sequence[Exported], service: str = "assay") -> dict[str, Any]:
    """The episodes' traces as OTLP/JSON ``TracesData`` (see the module docstring)."""
    spans = [span for exported in episodes for span in _episode_spans(exported)]
    resource = {"attributes": _attributes({"service.name": service, "assay.trace_format": TRACE_FORMAT})}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [
        {"scope": {"name": "assay.trace", "version": str(TRACE_FORMAT)}, "spans": spans}]}]}


def _episode_spans(exported: Exported) -> list[dict[str, Any]]:
    record, trace = exported.record, exported.trace
    steps = _Steps(trace)
    trace_id = _hex(record.key, length=32)
    root_id = _hex(record.key, "episode", length=16)
    origin_ns = _facts(trace, "executor.started_unix") * 1e9

    def ns(ms: float) -> str:
        return str(int(round(origin_ns + ms * 1e6)))

    def span(name: str, span_id: str, parent: str, start_ms: float, dur_ms: float, values: Mapping[str, Any],
             events: Sequence[dict[str, Any]] = (), error: str | None = None) -> dict[str, Any]:
        made = {"traceId": trace_id, "spanId": span_id, "name": name, "kind": 1,
                "startTimeUnixNano": ns(start_ms), "endTimeUnixNano": ns(start_ms + max(dur_ms, 0.0)),
                "attributes": _attributes(values), "events": list(events)}
        if parent:
            made["parentSpanId"] = parent
        if error is not None:
            made["status"] = {"code": 2, "message": error}
        return made

    end_of = {s: float(steps.start[s]) + float(steps.physics[s]) for s in range(steps.n)
              if math.isfinite(float(steps.start[s]))}
    marks = [(record.success_step, "success")] if record.success_step is not None else []
    marks += [(m.step, m.label) for m in exported.marks]
    events = [{"timeUnixNano": ns(end_of[step]), "name": label, "attributes": _attributes({"step": step})}
              for step, label in marks if step in end_of]
    begin, end = _facts(trace, "reset.start_ms"), _facts(trace, "end_ms")
    spans = [span("episode", root_id, "", begin, end - begin,
                  {"assay.episode_key": record.key, "assay.policy": record.policy_name, "assay.task": record.task_id,
                   "assay.variant": record.variant_name, "assay.seed": record.seed,
                   "assay.outcome": record.outcome.value, "assay.steps": record.steps,
                   "assay.renderer": renderer(record),
                   **{f"assay.{k}": v for k, v in trace.facts.items() if isinstance(v, (int, float, str))}},
                  events, record.reason if record.outcome.value == "error" else None)]
    setup = _facts(trace, "executor.setup_ms")
    if setup > 0:
        spans.append(span("executor.setup", _hex(record.key, "setup", length=16), root_id, -setup, setup, {}))
    spans.append(span("reset", _hex(record.key, "reset", length=16), root_id, begin, _facts(trace, "reset.ms"),
                      {"assay.seed": record.seed}))
    latency = trace.columns.get("policy_latency_ms")
    requested = trace.columns.get(LAYER_PREFIX + "policy.start_ms")
    if latency is not None and requested is not None:
        for chunk, first in steps.requests():
            own = {k: v for k, v in steps.values(first, (Kind.VALUE, Kind.CONTEXT, Kind.TIMING)).items()
                   if k.startswith(("trace.", LAYER_PREFIX + "policy.")) or k in ("action", "policy_latency_ms")}
            if math.isfinite(float(requested[first])):
                spans.append(span("policy.act", _hex(record.key, "act", str(chunk), length=16), root_id,
                                  float(requested[first]), float(latency[first]),
                                  {"assay.chunk_id": chunk, "assay.first_step": first, **own}))
    for step, physics_end in end_of.items():
        step_id = _hex(record.key, "step", str(step), length=16)
        values = {"assay.step": step, **steps.values(step)}
        spans.append(span("env.step", step_id, root_id, float(steps.start[step]),
                          physics_end - float(steps.start[step]) + steps.render[step] + steps.record[step], values))
        if steps.render[step] > 0:
            spans.append(span("render", _hex(record.key, "render", str(step), length=16), step_id, physics_end,
                              float(steps.render[step]), {"assay.step": step}))
    return spans


def schema() -> list[dict[str, Any]]:
    """The declared trace fields as JSON data (exports carry them beside the data)."""
    return [f.to_dict() for f in TRACE_FIELDS]
