"""``assay run --dry-run``: everything a run checks before its first episode, and nothing run.

The campaign is resolved (tasks, variants, policies, every policy's contract against every task: what
``prepare_campaign`` refuses), each policy is built once and closed (a checkpoint that does not load, a module
that does not import, a policy server that does not answer fail here), and the episode count is printed: planned,
already in the store (when the store exists; it is never created) and left to run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from assay.cli import render
from assay.errors import AssayError
from assay.policies import make_policy
from assay.run import CampaignPlan


def _build_once(planned: CampaignPlan) -> list[str]:
    """Build and close each policy once; the names built."""
    built = []
    for policy in planned.policies:
        try:
            made = make_policy(policy.spec)
        except AssayError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's policy may raise anything; the check names it in one line
            raise AssayError(f"policy {policy.name!r} could not be built: {type(exc).__name__}: {exc}") from None
        close = getattr(made, "close", None)
        if callable(close):
            close()
        built.append(policy.name)
    return built


def _stored(planned: CampaignPlan, store: Path, catalog: str | None) -> int | None:
    """How many planned episodes the store holds already (None when there is no store yet: nothing is created)."""
    from assay.cli.common import open_store

    if not (Path(store) / "store.json").exists():
        return None
    with open_store(store, catalog) as opened:
        return len(opened.catalog.existing_keys(job.key for job in planned.jobs))


def dry_run(planned: CampaignPlan, store: Path, catalog: str | None, json_out: bool) -> dict[str, Any]:
    """Check the campaign as a run would, build its policies, count its episodes; print and return the count."""
    spec = planned.spec
    built = _build_once(planned)
    stored = _stored(planned, store, catalog)
    planned_n = len(planned.jobs)
    document = {"campaign": spec.name, "tasks": len(planned.tasks), "variants": len(planned.variants),
                "policies": built, "cells": len(Counter(job.cell for job in planned.jobs)), "episodes": planned_n,
                "stored": stored, "to_run": planned_n - (stored or 0), "store": str(store), "ran": 0}
    if json_out:
        render.print_json(document)
    else:
        held = "no store there yet" if stored is None else f"{stored} already in the store"
        render.console.print(
            f"dry run: campaign {spec.name}: {document['tasks']} tasks x {document['variants']} variants x "
            f"{len(built)} policies ({document['cells']} cells), {planned_n} episodes planned; {held} ({store}), "
            f"{document['to_run']} to run. Every task and variant resolved, every policy built once and its contract "
            "checked; nothing was run.", highlight=False, soft_wrap=True)
    return document
