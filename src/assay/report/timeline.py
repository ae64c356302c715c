"""An episode's per-layer timeline: one lane per layer, with its series, events and frames, the point of no return
marked; as JSON data (the dashboard's ``/timeline`` page draws it) and as an inline SVG (the report's section).

A lane holds its layer's numeric fields per step (``store.trace``: the policy's latency and own account, the
action processing's clipping and noise, the controller's tracking error and saturation, physics' contacts and
penetration, the frames' mean and drawing time, the recorder's time), its events (a replan, a safety verdict,
a saturated command, a simulator warning, a frame drawn) and, for the executor, the episode's trace facts.
Marks cross every lane: the step where the episode first succeeded, the point of no return of a failure
(``assay failures ponr``), and the first step of each recorded event (``info.*`` flags: grasped, dropped, ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from markupsafe import Markup

from assay.errors import StoreError
from assay.report.figures import _pyplot, _svg
from assay.report.markup import figure, html, join
from assay.store import EpisodeRecord, Store
from assay.store.trace import EpisodeTrace, Kind, Layer, field_of, kind_of, read_trace
from assay.store.trace_export import renderer

MAX_POINTS = 1000  # a lane's series are thinned to at most this many steps
MAX_EVENTS = 60  # per lane: beyond it, events are a series, not marks
# per lane: (column, event label) for steps where the column is above 0
EVENTS = {Layer.ACTION: (("layer.action.clipped", "clipped"), ("info.safety.nan", "safety: nan"),
                         ("info.safety.limit", "safety: limit"), ("info.safety.workspace", "safety: workspace")),
          Layer.CONTROLLER: (("layer.controller.saturated", "saturated"),),
          Layer.PHYSICS: (("layer.physics.warnings", "simulator warning"),),
          Layer.RENDER: (("layer.render.frames", "frame"),)}
# not series: clock readings, and what the lane shows as events (frames drawn, replans)
SKIPPED = ("layer.policy.start_ms", "layer.physics.start_ms", "layer.render.frames", "chunk_id", "chunk_index")


def _rows(steps: int) -> np.ndarray:
    stride = max(1, math.ceil(steps / MAX_POINTS))
    return np.arange(0, steps, stride)


def _series(values: np.ndarray, rows: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(float(v)) else round(float(v), 6) for v in np.asarray(values)[rows]]


def _onsets(values: np.ndarray) -> list[int]:
    """Steps where a flag turns on (above 0 after not)."""
    on = np.nan_to_num(np.asarray(values, dtype=np.float64)) > 0
    return [int(s) for s in np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))]


def lanes(trace: EpisodeTrace) -> list[dict[str, Any]]:
    """One lane per layer: its numeric series (thinned), its events and, for the executor, its facts."""
    rows = _rows(trace.steps)
    found: list[dict[str, Any]] = []
    for layer in Layer:
        series: dict[str, list[float | None]] = {}
        for column, values in trace.columns.items():
            declared = field_of(column)
            if declared is None or declared.layer is not layer or column in SKIPPED or values.dtype == object:
                continue
            numbers = np.asarray(values, dtype=np.float64) if values.ndim == 1 else np.zeros(0)
            if kind_of(column) in (Kind.VALUE, Kind.TIMING) and np.any(np.nan_to_num(numbers) != 0):
                series[column] = _series(numbers, rows)  # a lane shows what moved, not zeros
        events: list[dict[str, Any]] = []
        if layer is Layer.POLICY and "chunk_index" in trace.columns:
            replans = [int(s) for s in np.flatnonzero(np.asarray(trace.columns["chunk_index"]) == 0)]
            if len(replans) < trace.steps:  # an answer per step is no event
                events += [{"step": s, "label": "replan"} for s in replans]
        for column, label in EVENTS.get(layer, ()):
            flags = trace.columns.get(column)
            if flags is not None:
                steps = np.flatnonzero(np.nan_to_num(np.asarray(flags, dtype=np.float64)) > 0)
                events += [{"step": int(s), "label": label} for s in steps]
        events.sort(key=lambda e: e["step"])
        facts = {k: v for k, v in trace.facts.items() if k.startswith(("executor.", "reset.", "end_ms"))} \
            if layer is Layer.EXECUTOR else {}
        found.append({"layer": layer.value, "series": series, "events": events[:MAX_EVENTS],
                      "events_left_out": max(0, len(events) - MAX_EVENTS), "facts": facts})
    return found


def marks(record: EpisodeRecord, trace: EpisodeTrace, ponr_step: int | None) -> list[dict[str, Any]]:
    """What crosses every lane: success, the point of no return, the first step of each recorded event."""
    found = []
    if record.success_step is not None:
        found.append({"step": record.success_step, "label": "success", "kind": "success"})
    if ponr_step is not None:
        found.append({"step": ponr_step, "label": "point of no return", "kind": "ponr"})
    for column, values in sorted(trace.context.items()):
        if column.startswith("info.") and not column.startswith("info.safety."):
            finite = np.asarray(values, dtype=np.float64)
            if finite.size and np.all(np.isin(np.nan_to_num(finite), (0.0, 1.0))):
                onsets = _onsets(finite)
                if onsets:
                    found.append({"step": onsets[0], "label": column[len("info."):], "kind": "event"})
    return sorted(found, key=lambda m: (m["step"], m["label"]))


def timeline(store: Store, record: EpisodeRecord, ponr_step: int | None = None) -> dict[str, Any]:
    """The episode's timeline as JSON data: steps, lanes, marks and the video frame of each step."""
    trace = read_trace(store, record)
    rows = _rows(trace.steps)
    drawn = lanes(trace)
    drew = renderer(record)
    if drew is not None:  # the render lane says what drew its frames
        next(lane for lane in drawn if lane["layer"] == Layer.RENDER.value)["facts"]["renderer"] = drew
    frames = {column[len("observation.images."):]: _series(values, rows) for column, values in trace.columns.items()
              if column.startswith("observation.images.")}
    return {"key": record.key, "steps": trace.steps, "rows": [int(r) for r in rows],
            "outcome": record.outcome.value, "policy": record.policy_name, "task": record.task_id,
            "variant": record.variant_name, "seed": record.seed, "lanes": drawn,
            "marks": marks(record, trace, ponr_step), "frames": frames,
            "video_rate": _video_rate(record, trace)}


