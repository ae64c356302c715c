"""JSON views of the store's regression sets for the dashboard (``regression/<name>/`` files, read only).

A set name from a request is checked against the set-name rule and then against the
sets actually in the store before any path is built from it, so no request name
(``..``, slashes, encoded or not) reaches a file outside ``regression/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.errors import AssayError, unknown_name
from assay.failures.regression import HELDOUT_SUFFIX, is_set_name, load_set, runs, statuses


def set_rows(root: Path, campaign: str | None = None) -> list[dict[str, Any]]:
    """Every regression set (or those mined from ``campaign``) at its latest version, with its run summaries."""
    return [status.to_dict() for status in statuses(root, source=campaign)]


def _known(root: Path) -> str:
    return ", ".join(status.name for status in statuses(root)) or "none yet"


def set_detail(root: Path, name: str) -> dict[str, Any]:
    """One set at its latest version: its status row and, per case, what every run recorded for it.

    ``runs[i]`` of a case is ``{"run", "policy", "passed", "key"}`` for the i-th run of the set
    (oldest first), or None when that run did not include the case (it ran an older version);
    ``key`` is the rerun's episode key, for the episode viewer.
    """
    if not is_set_name(name):
        raise AssayError(f"regression set name {name!r} is not valid (letters, digits, '_' and '-', max 64, "
                         f"optionally ending in {HELDOUT_SUFFIX!r}); known: {_known(root)}")
    found = {status.name: status for status in statuses(root)}
    if name not in found:
        raise AssayError(unknown_name("regression set", name, (s.name for s in found.values())))
    regression_set = load_set(root, name)
    history = runs(root, name)
    cases = []
    for case in regression_set.cases:
        per_run = [{"run": r["run"], "policy": r["policy"], "passed": bool(r["passed"][case.id]),
                    "key": r.get("keys", {}).get(case.id)} if case.id in r["passed"] else None for r in history]
        latest = next((entry for entry in reversed(per_run) if entry is not None), None)
        cases.append({"id": case.id, "label": case.label, "task": case.task_spec.id, "variant": case.variant_spec.name,
                      "seed": case.seed, "instruction": case.instruction, "source_key": case.source_key,
                      "runs": per_run, "latest": latest})
    return {"set": found[name].to_dict(), "cases": cases}
