"""What every scoring command says about its numbers: the variant scope and how complete the campaign is.

``results``, ``compare`` and ``leaderboard`` open a campaign through :func:`scored_campaign`: it
holds the campaign's episodes, the variant scope of the command (``assay.metrics.scope``: nominal
by default, ``--variant NAME`` or ``--variant all``) and the campaign's completeness against its
plan (``assay.metrics.completeness``). Titles carry the scope's label, JSON documents carry
``scope`` and ``completeness``, and a ranking or comparison over cells with no episode is refused
unless ``--allow-partial``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import say_latest
from assay.errors import AssayError
from assay.metrics import Completeness, VariantScope, campaign_completeness, planned_variants, variant_scope
from assay.store import EpisodeRecord, Store

AllowPartialOpt = Annotated[bool, typer.Option(
    "--allow-partial", help="Rank or compare even when some cells of the campaign have no episode yet (the output "
                            "is marked incomplete; by default that is refused: the missing cells are not missing "
                            "at random).")]
VariantScopeOpt = Annotated[str | None, typer.Option(
    "--variant", help="Score this variant only, or 'all' (pooled; comparisons stay paired within each variant). "
                      "Default: nominal when the campaign plans it, else all.")]


@dataclass(frozen=True)
class Scored:
    """A campaign as a scoring command sees it."""

    name: str
    records: tuple[EpisodeRecord, ...]  # every episode of the campaign
    scope: VariantScope
    completeness: Completeness  # of the whole campaign

    @property
    def scoped(self) -> list[EpisodeRecord]:
        """The episodes in scope."""
        return self.scope.keep(self.records)

    def within(self, policies: Iterable[str] | None = None, tasks: Iterable[str] | None = None) -> Completeness:
        """The completeness of the cells a result covers: these policies and tasks, in scope."""
        return self.completeness.select(policies, tasks, self.scope.variants)

    def document(self, covered: Completeness | None = None) -> dict[str, Any]:
        """``scope`` and ``completeness`` for a JSON document (``covered``: the cells it scores; default all in
        scope); the whole campaign's totals beside them."""
        part = covered if covered is not None else self.within()
        return {"scope": self.scope.to_dict(),
                "completeness": {**part.to_dict(), "campaign": self.completeness.summary()}}

    def title(self, text: str) -> str:
        """A table title naming the scope."""
        return f"{text} ({self.scope.label})"

    def say(self, covered: Completeness | None = None) -> None:
        """Print the completeness line (yellow when incomplete)."""
        part = covered if covered is not None else self.within()
        line = part.describe()
        render.console.print(line if part.complete else f"[yellow]{line}[/]", highlight=False, soft_wrap=True)


def campaign_name(store: Store, name: str | None) -> str:
    """The campaign ``name`` (default: the latest), or AssayError naming the known ones."""
    known = [c.name for c in store.catalog.campaigns()]
    if not known:
        raise AssayError(f"the store {store.root} holds no campaign yet")
    if name is None:
        return say_latest(store, known)  # said on stderr: nobody reads another campaign's numbers by mistake
    if name not in known:
        raise AssayError(f"no campaign {name!r} in {store.root}; known: {', '.join(known)}")
    return name


def scored_campaign(store: Store, name: str | None, variant: str | None, separately: bool = False,
                    records: Sequence[EpisodeRecord] | None = None) -> Scored:
    """The campaign (default: the latest) with its episodes, the scope ``--variant`` asks for and its completeness."""
    from assay.run.adaptive import load_state

    chosen = campaign_name(store, name)
    row = store.catalog.campaign(chosen)
    resolved = row.spec if row is not None else {}
    found = tuple(records if records is not None else store.catalog.episodes(campaign=chosen))
    try:
        scope = variant_scope(planned_variants(resolved, found), variant, separately)
    except AssayError as exc:
        raise AssayError(f"campaign {chosen!r}: {exc}") from None
    complete = campaign_completeness(resolved, found, load_state(store, chosen))
    return Scored(chosen, found, scope, complete)


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
