"""Result bundles: a campaign's per-episode outcome vector that anyone can verify offline, without the store.

``assay bundle CAMPAIGN -o DIR`` writes (``BUNDLE_SCHEMA`` 1):

==================  ==========================================================================================
``episodes.jsonl``  one episode per line, sorted: policy, task, variant, seed, episode index, outcome, steps,
                    success step, the protocol hash, the environment id, the episode key, the task hash, the
                    policy version, the instruction and the trajectory hash
``environments.json`` each environment id: the package versions and renderer the episodes' provenance records
``campaign.json``   the campaign's resolved document (its spec, tasks, policies, variants, planned cells)
``protocol.json``   the manifest the campaign ran, when it names one
``results.json``    every cell's (policy, task, variant) and every (policy, variant)'s pooled success rate with
                    its mid-p 95% interval, and the stamp (reportable or diagnostic, and why)
``SHA256SUMS``      the SHA-256 of each file above, as ``sha256sum`` writes it (``sha256sum -c SHA256SUMS``)
==================  ==========================================================================================

The bundle's hash is the SHA-256 of its ``SHA256SUMS``. ``assay bundle verify DIR`` checks every file against
``SHA256SUMS`` (a file missing, added or changed is one line naming it), recomputes every rate and interval from
``episodes.jsonl`` and the stamp from ``campaign.json``, ``protocol.json`` and the episodes, and refuses a bundle
whose ``results.json`` says otherwise. It needs no store and no simulator.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import BundleError, ManifestError
from assay.metrics.completeness import CellCount, Completeness
from assay.metrics.rates import success_interval
from assay.metrics.stamp import Stamp, campaign_stamp
from assay.spec.hashing import canonical_json, content_hash
from assay.spec.protocol import Manifest, parse_manifest
from assay.store import EpisodeRecord, Outcome
from assay.store.aggregates import CellTotals

BUNDLE_SCHEMA = 1
SUMS = "SHA256SUMS"
FILES = ("episodes.jsonl", "environments.json", "campaign.json", "results.json")
PROTOCOL = "protocol.json"


def environment_of(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """What an episode ran in: its package versions and renderer (as its provenance records them)."""
    return {"packages": dict(provenance.get("packages") or {}), "renderer": provenance.get("renderer")}


def episode_row(record: EpisodeRecord, protocol_hash: str | None, environment: str) -> dict[str, Any]:
    """One line of ``episodes.jsonl``."""
    return {"policy": record.policy_name, "task": record.task_id, "variant": record.variant_name,
            "variant_key": record.variant_key, "seed": record.seed, "episode_index": record.episode_index,
            "outcome": record.outcome.value, "steps": record.steps, "success_step": record.success_step,
            "protocol_hash": protocol_hash, "environment": environment, "key": record.key,
            "task_hash": record.task_hash, "policy_version": record.policy_version,
            "instruction": record.instruction, "trajectory_hash": record.trajectory_hash}


def results_of(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Rates and mid-p 95% intervals per cell and per (policy, variant) pooled over tasks (errors left out of the
    denominator and counted)."""
    cells: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for row in rows:
        cells[(str(row["policy"]), str(row["task"]), str(row["variant"]))][str(row["outcome"])] += 1
    pooled: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for (policy, _, variant), counts in cells.items():
        pooled[(policy, variant)].update(counts)

    def rate(counts: Counter[str]) -> dict[str, Any]:
        errors = counts[Outcome.ERROR.value]
        scored = sum(counts.values()) - errors
        successes = counts[Outcome.SUCCESS.value]
        interval = success_interval(successes, scored)
        return {"successes": successes, "scored": scored, "errors": errors,
                "rate": successes / scored if scored else None,
                "low": interval.low if interval else None, "high": interval.high if interval else None}

    return {"interval": "mid-p 95%",
            "cells": [{"policy": p, "task": t, "variant": v, **rate(c)} for (p, t, v), c in sorted(cells.items())],
            "pooled": [{"policy": p, "variant": v, **rate(c)} for (p, v), c in sorted(pooled.items())]}


