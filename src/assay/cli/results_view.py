"""What ``assay results`` shows beside its rate table (``results_extras``), shared with ``compare`` and
``leaderboard``: the leaderboard with rank intervals, the sign-off gate, routing, safety, leakage, renderer notes,
an adaptive campaign's stopping record, pass^k and the interval's coverage note.

Kept apart from ``stats_commands`` so that ``results`` loads no comparison, correlation or ``scipy.stats`` module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.text import Text

from assay.cli import render
from assay.cli import stats_render as show
from assay.cli.scoring import Scored
from assay.errors import AssayError
from assay.metrics import INTERVAL_METHODS, interval_label, leaderboard, routing_rows, totals_signoff
from assay.store import Store
from assay.store.aggregates import CellTotals, renderer_totals, routing_totals
from assay.store.provenance import renderer_counts_of, renderer_notes_of


@dataclass
class Extras:
    """What ``assay results`` shows beside its rate table."""

    document: dict[str, Any]
    tables: list[Any] = field(default_factory=list)

    def print(self) -> None:
        """Print every extra table."""
        for table in self.tables:
            render.console.print(table)


def results_extras(store: Store, scored: Scored, allow_partial: bool = False) -> Extras:
    """Leaderboard (suite score, CI, rank interval; in the campaign's scope, refused over cells with no
    episode unless ``allow_partial``) and sign-off status of each task of a campaign; routing, safety and
    leakage over all its episodes. Counts from the database; rows are decoded for bc policies' leakage only."""
    from assay.failures.safety import campaign_interventions
    from assay.learning.leakage import stored_leakage

    gate = totals_signoff(scored.scoped, store.root)
    leaks = stored_leakage(store, scored.name)
    safety = campaign_interventions(store, scored.name)
    routing = routing_rows(routing_totals(store.catalog, scored.name))
    document: dict[str, Any] = {"leaderboard": None}
    tables: list[Any] = []
    try:
        scored.within().refuse_missing(f"the leaderboard of campaign {scored.name}", allow_partial)
    except AssayError as exc:
        document["leaderboard_withheld"] = str(exc)
        tables.append(f"[yellow]{escape(str(exc))}[/]")
    else:
        board = leaderboard(scored.grid())
        document["leaderboard"] = {**board.to_dict(), "rows": [r.to_dict() | scored.within([r.policy]).summary()
                                                               for r in board.rows]}
        tables.append(show.leaderboard_table(board, scored.title(f"campaign {scored.name}: leaderboard "
                                                                 "(rank [95% interval])")))
    tables.append(show.signoff_table(gate))
    if routing:
        tables.append(show.routing_table(routing))
    if safety:
        tables.append(show.safety_table(safety))
    if leaks:
        tables.append(show.leakage_table(leaks))
    renderers = renderer_totals(store.catalog, scored.name)
    notes = renderer_notes_of(renderers)  # frames drawn by several renderers, or in software on a GPU host
    tables += [Text(note, style="yellow") for note in notes]
    extras = Extras({**document, "signoff": [s.to_dict() for s in gate],
                     "safety": safety, "leakage": [leak.to_dict() for leak in leaks],
                     "routing": [r.to_dict() for r in routing], "renderers": renderer_counts_of(renderers),
                     "notes": notes}, tables)
    add_adaptive(extras, store.root, scored.name)
    return extras


def add_pass_k(extras: Extras, totals: Sequence[CellTotals], k: int, by: Sequence[str], title: str,
               method: str = "midp") -> None:
    """pass^k per cell of ``by`` and per policy (``pass_k`` in the JSON), for ``assay results --pass-k K``."""
    from assay.cli.passk_render import pass_k_tables
    from assay.metrics.passk import pass_k_rows

    table = pass_k_rows(totals, k, by, method=method)
    extras.document["pass_k"] = table.to_dict()
    extras.tables.extend(pass_k_tables(table, title))


def interval_document(method: str, trials: Sequence[int]) -> dict[str, Any]:
    """The rate interval a table prints (``method``, ``label``) and, when it dips below 0.93 at a trial count the
    table shows, the line that says so (``coverage_note``; ``metrics.coverage_certificate``)."""
    from assay.metrics.coverage_certificate import coverage_note

    if method not in INTERVAL_METHODS:
        raise AssayError(f"--interval {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    return {"method": method, "label": interval_label(method), "coverage_note": coverage_note(method, list(trials))}


def add_adaptive(extras: Extras, root: Path, campaign: str) -> None:
    """An adaptive campaign's stopping reasons, sequential p-values/intervals and episodes saved."""
    from assay.run.adaptive import load_state

    state = load_state(root, campaign)
    if state is not None:
        from assay.cli.adaptive_render import adaptive_render  # the sequential tests load scipy
        from assay.metrics.adaptive_power import equal_power_view

        extras.document["adaptive"] = state
        extras.document["adaptive_equal_power"] = equal_power_view(state)
        extras.tables.extend(adaptive_render(state))


def return_scored(task_id: str) -> bool:
    """Whether a task has no success signal (``SuccessMode.NONE``), so return is its endpoint."""
    from assay.sim import default_registry
    from assay.spec import SuccessMode

    try:
        return default_registry().get(task_id).success is SuccessMode.NONE
    except AssayError:
        return False
