"""How complete a campaign's results are: episodes recorded against episodes planned, per cell.

A campaign interrupted at 46% once ranked a degraded expert first at 1.00, tied with the
expert; complete, it scores 0.72. The cells planned last were simply absent, and nothing
said so. The missing episodes of a partial campaign are not missing at random (cells are
run in plan order, and successes finish first), so every result says how complete it is,
and a ranking or comparison over cells that have no episode at all is refused unless the
caller asks for it (``--allow-partial``).

A **cell** is (policy, task, variant). What is planned per cell comes from the campaign's
plan, kept in its resolved document (``cells``: policy, task, variant, planned); an older
document without it is the full grid of its policies × tasks × variants × ``episodes``. An
adaptive campaign plans up to its horizon (``adaptive.max_episodes``) until its stopping
rule has finished; then each cell's plan is the episodes its rule used (``adaptive.json``).
What is recorded per cell is a count of the catalog's episodes linked to the campaign, so
these numbers can come from per-cell counts (a SQL ``GROUP BY``) as well as from records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.metrics.rates import RateRow
from assay.store import EpisodeRecord
from assay.store.aggregates import CellTotals

Cell = tuple[str, str, str]  # (policy name, task id, variant name)
SHOWN_MISSING = 4  # cells a message names before "and N more"


@dataclass(frozen=True)
class CellCount:
    """One cell: episodes planned and recorded."""

    policy: str
    task: str
    variant: str
    planned: int
    recorded: int

    @property
    def complete(self) -> bool:
        """Every planned episode of the cell is recorded."""
        return self.recorded >= self.planned

    @property
    def label(self) -> str:
        """How messages name the cell."""
        return f"{self.policy} × {self.task} × {self.variant}"

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"policy": self.policy, "task": self.task, "variant": self.variant, "planned": self.planned,
                "recorded": self.recorded, "complete": self.complete}


@dataclass(frozen=True)
class Completeness:
    """Recorded against planned over a set of cells (a campaign, or the part a result covers)."""

    cells: tuple[CellCount, ...]
    provisional: bool = False  # an adaptive campaign whose stopping rule has not finished: planned = horizon

    @property
    def planned(self) -> int:
        """Episodes planned over the cells."""
        return sum(c.planned for c in self.cells)

    @property
    def recorded(self) -> int:
        """Episodes recorded over the cells (at most each cell's plan)."""
        return sum(min(c.recorded, c.planned) for c in self.cells)

    @property
    def complete(self) -> bool:
        """Every cell is complete and the plan is final."""
        return not self.provisional and all(c.complete for c in self.cells)

    @property
    def missing(self) -> tuple[CellCount, ...]:
        """Cells planned with no episode recorded at all."""
        return tuple(c for c in self.cells if c.planned > 0 and c.recorded == 0)

    def select(self, policies: Iterable[str] | None = None, tasks: Iterable[str] | None = None,
               variants: Iterable[str] | None = None) -> Completeness:
        """The cells of these policies, tasks and variants (None: all)."""
        wanted = [None if v is None else set(v) for v in (policies, tasks, variants)]
        kept = tuple(c for c in self.cells if all(w is None or value in w
                                                  for w, value in zip(wanted, (c.policy, c.task, c.variant),
                                                                      strict=True)))
        return Completeness(kept, self.provisional)

    def of(self, group: Mapping[str, str]) -> Completeness:
        """The cells of one result row's group (``policy``, ``task``, ``variant`` keys; others ignored)."""
        return self.select(*[[group[k]] if k in group else None for k in ("policy", "task", "variant")])

    def summary(self) -> dict[str, object]:
        """``planned``, ``recorded`` and ``complete``: what each result row carries."""
        return {"planned": self.planned, "recorded": self.recorded, "complete": self.complete}

    def to_dict(self) -> dict[str, object]:
        """The campaign-level document: totals, the cells with none, and every cell."""
        return {**self.summary(), "provisional": self.provisional,
                "missing_cells": [c.label for c in self.missing], "cells": [c.to_dict() for c in self.cells]}

    def describe(self) -> str:
        """One line: complete, or how incomplete and which cells have nothing."""
        if self.complete:
            return f"complete: {self.recorded} of {self.planned} planned episodes recorded"
        line = f"incomplete: {self.recorded} of {self.planned} planned episodes recorded"
        if self.provisional:
            line += " (adaptive: its stopping rule has not finished; planned is the horizon)"
        partial = [c for c in self.cells if not c.complete and c.recorded > 0]
        if self.missing:
            line += f"; {len(self.missing)} cell(s) have none ({_names(self.missing)})"
        if partial:
            line += f"; {len(partial)} partial"
        return line

    def refuse_missing(self, what: str, allow_partial: bool) -> None:
        """AssayError when cells have no episode at all and ``allow_partial`` is not given."""
        if self.missing and not allow_partial:
            raise AssayError(
                f"{what}: refused, {len(self.missing)} of its {len(self.cells)} cells have no episode yet "
                f"({_names(self.missing)}; {self.recorded} of {self.planned} planned episodes recorded); the missing "
                "cells are not missing at random (cells run in plan order, successes finish first): finish the "
                "campaign (rerun `assay run`), or pass --allow-partial")


def _names(cells: Sequence[CellCount]) -> str:
    shown = ", ".join(c.label for c in cells[:SHOWN_MISSING])
    return shown + (f" and {len(cells) - SHOWN_MISSING} more" if len(cells) > SHOWN_MISSING else "")


def planned_cells(resolved: Mapping[str, Any],
                  adaptive: Mapping[str, Any] | None = None) -> tuple[dict[Cell, int], bool]:
    """Episodes planned per cell from a campaign's resolved document (and its final adaptive state, if any);
    and whether that plan is provisional (an adaptive campaign still running)."""
    spec = resolved.get("campaign", {}) if isinstance(resolved.get("campaign"), Mapping) else {}
    if "cells" in resolved:
        planned = {(str(c["policy"]), str(c["task"]), str(c["variant"])): int(c["planned"]) for c in resolved["cells"]}
    else:  # a resolved document from before plans listed their cells: the full grid
        episodes = int(spec.get("episodes", 0))
        variants = [str(v["name"]) for v in resolved.get("variants", [])] or ["nominal"]
        planned = {(str(p["name"]), str(t["id"]), v): episodes
                   for p in resolved.get("policies", []) for t in resolved.get("tasks", []) for v in variants}
    if not spec.get("adaptive"):
        return planned, False
    if adaptive is None:
        return planned, True
    names = {str(v["key"]): str(v["name"]) for v in resolved.get("variants", [])}
    for cell in adaptive.get("cells", []):
        key = (str(cell["policy"]), str(cell["task"]), names.get(str(cell["variant"]), str(cell["variant"])))
        if key in planned and cell.get("reason") is not None:
            planned[key] = int(cell["episodes"])
    open_cells = any(cell.get("reason") is None for cell in adaptive.get("cells", []))
    return planned, open_cells


def recorded_cells(records: Iterable[EpisodeRecord]) -> dict[Cell, int]:
    """Episodes recorded per cell (each episode key once)."""
    seen = {(r.policy_name, r.task_id, r.variant_name, r.key) for r in records}
    return dict(Counter((p, t, v) for p, t, v, _ in seen))


def recorded_of(totals: Iterable[CellTotals]) -> dict[Cell, int]:
    """Episodes recorded per cell, from cell counts (``assay.store.aggregates.cell_totals``)."""
    recorded: dict[Cell, int] = {}
    for total in totals:
        cell = (total.policy, total.task, total.variant)
        recorded[cell] = recorded.get(cell, 0) + total.episodes
    return recorded


def completeness(planned: Mapping[Cell, int], recorded: Mapping[Cell, int], provisional: bool = False) -> Completeness:
    """Per-cell planned and recorded counts (cells recorded but never planned are listed with planned 0)."""
    cells = sorted(set(planned) | set(recorded))
    return Completeness(tuple(CellCount(p, t, v, planned.get((p, t, v), 0), recorded.get((p, t, v), 0))
                              for p, t, v in cells), provisional)


def campaign_completeness(resolved: Mapping[str, Any], records: Iterable[EpisodeRecord],
                          adaptive: Mapping[str, Any] | None = None) -> Completeness:
    """A campaign's completeness from its resolved document, its linked episodes and its adaptive state."""
    planned, provisional = planned_cells(resolved, adaptive)
    return completeness(planned, recorded_cells(records), provisional)


def totals_completeness(resolved: Mapping[str, Any], totals: Iterable[CellTotals],
                        adaptive: Mapping[str, Any] | None = None) -> Completeness:
    """:func:`campaign_completeness` from the campaign's cell counts."""
    planned, provisional = planned_cells(resolved, adaptive)
    return completeness(planned, recorded_of(totals), provisional)


def missing_rows(covered: Completeness, groups: Sequence[str], rows: Sequence[RateRow]) -> list[RateRow]:
    """Empty rate rows for the planned groups (``groups`` from policy, task, variant) that have no episode yet,
    so a result table lists every planned group; none when grouped by anything else (campaign)."""
    fields = {"policy": 0, "task": 1, "variant": 2}
    if any(g not in fields for g in groups):
        return []
    shown = {tuple(r.group[g] for g in groups) for r in rows}
    planned = {tuple((c.policy, c.task, c.variant)[fields[g]] for g in groups) for c in covered.cells if c.planned > 0}
    return [RateRow(dict(zip(groups, key, strict=True)), 0, 0, 0, 0, 0, 0, None, None, None, None, None)
            for key in sorted(planned - shown)]
