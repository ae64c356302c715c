"""What every scoring command says about its numbers: the variant scope and how complete the campaign is.

``results``, ``compare`` and ``leaderboard`` open a campaign through :func:`scored_campaign`: it
holds the campaign's cell counts (computed by the database, ``assay.store.aggregates``: no row is
decoded), the variant scope of the command (``assay.metrics.scope``: nominal by default,
``--variant NAME`` or ``--variant all``) and the campaign's completeness against its plan
(``assay.metrics.completeness``); paired tables come from the database's seed patterns
(:meth:`Scored.grid`), and rows are decoded only where a command needs episodes
(:meth:`Scored.episodes`). Titles carry the scope's label and the campaign's stamp (``reportable``
or ``diagnostic``, ``assay.metrics.stamp``: a partial or unconformant run never prints a bare score), JSON
documents carry ``scope``, ``completeness`` and ``stamp``, and a ranking or comparison over cells with no
episode is refused unless ``--allow-partial``. A campaign linking an episode the last ``assay store verify``
found wrong is refused until it is repaired (:func:`refuse_failed`). ``correlate --campaign``, ``stability`` and
``estimate-real`` read a campaign as a table of rates the same way (:meth:`Scored.require`, :func:`source_document`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.markup import escape

from assay.cli import render
from assay.cli.common import say_latest
from assay.errors import AssayError, unknown_name
from assay.metrics import Completeness, OutcomeGrid, VariantScope, planned_variants, variant_scope
from assay.metrics.completeness import totals_completeness
from assay.metrics.outcomes import SharedRows, match_tasks, stored_grid, stored_shared_grid
from assay.metrics.stamp import Stamp, campaign_stamp, known_manifests
from assay.store import EpisodeRecord, Store
from assay.store.aggregates import CellTotals, cell_totals, unsound_rows

AllowPartialOpt = Annotated[bool, typer.Option(
    "--allow-partial", help="Rank or compare even when some cells of the campaign have no episode yet (the output "
                            "is marked incomplete; by default that is refused: the missing cells are not missing "
                            "at random).")]
VariantScopeOpt = Annotated[str | None, typer.Option(
    "--variant", help="Score this variant only, or 'all' (pooled; comparisons stay paired within each variant). "
                      "Default: nominal when the campaign plans it, else all.")]


@dataclass(frozen=True)
class Scored:
    """A campaign as a scoring command sees it: counts, scope and completeness, over an open store."""

    name: str
    store: Store
    totals: tuple[CellTotals, ...]  # every cell of the campaign
    scope: VariantScope
    completeness: Completeness  # of the whole campaign
    stamp: Stamp  # reportable or diagnostic, and why

    @property
    def scoped(self) -> list[CellTotals]:
        """The cells in scope."""
        chosen = set(self.scope.variants)
        return [t for t in self.totals if t.variant in chosen]

    def tasks(self, names: Sequence[str] | None = None) -> list[str]:
        """The recorded task ids in scope, or those ``names`` name (an id without ``@version`` matches every
        version; AssayError for a name that matches none)."""
        known = {t.task for t in self.scoped}
        return match_tasks(names, known) if names else sorted(known)

    def ranked(self, tasks: Iterable[str], policies: Iterable[str] | None = None) -> list[CellTotals]:
        """The cells in scope a ranking of these tasks (and policies, or all) scores."""
        wanted, chosen = set(tasks), None if policies is None else set(policies)
        return [t for t in self.scoped if t.task in wanted and (chosen is None or t.policy in chosen)]

    def grid(self, tasks: Sequence[str] | None = None) -> OutcomeGrid:
        """The paired seed × policy tables of the scope's episodes (these task ids, or all), from the database."""
        return stored_grid(self.store.catalog, self.name, self.scoped, tasks)

    def shared_grid(self, what: str, allow_partial: bool, tasks: Sequence[str] | None = None,
                    ) -> tuple[OutcomeGrid, SharedRows]:
        """:meth:`grid` over the seed rows every ranked policy ran, for a ranking (``what`` names it). Cells of
        unequal completeness (a policy ran seeds another did not) are refused unless ``allow_partial``: each
        policy ranked on its own seeds compares different episodes, and the seeds run first are not a random
        sample. A task on which the ranked policies share no seed is refused either way."""
        grid, shared = stored_shared_grid(self.store.catalog, self.name, self.scoped, tasks)
        if shared.unshared_tasks:
            raise AssayError(f"{what}: refused, the ranked policies share no seed on task(s) "
                             f"{', '.join(shared.unshared_tasks)}; finish the campaign (rerun `assay run`)")
        if not shared.equal and not allow_partial:
            raise AssayError(f"{what}: refused, its cells are of unequal completeness: the ranked policies share "
                             f"{shared.ranked_on} of the {shared.recorded} seed rows recorded "
                             f"({', '.join(f'{p} ran {n}' for p, n in shared.ran.items())}); ranking each on its own "
                             "seeds compares different episodes: finish the campaign (rerun `assay run`), or pass "
                             f"--allow-partial to rank on the {shared.ranked_on} shared seed rows")
        return grid, shared

    def episodes(self, tasks: Iterable[str] | None = None, policies: Iterable[str] | None = None,
                 all_variants: bool = False) -> list[EpisodeRecord]:
        """The decoded rows of these tasks and policies (None: all) in scope (or of every variant), for the
        commands that need episodes themselves."""
        chosen = None if all_variants else set(self.scope.variants)
        found: list[EpisodeRecord] = []
        for task in sorted(set(tasks)) if tasks is not None else [None]:
            for policy in sorted(set(policies)) if policies is not None else [None]:
                found += [r for r in self.store.catalog.episodes(campaign=self.name, task=task, policy=policy)
                          if chosen is None or r.variant_name in chosen]
        return found

    def within(self, policies: Iterable[str] | None = None, tasks: Iterable[str] | None = None) -> Completeness:
        """The completeness of the cells a result covers: these policies and tasks, in scope."""
        return self.completeness.select(policies, tasks, self.scope.variants)

    def document(self, covered: Completeness | None = None) -> dict[str, Any]:
        """``scope`` and ``completeness`` for a JSON document (``covered``: the cells it scores; default all in
        scope); the whole campaign's totals beside them."""
        part = covered if covered is not None else self.within()
        return {"scope": self.scope.to_dict(),
                "completeness": {**part.to_dict(), "campaign": self.completeness.summary()},
                "stamp": self.stamp.to_dict()}

    def title(self, text: str) -> str:
        """A table title naming the scope and the stamp (``reportable (protocol)`` or ``diagnostic``)."""
        stamp = f"reportable: {self.stamp.protocol}" if self.stamp.reportable else "diagnostic"
        return f"{text} ({self.scope.label}) — {stamp}"

    def say(self, covered: Completeness | None = None, prefix: str = "") -> None:
        """Print the completeness line (yellow when incomplete), after ``prefix``, and the stamp's line."""
        part = covered if covered is not None else self.within()
        line = escape(prefix + part.describe())
        render.console.print(line if part.complete else f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
        self.say_stamp()

    def say_stamp(self) -> None:
        """Print the stamp's line: reportable (green) or diagnostic and why (dim)."""
        stamp = escape(self.stamp.label)
        render.console.print(f"[green]{stamp}[/]" if self.stamp.reportable else f"[dim]{stamp}[/]", highlight=False,
                             soft_wrap=True)

    def require(self, what: str, allow_partial: bool) -> Completeness:
        """The completeness of every cell in scope; AssayError naming ``what`` (the result refused) when a cell has
        no episode at all, unless ``allow_partial``: for the commands that read a campaign as a table of rates
        (``correlate --campaign``, ``stability``, ``estimate-real``)."""
        covered = self.within()
        covered.refuse_missing(f"{what} (campaign {self.name}, {self.scope.label})", allow_partial)
        return covered


def source_document(scored: Scored | None) -> dict[str, Any]:
    """``campaign``, ``scope`` and ``completeness`` of a result whose side is a campaign, or all None for a CSV."""
    if scored is None:
        return {"campaign": None, "scope": None, "completeness": None}
    return {"campaign": scored.name, **scored.document()}


def campaign_name(store: Store, name: str | None) -> str:
    """The campaign ``name`` (default: the latest), or AssayError naming the known ones."""
    known = [c.name for c in store.catalog.campaigns()]
    if not known:
        raise AssayError(f"the store {store.root} holds no campaign yet")
    if name is None:
        return say_latest(store, known)  # said on stderr: nobody reads another campaign's numbers by mistake
    name = unicodedata.normalize("NFC", name)  # as campaign specs store names (assay.spec.names)
    if name not in known:
        raise AssayError(unknown_name("campaign", name, known, store.root))
    return name


def scored_campaign(store: Store, name: str | None, variant: str | None, separately: bool = False,
                    totals: Sequence[CellTotals] | None = None) -> Scored:
    """The campaign (default: the latest) with its cell counts, the scope ``--variant`` asks for and its
    completeness; ``store`` must stay open while the result is used."""
    from assay.run.adaptive import load_state

    chosen = campaign_name(store, name)
    refuse_failed(store, chosen)
    row = store.catalog.campaign(chosen)
    resolved = row.spec if row is not None else {}
    left_out = unsound_rows(store.catalog, chosen)  # reads the covering index only
    store.catalog.skipped.update(left_out)  # named on exit, as a reader that decodes rows names them
    # The kept counts were made from the rows as written; a row whose outcome was edited to none since then
    # is left out by counting the campaign's rows themselves.
    found = tuple(totals if totals is not None else cell_totals(store.catalog, chosen, from_rows=bool(left_out)))
    try:
        available = planned_variants(resolved) or sorted({t.variant for t in found})
        scope = variant_scope(available, variant, separately)
    except AssayError as exc:
        raise AssayError(f"campaign {chosen!r}: {exc}") from None
    complete = totals_completeness(resolved, found, load_state(store, chosen))
    manifests, _ = known_manifests(store.root)
    return Scored(chosen, store, found, scope, complete, campaign_stamp(resolved, complete, found, manifests))


def refuse_failed(store: Store, campaign: str) -> None:
    """AssayError when the last ``assay store verify`` found episodes of ``campaign`` wrong that no repair has re-run
    since (``Store.failed_checks``): its numbers would count rows their step data contradicts."""
    failed = store.failed_checks(campaign=campaign)
    if not failed:
        return
    key, why = min(failed.items())
    shown = why if len(why) <= 160 else why[:157] + "..."
    more = f", and {len(failed) - 1} more" if len(failed) > 1 else ""
    raise AssayError(f"campaign {campaign!r}: {len(failed)} of its episodes failed `assay store verify` ({key[:12]}: "
                     f"{shown}{more}); its results are refused until they are repaired: rerun the campaign (`assay "
                     "run` re-runs them), then `assay store verify`")


def planned_tasks(scored: Scored, tasks: str | None) -> list[str] | None:
    """The planned task ids a ``--tasks`` option names (an id without ``@version`` matches every version);
    None for all. AssayError for a name the campaign does not plan."""
    if not tasks:
        return None
    known = sorted({c.task for c in scored.completeness.cells})
    chosen: list[str] = []
    for ref in (part.strip() for part in tasks.split(",") if part.strip()):
        hits = [t for t in known if t == ref or t.split("@")[0] == ref]
        if not hits:
            raise AssayError(f"campaign {scored.name!r} has no task {ref!r}; valid: {', '.join(known)}")
        chosen += hits
    return chosen