def completeness_of(resolved: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> tuple[Completeness,
                                                                                                 list[CellTotals]]:
    """The planned cells of ``resolved`` against the episodes of ``rows``, and per-cell totals (for the stamp)."""
    recorded: Counter[tuple[str, str, str]] = Counter()
    errors: Counter[tuple[str, str, str]] = Counter()
    for row in rows:
        cell = (str(row["policy"]), str(row["task"]), str(row["variant"]))
        recorded[cell] += 1
        errors[cell] += row["outcome"] == Outcome.ERROR.value
    cells = tuple(CellCount(c["policy"], c["task"], c["variant"], int(c["planned"]),
                            recorded[(c["policy"], c["task"], c["variant"])]) for c in resolved.get("cells", []))
    totals = [CellTotals("", p, t, "", v, n, 0, 0, 0, errors[(p, t, v)], 0, 0.0, 0.0)
              for (p, t, v), n in recorded.items()]
    return Completeness(cells), totals


def bundle_stamp(resolved: Mapping[str, Any], rows: list[dict[str, Any]], manifest: Manifest | None) -> Stamp:
    """The stamp from the bundle's own files (the manifest it carries is the only one it is judged against)."""
    completeness, totals = completeness_of(resolved, rows)
    return campaign_stamp(resolved, completeness, totals, [manifest] if manifest is not None else [])


def _dump(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def bundle_files(resolved: Mapping[str, Any], records: Iterable[EpisodeRecord],
                 manifest: Manifest | None) -> dict[str, bytes]:
    """Every file of a campaign's bundle, by name, ``SHA256SUMS`` last."""
    raw = (resolved.get("campaign") or {}).get("protocol") or {}
    protocol_hash = raw.get("hash")
    environments: dict[str, dict[str, Any]] = {}
    rows = []
    for record in records:
        environment = environment_of(record.provenance)
        ident = content_hash(environment)
        environments.setdefault(ident, environment)
        rows.append(episode_row(record, protocol_hash, ident))
    rows.sort(key=lambda r: (r["policy"], r["task"], r["variant"], r["seed"], r["key"]))
    stamp = bundle_stamp(resolved, rows, manifest)
    files = {"episodes.jsonl": "".join(canonical_json(r) + "\n" for r in rows).encode("utf-8"),
             "environments.json": _dump(environments), "campaign.json": _dump(resolved),
             "results.json": _dump({"schema_version": BUNDLE_SCHEMA, **results_of(rows), "stamp": stamp.to_dict()})}
    if manifest is not None:
        files[PROTOCOL] = _dump(manifest.model_copy(update={"hash": manifest.content_hash()}).model_dump(mode="json"))
    files[SUMS] = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items())
                          ).encode("utf-8")
    return files


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its rows, results (recomputed), stamp (recomputed) and hash."""

    path: Path
    sha256: str  # of SHA256SUMS
    campaign: str
    rows: tuple[dict[str, Any], ...]
    results: dict[str, Any]
    stamp: Stamp
    protocol_hash: str | None
    environments: dict[str, Any]
    protocol: dict[str, Any] | None = None  # the campaign's protocol reference (name, version, hash, suites)


def _sums(path: Path) -> dict[str, str]:
    try:
        text = (path / SUMS).read_text(encoding="utf-8")
    except OSError:
        raise BundleError(f"bundle {path}: no {SUMS} (not a bundle, or its SHA-256 manifest is missing)") from None
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise BundleError(f"bundle {path}: {SUMS} line {number} is not '<sha256>  <file>'")
        sums[name] = digest
    return sums


def check_sums(path: Path) -> tuple[dict[str, bytes], str]:
    """Every file a bundle's ``SHA256SUMS`` lists, checked (one line naming a file missing, added or changed), and
    the bundle's hash."""
    path = Path(path)
    sums = _sums(path)
    listed = set(sums) | {SUMS}
    extra = sorted(p.name for p in path.iterdir() if p.is_file() and p.name not in listed) if path.is_dir() else []
    if extra:
        raise BundleError(f"bundle {path}: {extra[0]} is not in {SUMS} (a file was added)")
    missing = [name for name in FILES if name not in sums]
    if missing:
        raise BundleError(f"bundle {path}: {SUMS} lists no {missing[0]}")
    files = {}
    for name, digest in sorted(sums.items()):
        try:
            data = (path / name).read_bytes()
        except OSError:
            raise BundleError(f"bundle {path}: {name} is missing") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise BundleError(f"bundle {path}: {name} has SHA-256 {actual}, its {SUMS} says {digest} (changed since "
                              "it was written)")
        files[name] = data
    return files, hashlib.sha256((path / SUMS).read_bytes()).hexdigest()


