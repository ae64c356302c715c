"""A released variant set read from an upstream checkout: LIBERO-Plus's 10,030 variants.

LIBERO-Plus lists its variants in ``libero/libero/benchmark/task_classification.json`` (per suite: id, name,
category, difficulty level). A name is its base task's name with suffixes saying what changes:
``_view_H_V_S_R_T`` (the agent-view camera), ``_initstate_K`` (the robot's initial joints, K > 0), ``_noise_N``
(sensor noise N), ``_language_K`` (the K-th rewritten instruction, in its own BDDL file), ``_light_K``,
``_table_K`` / ``_tb_K`` (background textures), ``_add_K`` / ``_levelL_sampleS`` (objects added to the layout).

Assay ships none of the list (the upstream repository states no license); the manifest pins the file's SHA-256,
and :func:`upstream_variants` reads it from a checkout, checks the hash and sorts each variant into what runs
here and what cannot, with the reason:

* **runs**: sensor noise 11-50 on the nominal view and initial state (``libero_plus.corruption``: upstream's
  Gaussian, zoom, fog and glass blurs, ``sim.corruptions``);
* **cannot run**: sensor noise 1-10 (motion blur needs ImageMagick); language (the rewritten instructions are in
  upstream's BDDL files, which Assay does not read: a prompt from an unlicensed file would be shipped in every
  episode record); camera viewpoints (upstream moves the camera in its own environment code); robot initial
  states (upstream's ``Panda<K>`` robot classes); light and background (upstream's scene code and texture
  assets); objects layout (upstream's new object assets and ``libero_newobj`` initial states).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import ManifestError
from assay.sim.corruptions import runnable
from assay.spec.libero_catalog import SUITES, libero_catalog
from assay.spec.protocol import Manifest, VariantEntry

NOMINAL_VIEW = "0_0_100_0_0"
_NOISE = re.compile(r"_view_(?P<view>\d+_\d+_\d+_\d+_\d+)_initstate_(?P<init>\d+)_noise_(?P<noise>\d+)$")
CANNOT = {
    "Language Instructions": "the rewritten instruction is in upstream's BDDL file, which Assay does not read",
    "Camera Viewpoints": "upstream moves the agent-view camera in its own environment code (view_H_V_S_R_T)",
    "Robot Initial States": "upstream's perturbed initial joints are its own robot classes (Panda<K>)",
    "Light Conditions": "upstream's light settings are its own scene code",
    "Background Textures": "upstream's textures are its own assets (assets.zip) and scene code",
    "Objects Layout": "upstream's added objects are its own assets and libero_newobj initial states",
}
CATEGORY_KEYS = {"Sensor Noise": "noise", "Language Instructions": "language", "Camera Viewpoints": "camera",
                 "Robot Initial States": "robot", "Light Conditions": "light", "Background Textures": "background",
                 "Objects Layout": "layout"}


@dataclass(frozen=True)
class UpstreamSet:
    """The released variants: those that run here (as manifest variants) and those that cannot, with why."""

    runs: tuple[VariantEntry, ...]
    cannot: tuple[tuple[str, str, str], ...]  # (upstream name, category, reason)
    total: int

    def by_category(self) -> dict[str, tuple[int, int]]:
        """category -> (runs, cannot run)."""
        ran = Counter(e.category for e in self.runs)
        refused = Counter(CATEGORY_KEYS.get(c, c) for _, c, _ in self.cannot)
        return {c: (ran[c], refused[c]) for c in sorted(set(ran) | set(refused))}

    def reasons(self) -> dict[str, int]:
        """Each reason a variant cannot run, and how many."""
        return dict(Counter(reason for _, _, reason in self.cannot).most_common())


def read_upstream(manifest: Manifest, upstream: Path | None) -> dict[str, list[dict[str, Any]]]:
    """The upstream list a manifest pins, from a checkout (or the file), its SHA-256 checked; one-line errors."""
    pinned = manifest.variant_set
    if pinned is None:
        raise ManifestError(f"protocol {manifest.ref} lists its own variants; it reads no upstream file")
    if upstream is None:
        raise ManifestError(f"protocol {manifest.ref} reads its {pinned.count:,} variants from {pinned.path} of "
                            f"{pinned.repository} @ {pinned.commit}: give that checkout (or the file) with --upstream")
    path = Path(upstream)
    path = path / pinned.path if path.is_dir() else path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != pinned.sha256:
        raise ManifestError(f"{path} has SHA-256 {digest}; protocol {manifest.ref} pins {pinned.sha256} "
                            f"({pinned.repository} @ {pinned.commit})")
    listed: dict[str, list[dict[str, Any]]] = json.loads(data)
    return listed


def _base_task(suite: str, name: str) -> str:
    """The Assay task id of an upstream variant name (the longest catalogue task name it starts with)."""
    short = next(s.short for s in SUITES.values() if s.benchmark == suite)
    names = [e["task"] for e in libero_catalog()[suite] if name == e["task"] or name.startswith(e["task"] + "_")]
    if not names:
        raise ManifestError(f"upstream variant {name!r} of {suite} names no task of Assay's catalogue")
    return f"libero/{short}/{max(names, key=len)}@2"


def upstream_variants(manifest: Manifest, upstream: Path | None) -> UpstreamSet:
    """Sort the pinned upstream list into what runs here and what cannot (module doc)."""
    listed = read_upstream(manifest, upstream)
    runs, cannot = [], []
    for suite, entries in listed.items():
        for entry in entries:
            name, category = str(entry["name"]), str(entry["category"])
            level = entry.get("difficulty_level")
            match = _NOISE.search(name)
            why = CANNOT.get(category, f"category {category!r} is not one Assay knows")
            if category == "Sensor Noise" and match is not None:
                if match["view"] != NOMINAL_VIEW or match["init"] != "0":
                    why = "a noise variant with a moved camera or initial state (upstream's own code)"
                else:
                    why = runnable(int(match["noise"])) or ""
            if why or match is None:
                cannot.append((name, category, why))
                continue
            runs.append(VariantEntry(label=f"{suite}/{name}", factors={"libero_plus.corruption": int(match["noise"])},
                                     tasks=(_base_task(suite, name),), category="noise", level=level,
                                     upstream=name))
    total = sum(len(v) for v in listed.values())
    if manifest.variant_set is not None and total != manifest.variant_set.count:
        raise ManifestError(f"the upstream list holds {total} variants; protocol {manifest.ref} says "
                            f"{manifest.variant_set.count}")
    return UpstreamSet(tuple(runs), tuple(cannot), total)


def with_upstream_variants(manifest: Manifest, upstream: Path | None) -> Manifest:
    """``manifest`` with the upstream variants that run here as its variants (its hash is then that content's;
    a campaign still names the pinned manifest)."""
    found = upstream_variants(manifest, upstream)
    if not found.runs:
        raise ManifestError(f"none of the {found.total:,} variants of {manifest.ref} can run here")
    return manifest.model_copy(update={"variants": found.runs, "hash": None})