def _video_rate(record: EpisodeRecord, trace: EpisodeTrace) -> float | None:
    """The videos' frames per second (the run's ``video_fps``, else the step rate)."""
    run = record.provenance.get("run", {}) if isinstance(record.provenance, dict) else {}
    if isinstance(run, dict) and isinstance(run.get("video_fps"), (int, float)):
        return float(run["video_fps"])
    t = trace.context.get("t")
    return float(1.0 / (t[1] - t[0])) if t is not None and len(t) > 1 and t[1] > t[0] else None


def timeline_svg(data: dict[str, Any]) -> str:
    """The timeline as an inline SVG: a row per layer that has something to show, each series scaled to its own
    largest value (named with it), events as ticks, marks across every row (the point of no return in red)."""
    plt = _pyplot()
    shown = [lane for lane in data["lanes"] if lane["series"] or lane["events"]]
    fig, axes = plt.subplots(len(shown) or 1, 1, figsize=(7.2, 0.62 * max(1, len(shown)) + 0.5), sharex=True,
                             squeeze=False)
    rows = np.asarray(data["rows"])
    for ax, lane in zip(axes[:, 0], shown, strict=False):
        for column, values in list(lane["series"].items())[:4]:
            array = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
            peak = float(np.nanmax(np.abs(array))) if np.isfinite(array).any() else 0.0
            name = column.split(".")[-1]
            ax.plot(rows, array / peak if peak > 0 else array, lw=0.8, label=f"{name} (max {peak:.3g})")
        for event in lane["events"]:
            ax.axvline(event["step"], ymin=0.0, ymax=0.18, color="#555", lw=0.6)
        ax.set_ylabel(lane["layer"], fontsize=6, rotation=0, ha="right", va="center")
        ax.set_yticks([])
        if lane["series"]:
            ax.legend(fontsize=5, loc="upper left", ncols=4, frameon=False, borderaxespad=0.1)
    colours = {"ponr": "red", "success": "#2e7d32", "event": "#999"}
    for mark in data["marks"]:
        for ax in axes[:, 0]:
            ax.axvline(mark["step"], color=colours[mark["kind"]], lw=1.0 if mark["kind"] != "event" else 0.5,
                       ls="-" if mark["kind"] != "event" else ":")
    bottom = axes[-1, 0]
    bottom.set_xlabel("step (red: point of no return; green: success; dotted: first step of an event)", fontsize=6)
    bottom.set_xlim(0, max(1, data["steps"] - 1))
    for ax in axes[:, 0]:
        ax.tick_params(labelsize=6)
    return _svg(fig)


def anchor(key: str) -> str:
    """The report's anchor of an episode's timeline (the failure gallery links to it)."""
    return f"timeline-{key}"


def timelines_section(store: Store, items: Sequence[tuple[EpisodeRecord, int | None]]) -> Markup:
    """The report's section: each gallery episode's timeline under its anchor, or why it has none."""
    if not items:
        return Markup("<p class='muted'>No failed episodes.</p>")
    parts = [Markup("<p class='muted'>One lane per layer of each failure in the gallery, on the episode's steps: "
                    "each series scaled to its own largest value, events as ticks, the point of no return in red "
                    "(<code>assay trace export KEY</code> opens the same trace in Perfetto).</p>")]
    for record, ponr_step in items:
        title = html("<h3 id='{}'>{} · {} · seed {} ({})</h3>", anchor(record.key), record.policy_name,
                     record.task_id, record.seed, record.key[:12])
        try:
            drawn = figure(timeline_svg(timeline(store, record, ponr_step)), "figure timeline")
        except StoreError as exc:
            drawn = html("<p class='muted'>No timeline: {}.</p>", str(exc))
        parts.append(join([title, drawn]))
    return join(parts)

