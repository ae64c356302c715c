"""The registry's ``reproduced`` column: filled only by a run here, from a verified, reportable bundle.

``assay reproduce ENTRY --campaign C --record BUNDLE`` checks the campaign against the entry as ``reproduce``
does, then records the run only if its bundle (``assay bundle C -o BUNDLE``) verifies (every checksum, interval
and the stamp recomputed), belongs to that campaign, is **reportable**, and ran the manifest and suite the
entry's registry protocol names (``manifest``: ``openpi-libero@1:spatial``) with the hash Assay ships (or, for a
manifest Assay does not ship, the copy the store kept). The record
(policy, campaign, protocol, protocol hash, the measured successes, trials, rate and mid-p 95% interval, the
verdict, the bundle's SHA-256) goes into ``STORE/reproduced.json`` beside the episodes; ``assay reproduce --list
--store S`` shows it in the ``reproduced`` column, and the shipped registry's column stays empty (no checkpoint of
it was run here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.metrics.bundle import Bundle
from assay.metrics.reproduction import Registry, Reproduction, check_reproduced
from assay.spec.protocol import Manifest, ProtocolRegistry, shipped_protocols
from assay.store import write_blob

STORE_FILE = "reproduced.json"


def reproduced_record(registry: Registry, result: Reproduction, bundle: Bundle, campaign: str,
                      manifests: Sequence[Manifest] = ()) -> dict[str, Any]:
    """The record of ``result`` with ``bundle`` as its evidence; AssayError naming what is missing otherwise.
    ``manifests``: those known besides the shipped ones (a store's copies)."""
    if bundle.campaign != campaign:
        raise AssayError(f"bundle {bundle.path} is of campaign {bundle.campaign!r}, not {campaign!r}")
    if not bundle.stamp.reportable:
        raise AssayError(f"bundle {bundle.path} is {bundle.stamp.label}: only a reportable run fills 'reproduced'")
    protocol = registry.protocols.get(str(result.protocol)) if result.protocol else None
    wanted = (protocol or {}).get("manifest")
    if not wanted:
        raise AssayError(f"entry {result.entry} names no protocol manifest; nothing here can reproduce it")
    ref, _, suite = str(wanted).partition(":")
    known = ProtocolRegistry((*shipped_protocols().all(), *(m for m in manifests
                                                            if m.ref not in shipped_protocols().names())))
    manifest = known.get(ref)
    ran = bundle.protocol or {}
    suites = ran.get("suites")
    if (ran.get("name"), ran.get("version")) != (manifest.name, manifest.version) or (suites and suite not in suites):
        raise AssayError(f"entry {result.entry} is protocol {wanted}; bundle {bundle.path} ran "
                         f"{ran.get('name')}@{ran.get('version')} ({', '.join(suites or ['all suites'])})")
    if ran.get("hash") != manifest.content_hash():
        raise AssayError(f"bundle {bundle.path} ran {ref} {ran.get('hash')}; the manifest known here is "
                         f"{manifest.content_hash()}")
    if result.verdict == "protocol differs":
        raise AssayError(f"entry {result.entry}: {'; '.join(result.reasons)}")
    record = {"policy": result.policy, "campaign": campaign, "protocol": wanted, "protocol_hash": ran.get("hash"),
              "successes": result.successes, "trials": result.trials, "rate": result.measured_rate,
              "low": result.measured_low, "high": result.measured_high, "bundle_sha256": bundle.sha256,
              "verdict": result.verdict, "p_value": result.p_value,
              "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    check_reproduced(record, f"entry {result.entry}")
    return record


def load_reproduced(root: Path) -> dict[str, list[dict[str, Any]]]:
    """The store's records by registry entry (empty when none)."""
    path = Path(root) / STORE_FILE
    if not path.is_file():
        return {}
    try:
        found: dict[str, list[dict[str, Any]]] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AssayError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    for entry, records in found.items():
        for record in records:
            check_reproduced(record, f"{path}: {entry}")
    return found


def save_reproduced(root: Path, entry: str, record: dict[str, Any]) -> None:
    """Add ``record`` under ``entry`` in the store's file (atomically)."""
    found = load_reproduced(root)
    found.setdefault(entry, []).append(record)
    write_blob(root, STORE_FILE, (json.dumps(found, indent=1, sort_keys=True) + "\n").encode(), "reproduction records")


def latest(found: dict[str, list[dict[str, Any]]], entry: str) -> dict[str, Any] | None:
    """The entry's latest record, or None."""
    records = found.get(entry) or []
    return records[-1] if records else None
