"""The reportable stamp: whether a campaign's score is a protocol's number, or a diagnostic.

A score is **reportable** only when all of these hold, and **diagnostic** otherwise, with every reason said:

1. the campaign names a protocol (``protocol:`` in its spec: name, version, hash, suites);
2. a manifest of that ``name@version`` is known (shipped with Assay, or the copy ``assay run --protocol FILE``
   kept in the store) and its content hashes to the campaign's hash (a manifest edited since the run, or a
   campaign that names a hash no manifest has, is diagnostic);
3. the campaign's traversal is the manifest's, read from its resolved document: the tasks of the chosen suites,
   each with its suite's horizon, the settle steps, the success rule, the control rate and the cameras at the
   rendered size (``fast`` only for the ``fast`` renderer); the episodes per cell and the seed; the chunk
   execution (``replan_every``); the instruction source (``prompt``); the images each policy receives; and the
   planned (task, variant) cells, each variant's factors as the manifest lists them;
4. every planned cell of the policy is complete and none of its episodes is an ``error`` (an infrastructure
   failure is neither a success nor a failure: the traversal is not complete until it is re-run).

The stamp is per policy (one policy of a campaign may be complete while another is not) and for the campaign
(reportable when every policy is). Scoring commands print ``label`` beside every score: a partial run never
prints a bare score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import ManifestError
from assay.metrics.completeness import Completeness
from assay.spec.protocol import Manifest, ProtocolRef, read_manifest, shipped_protocols
from assay.store.aggregates import CellTotals

REPORTABLE = "reportable"
DIAGNOSTIC = "diagnostic"
STORE_MANIFESTS = "protocols"  # STORE/protocols/NAME.vVERSION.json: manifests campaigns of this store ran
SHOWN_REASONS = 3


@dataclass(frozen=True)
class Stamp:
    """Reportable or diagnostic, for the campaign and each policy, with the reasons."""

    status: str
    protocol: str | None  # ``name@version (suites)``
    manifest_hash: str | None
    reasons: tuple[str, ...]  # what keeps the campaign diagnostic (empty: reportable)
    policies: dict[str, str] = field(default_factory=dict)  # policy -> reportable | diagnostic

    @property
    def reportable(self) -> bool:
        """Whether every policy's score is the protocol's number."""
        return self.status == REPORTABLE

    @property
    def label(self) -> str:
        """One line for beside a score: ``reportable: openpi-libero@1 sha256:3af7ee67…`` or ``diagnostic: …``."""
        if self.reportable:
            return f"{REPORTABLE}: {self.protocol} {short_hash(self.manifest_hash)}"
        shown = "; ".join(self.reasons[:SHOWN_REASONS])
        more = f" (+{len(self.reasons) - SHOWN_REASONS} more)" if len(self.reasons) > SHOWN_REASONS else ""
        return f"{DIAGNOSTIC}: {shown}{more}"

    def of(self, policy: str) -> str:
        """The stamp of one policy's score."""
        return self.policies.get(policy, self.status)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON documents and bundles."""
        return {"status": self.status, "protocol": self.protocol, "manifest_hash": self.manifest_hash,
                "reasons": list(self.reasons), "policies": dict(self.policies), "label": self.label}


def short_hash(value: str | None) -> str:
    """``sha256:3af7ee67…`` (the first 8 hex digits)."""
    return f"{value[:15]}…" if value else ""


def store_manifests(root: Path) -> tuple[list[Manifest], list[str]]:
    """The manifests a store kept (``STORE/protocols/*.json``) and a line for each copy that does not load."""
    found, problems = [], []
    for path in sorted((Path(root) / STORE_MANIFESTS).glob("*.json")):
        try:
            found.append(read_manifest(path))
        except ManifestError as exc:
            problems.append(str(exc))
    return found, problems


def known_manifests(root: Path | None = None) -> tuple[list[Manifest], list[str]]:
    """Assay's shipped manifests and a store's copies (and the copies that did not load)."""
    kept, problems = store_manifests(root) if root is not None else ([], [])
    return [*shipped_protocols().all(), *kept], problems


def campaign_stamp(resolved: Mapping[str, Any], completeness: Completeness, totals: Iterable[CellTotals],
                   manifests: Sequence[Manifest]) -> Stamp:
    """The stamp of a campaign from its resolved document, its completeness, its cell counts and the manifests
    known (module doc)."""
    policies = sorted({str(p.get("name")) for p in resolved.get("policies", [])}
                      | {c.policy for c in completeness.cells})
    raw = resolved.get("campaign", {}).get("protocol")
    if not raw:
        return _diagnostic(None, None, ["no protocol: the campaign names no manifest (assay run --protocol NAME)"],
                           policies)
    ref = ProtocolRef.model_validate(raw)
    same_name = [m for m in manifests if (m.name, m.version) == (ref.name, ref.version)]
    manifest = next((m for m in same_name if m.content_hash() == ref.hash), None)
    if manifest is None:
        found = ", ".join(sorted({m.content_hash() for m in same_name}))
        why = (f"manifest {ref.name}@{ref.version} hashes {found}, not the {ref.hash} the campaign ran" if found
               else f"protocol {ref.name}@{ref.version} is unknown here (no shipped manifest, none kept in the store)")
        return _diagnostic(ref.label, ref.hash, [why], policies)
    reasons = traversal_differences(manifest, ref, resolved)
    errors: dict[str, int] = {}
    for cell in totals:
        errors[cell.policy] = errors.get(cell.policy, 0) + cell.errors
    stamps: dict[str, str] = {}
    for policy in policies:
        own = completeness.select([policy])
        said = [f"{policy}: {own.describe()}"] if not own.complete else []
        if errors.get(policy):
            said.append(f"{policy}: {errors[policy]} error episode(s) to re-run (--retry-errors)")
        said += image_differences(manifest, resolved, policy)
        stamps[policy] = REPORTABLE if not reasons and not said else DIAGNOSTIC
        reasons += said
    status = REPORTABLE if not reasons and policies else DIAGNOSTIC
    return Stamp(status, ref.label, ref.hash, tuple(reasons) or (() if policies else ("no policy",)), stamps)


def _diagnostic(protocol: str | None, digest: str | None, reasons: list[str], policies: list[str]) -> Stamp:
    return Stamp(DIAGNOSTIC, protocol, digest, tuple(reasons), dict.fromkeys(policies, DIAGNOSTIC))


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b))
    return a == b


def traversal_differences(manifest: Manifest, ref: ProtocolRef, resolved: Mapping[str, Any]) -> list[str]:
    """What in the campaign's resolved document differs from the manifest's traversal, one line each."""
    knobs = manifest.knobs
    campaign = resolved.get("campaign", {})
    said: list[str] = []
    expected = manifest.task_ids(ref.suites)
    tasks = {t["id"]: t["spec"] for t in resolved.get("tasks", [])}
    missing, extra = [t for t in expected if t not in tasks], sorted(set(tasks) - set(expected))
    if missing or extra:
        said.append(f"tasks: {len(missing)} of the manifest's {len(expected)} not run"
                    + (f" (first {missing[0]})" if missing else "") + (f", {len(extra)} not in it ({extra[0]})"
                                                                       if extra else ""))
    settings: tuple[tuple[str, object, object], ...] = (
                              ("trials per task", knobs.trials_per_task, campaign.get("episodes")),
                              ("seed", knobs.seed, campaign.get("seed", 0)),
                              ("replan steps", knobs.replan_steps, campaign.get("replan_every")),
                              ("prompt", knobs.prompt, campaign.get("prompt") or "variant"))
    for name, wanted, got in settings:
        if not _same(wanted, got):
            said.append(f"{name}: the manifest's {wanted}, the campaign's {got}")
    cameras = sorted((c, *manifest_size(manifest), knobs.renderer == "fast") for c in
                     (knobs.image.cameras if knobs.image else ()))
    for task in (t for t in expected if t in tasks):
        spec = tasks[task]
        got = sorted((c["name"], c["width"], c["height"], bool(c.get("fast"))) for c in spec.get("cameras", []))
        checks: tuple[tuple[str, object, object], ...] = (
                                    ("horizon", manifest.horizon_of(task), spec.get("horizon")),
                                    ("settle steps", knobs.settle_steps, spec.get("settle_steps", 0)),
                                    ("success", knobs.success, spec.get("success", "any_step")),
                                    ("control rate", knobs.control_hz, spec.get("control_hz")),
                                    ("cameras", cameras, got))
        for name, wanted, value in checks:
            if not _same(wanted, value):
                said.append(f"{name} of {task}: the manifest's {wanted}, the campaign's {value}")
                break
    said += _variant_differences(manifest, ref, resolved)
    return said


def manifest_size(manifest: Manifest) -> tuple[int, int]:
    """(width, height) of the frames the manifest renders."""
    image = manifest.knobs.image
    return (image.render[1], image.render[0]) if image is not None else (0, 0)


def _variant_differences(manifest: Manifest, ref: ProtocolRef, resolved: Mapping[str, Any]) -> list[str]:
    """The planned (task, variant) cells and their episodes against the manifest's."""
    names = {}
    for variant in resolved.get("variants", []):
        factors = {p["factor"]: _plain(p["value"]) for p in variant.get("spec", {}).get("perturbations", [])}
        names[_key(factors)] = variant["name"]
    planned: dict[tuple[str, str], int] = {}
    for cell in resolved.get("cells", []):
        pair = (str(cell["task"]), str(cell["variant"]))
        planned[pair] = max(planned.get(pair, 0), int(cell["planned"]))
    if manifest.variant_set is not None and not manifest.variants:
        count = manifest.variant_set.count
        if len(planned) != count:
            return [f"variants: the released set lists {count:,}; the campaign plans {len(planned):,} (task, variant) "
                    "cells"]
        return []
    expected = {(task, names.get(_key(entry.factors), f"{entry.label} (no such variant planned)"))
                for task, entry in manifest.cells(ref.suites)}
    said = []
    missing, extra = sorted(expected - set(planned)), sorted(set(planned) - expected)
    if missing:
        said.append(f"variants: {len(missing)} of the manifest's {len(expected)} (task, variant) cells not planned "
                    f"(first {missing[0][0]} x {missing[0][1]})")
    if extra:
        said.append(f"variants: {len(extra)} planned cells not in the manifest (first {extra[0][0]} x {extra[0][1]})")
    short = sorted(pair for pair, n in planned.items() if pair in expected and n != manifest.knobs.trials_per_task)
    if short:
        said.append(f"episodes of {short[0][0]} x {short[0][1]}: {planned[short[0]]} planned, the manifest's "
                    f"{manifest.knobs.trials_per_task}")
    return said


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _key(factors: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _plain(v))
                        for k, v in factors.items()))


def image_differences(manifest: Manifest, resolved: Mapping[str, Any], policy: str) -> list[str]:
    """Whether ``policy`` receives the images the manifest's harness sends (a remote policy's ``image_size``,
    else the rendered size)."""
    image = manifest.knobs.image
    if image is None:
        return []
    entry: Mapping[str, Any] = next((p for p in resolved.get("policies", []) if p.get("name") == policy), {})
    spec = entry.get("spec", {})
    size = (spec.get("params") or {}).get("image_size") if spec.get("remote") else None
    received = f"{size[1]}x{size[0]}" if size else f"{image.render[1]}x{image.render[0]}"
    if received == image.received:
        return []
    how = ("the harness resizes with resize_with_pad, which Assay does for a remote policy only"
           if image.resize == "resize_with_pad" else f"resize {image.resize}")
    return [f"{policy}: receives {received} images, the protocol's policy {image.received} ({how})"]