def verify_bundle(path: str | Path) -> Bundle:
    """Check a bundle's files and recompute its results and stamp (module doc); BundleError in one line otherwise."""
    path = Path(path)
    files, digest = check_sums(path)
    try:
        rows = [json.loads(line) for line in files["episodes.jsonl"].decode("utf-8").splitlines() if line]
        resolved = json.loads(files["campaign.json"])
        stored = json.loads(files["results.json"])
        environments = json.loads(files["environments.json"])
        manifest = parse_manifest(json.loads(files[PROTOCOL]), f"{path}/{PROTOCOL}") if PROTOCOL in files else None
    except (ValueError, KeyError, ManifestError) as exc:
        raise BundleError(f"bundle {path}: {str(exc).splitlines()[0]}") from None
    ref = (resolved.get("campaign") or {}).get("protocol") or {}
    stray = next((r for r in rows if r.get("protocol_hash") != ref.get("hash")), None)
    if stray is not None:
        raise BundleError(f"bundle {path}: episode {stray.get('key')} records protocol {stray.get('protocol_hash')}, "
                          f"the campaign {ref.get('hash')}")
    unknown = next((r for r in rows if r.get("environment") not in environments), None)
    if unknown is not None:
        raise BundleError(f"bundle {path}: episode {unknown.get('key')} names environment {unknown.get('environment')}"
                          ", which environments.json lacks")
    results = results_of(rows)
    for part in ("cells", "pooled"):
        if stored.get(part) != results[part]:
            raise BundleError(f"bundle {path}: results.json's {part} are not what its episodes give")
    stamp = bundle_stamp(resolved, rows, manifest)
    if (stored.get("stamp") or {}).get("status") != stamp.status:
        raise BundleError(f"bundle {path}: results.json says {(stored.get('stamp') or {}).get('status')}, its files "
                          f"give {stamp.status} ({stamp.label})")
    name = str((resolved.get("campaign") or {}).get("name", ""))
    return Bundle(path, digest, name, tuple(rows), results, stamp, ref.get("hash"), environments, dict(ref) or None)


def bundle_records(bundle: Bundle, label: str) -> list[EpisodeRecord]:
    """The bundle's episodes as records for paired statistics, their policies named ``label:policy``."""
    return [EpisodeRecord(key=str(r["key"]), campaign=bundle.campaign, task_id=str(r["task"]),
                          task_hash=str(r["task_hash"]), variant_key=str(r["variant_key"]),
                          variant_name=str(r["variant"]), variant={}, policy_name=f"{label}:{r['policy']}",
                          policy_version=str(r["policy_version"]), policy_spec={}, seed=int(r["seed"]),
                          episode_index=int(r["episode_index"]), instruction=str(r["instruction"]),
                          outcome=Outcome(r["outcome"]), reason="", steps=int(r["steps"]), total_return=0.0,
                          success_step=r["success_step"], trajectory_hash=str(r["trajectory_hash"]))
            for r in bundle.rows]
