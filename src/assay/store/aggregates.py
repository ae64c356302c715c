"""What results are computed from: counts per cell and per paired seed, computed by the database (``GROUP BY``).

``assay results`` on a 100k-episode campaign used to decode every row into an ``EpisodeRecord``
(twice) and bootstrap from them: ~17 KB and ~0.2 ms a row, so a million episodes did not fit in
24 GB. Every number results, comparisons, leaderboards, the report and the dashboard show is a
function of a few counts, so the database computes those and Python reads one row per cell:

* :func:`cell_totals`: per (campaign, policy, task, variant) cell: episodes, successes, failures,
  timeouts, errors, and over the non-error episodes the sum of steps, of returns and of squared
  returns (a mean and a Student-t interval of the return need no more), which the catalog keeps
  as it writes rows (:mod:`assay.store.counts`): reading them costs one row per cell;
* :func:`seed_patterns`: the paired statistics (McNemar, Newcombe, the leaderboard's bootstrap of
  whole seed rows, retention under a variant) need which outcomes occur *together* on one
  (task, variant, seed) across policies, or on one (policy, task, seed) across variants: the
  database groups the episodes by that row and then counts the rows showing each pattern of
  outcome codes (:data:`MISSING`, :data:`SUCCESS`, :data:`FAILED`, :data:`ERRORED`); a campaign of a
  million episodes has a few hundred distinct patterns;
* :func:`count_differences`: the kept counts against a fresh count of the rows, cell by cell (what
  ``assay store verify`` checks);
* the small facts the tables beside them need: renderers (:func:`renderer_totals`), the safety
  filter's interventions (:func:`safety_totals`), a router's chosen skills (:func:`routing_totals`),
  provenance (:func:`provenance_totals`), error reasons and seeds.

A row whose outcome is not one of Assay's is left out of every count (as a reader that decodes
rows leaves it out) and counted in :func:`unsound_rows`. Sums of floats are the database's
(``SUM``, in its own order): a mean return equals the one summed in Python to the last few bits,
not bit for bit. SQLite and PostgreSQL are supported (JSON fields read by ``json_extract`` and
``#>>``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from assay.errors import DuplicateEpisodes
from assay.store import counts, pairs
from assay.store.catalog import Catalog
from assay.store.chunks import select_in
from assay.store.pairs import DUPLICATE as DUPLICATE  # a pattern's outcome codes, re-exported
from assay.store.pairs import ERRORED as ERRORED
from assay.store.pairs import FAILED as FAILED
from assay.store.pairs import MISSING as MISSING
from assay.store.pairs import SUCCESS as SUCCESS
from assay.store.records import Outcome
from assay.store.schema import OUTCOME_VALUES, campaign_episodes, cell_counts, episodes, seed_rows
from assay.store.schema import seed_patterns as pairs_table

OUTCOMES = tuple(o.value for o in Outcome)
Cell = tuple[str, str, str]  # (policy name, task id, variant name)


@dataclass(frozen=True)
class CellTotals:
    """One cell's counts (one campaign, policy, task and variant)."""

    campaign: str
    policy: str
    task: str
    variant_key: str
    variant: str  # the variant's name
    episodes: int
    successes: int
    failures: int
    timeouts: int
    errors: int
    steps: int  # summed over the non-error episodes
    return_sum: float  # over the non-error episodes
    return_squares: float  # sum of squared returns over the non-error episodes

    @property
    def scored(self) -> int:
        """Episodes that count in a rate: every outcome but ``error``."""
        return self.episodes - self.errors


@dataclass(frozen=True)
class Pattern:
    """How many paired rows of one group show one pattern of outcome codes.

    ``group`` is what the rows share: (task, variant key) when the codes run across policies, (policy, task)
    when they run across variant keys; ``codes`` follows the column order asked for.
    """

    group: tuple[str, str]
    codes: tuple[int, ...]
    count: int


def _sound() -> sa.ColumnElement[bool]:
    return episodes.c.outcome.in_(OUTCOMES)


def _linked(campaign: str | None) -> Any:
    query = sa.select().select_from(campaign_episodes.join(episodes, campaign_episodes.c.key == episodes.c.key))
    return query.where(campaign_episodes.c.campaign == campaign) if campaign is not None else query


def _is(outcome: Outcome) -> sa.ColumnElement[int]:
    return sa.case((episodes.c.outcome == outcome.value, 1), else_=0)


def cell_totals(catalog: Catalog, campaign: str | None = None, from_rows: bool = False) -> list[CellTotals]:
    """Every cell of ``campaign`` (every campaign's when None), sorted by campaign, policy, task, variant: the
    counts the catalog keeps (``cell_counts``, :mod:`assay.store.counts`), or with ``from_rows`` counted from
    the rows themselves (a ``GROUP BY`` over the campaign's links)."""
    if from_rows:
        query: Any = counts.counted_rows(campaign_episodes.c.campaign == campaign if campaign is not None else None)
    else:
        query = sa.select(cell_counts)
        if campaign is not None:
            query = query.where(cell_counts.c.campaign == campaign)
    with catalog.engine.connect() as conn:
        found = [CellTotals(r.campaign, r.policy_name, r.task_id, r.variant_key, r.variant_name, int(r.episodes),
                            int(r.successes), int(r.failures), int(r.timeouts), int(r.errors), int(r.steps or 0),
                            float(r.return_sum or 0.0), float(r.return_squares or 0.0))
                 for r in conn.execute(query) if r.episodes]
    return sorted(found, key=lambda t: (t.campaign, t.policy, t.task, t.variant_key))


def seed_patterns(catalog: Catalog, campaign: str, across: str, columns: Sequence[str],
                  variants: Iterable[str] | None = None, tasks: Iterable[str] | None = None,
                  from_rows: bool = False) -> list[Pattern]:
    """The paired rows of ``campaign`` counted by pattern (see the module docstring), sorted.

    ``across`` is ``policy`` (rows: task, variant key, seed; ``columns``: policy names) or ``variant``
    (rows: policy, task, seed; ``columns``: variant keys). ``variants`` (names) and ``tasks`` (ids) keep
    only those episodes. :class:`DuplicateEpisodes` when a row holds two episodes of one column. Read from the
    pattern counts the catalog keeps (:mod:`assay.store.pairs`: one row per group and pattern), or with
    ``from_rows`` counted by the database from the links (a ``GROUP BY`` over the campaign).
    """
    if across not in ("policy", "variant"):
        raise ValueError(f"across must be policy or variant, not {across!r}")
    if from_rows:
        return _counted_patterns(catalog, campaign, across, columns, variants, tasks)
    wanted_tasks = None if tasks is None else set(tasks)
    wanted_variants = None if variants is None else set(variants)
    with catalog.engine.connect() as conn:
        kept = pairs.kept_patterns(conn, campaign, across)
        names = {str(r.variant_key): str(r.variant_name) for r in conn.execute(
            sa.select(cell_counts.c.variant_key, cell_counts.c.variant_name).where(
                cell_counts.c.campaign == campaign).distinct())}

    def named(key: str) -> bool:
        return wanted_variants is None or names.get(key) in wanted_variants

    counted: dict[tuple[tuple[str, str], tuple[int, ...]], int] = defaultdict(int)
    for found in kept:
        task, variant = (found.g0, found.g1) if across == "policy" else (found.g1, None)
        if wanted_tasks is not None and task not in wanted_tasks or variant is not None and not named(variant):
            continue
        codes = tuple(found.codes.get(c, MISSING) if across == "policy" or named(c) else MISSING for c in columns)
        if DUPLICATE in codes:
            raise DuplicateEpisodes(f"two episodes of one {across} on one paired row of {found.g0} / {found.g1}")
        if any(codes):
            counted[((found.g0, found.g1), codes)] += found.rows
    return [Pattern(group, codes, n) for (group, codes), n in sorted(counted.items()) if n]


def _counted_patterns(catalog: Catalog, campaign: str, across: str, columns: Sequence[str],
                      variants: Iterable[str] | None, tasks: Iterable[str] | None) -> list[Pattern]:
    """:func:`seed_patterns` counted by the database from the links (what the kept counts must equal)."""
    column = campaign_episodes.c.policy_name if across == "policy" else episodes.c.variant_key
    first = episodes.c.variant_key if across == "policy" else campaign_episodes.c.policy_name
    group = (episodes.c.task_id, first) if across == "policy" else (first, episodes.c.task_id)
    code = sa.case((episodes.c.outcome == Outcome.SUCCESS.value, SUCCESS),
                   (episodes.c.outcome == Outcome.ERROR.value, ERRORED), else_=FAILED)
    names = [f"c{i}" for i in range(len(columns))]
    rows = _linked(campaign).add_columns(
        *(g.label(f"g{i}") for i, g in enumerate(group)), episodes.c.seed,
        *(sa.func.max(sa.case((column == value, code))).label(name)
          for value, name in zip(columns, names, strict=True)),
        (sa.func.count() - sa.func.count(sa.distinct(column))).label("duplicates"),
    ).where(_sound(), column.in_(list(columns)))
    if variants is not None:
        rows = rows.where(episodes.c.variant_name.in_(list(variants)))
    if tasks is not None:
        rows = rows.where(episodes.c.task_id.in_(list(tasks)))
    inner = rows.group_by(*group, episodes.c.seed).subquery()
    kept = [inner.c.g0, inner.c.g1, *(inner.c[name] for name in names)]
    query = sa.select(*kept, sa.func.count().label("rows"), sa.func.max(inner.c.duplicates).label("duplicates")) \
        .group_by(*kept)
    found: list[Pattern] = []
    with catalog.engine.connect() as conn:
        for r in conn.execute(query):
            if r.duplicates:
                raise DuplicateEpisodes(f"two episodes of one {across} on one paired row of {r.g0} / {r.g1}")
            found.append(Pattern((str(r.g0), str(r.g1)), tuple(MISSING if r[2 + i] is None else int(r[2 + i])
                                                               for i in range(len(columns))), int(r.rows)))
    return sorted(found, key=lambda p: (p.group, p.codes))


def _json(catalog: Catalog, column: sa.ColumnElement[Any], *path: str) -> sa.ColumnElement[Any]:
    """The text (or number) at ``path`` inside a JSON text column, in the catalog's own SQL."""
    if catalog.engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import ARRAY, JSONB

        return sa.cast(column, JSONB).op("#>>")(sa.literal(list(path), ARRAY(sa.Text)))
    # A row whose JSON is broken is skipped here (a reader that decodes rows skips it too), not an error.
    where = "$." + ".".join(f'"{p}"' for p in path)
    return sa.case((sa.func.json_valid(column) == 1, sa.func.json_extract(column, where)))


# Built-in policies that never name a chosen skill (only the router does): a campaign of these has no routing.
NO_ROUTING = frozenset({"expert", "random", "degraded-expert", "perception-expert", "mlp", "bc", "pixel-bc"})


def may_hold(catalog: Catalog, campaign: str, fact: str) -> bool:
    """Whether the campaign's resolved plan allows episodes with ``fact`` (``renderer``: a task renders a camera;
    ``safety``: the campaign runs the safety filter; ``routing``: a policy may name a chosen skill), so that the
    queries reading JSON of every row run only where they can find something. True without a resolved plan."""
    row = catalog.campaign(campaign)
    spec = row.spec if row is not None else {}
    if not spec.get("tasks") or not spec.get("policies"):
        return True
    if fact == "renderer":
        return any((t.get("spec") or {}).get("cameras") for t in spec["tasks"])
    if fact == "safety":
        return bool((spec.get("campaign") or {}).get("safety"))
    return any((p.get("spec") or {}).get("builtin") not in NO_ROUTING for p in spec["policies"])


def _flag(value: Any) -> bool:
    """A JSON boolean as the database returns it (SQLite: 1/0, PostgreSQL's ``#>>``: 'true'/'false')."""
    return value in (1, True, "true", "1")


RENDERER_FIELDS = ("backend", "vendor", "renderer", "version", "software", "gpu_host")


def renderer_totals(catalog: Catalog, campaign: str) -> list[tuple[dict[str, Any], int]]:
    """Each renderer that drew the campaign's frames (its ``provenance.renderer`` fields) and its episodes."""
    if not may_hold(catalog, campaign, "renderer"):
        return []
    fields = [_json(catalog, episodes.c.provenance_json, "renderer", name).label(name) for name in RENDERER_FIELDS]
    query = _linked(campaign).add_columns(*fields, sa.func.count().label("n")).where(
        _sound(), _json(catalog, episodes.c.provenance_json, "renderer", "backend").is_not(None)).group_by(*fields)
    with catalog.engine.connect() as conn:
        return [({name: (_flag(r._mapping[name]) if name in ("software", "gpu_host") else r._mapping[name])
                  for name in RENDERER_FIELDS}, int(r.n)) for r in conn.execute(query)]


def safety_totals(catalog: Catalog, campaign: str, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """Per (policy, task, variant) cell run with the safety filter: episodes, steps and each kind of intervention."""
    if not may_hold(catalog, campaign, "safety"):
        return []
    group = (campaign_episodes.c.policy_name, episodes.c.task_id, episodes.c.variant_name)
    counted = [sa.func.sum(sa.cast(_json(catalog, episodes.c.provenance_json, "run", "interventions", kind),
                                   sa.Integer)).label(f"k{i}") for i, kind in enumerate(kinds)]
    filtered = sa.cast(_json(catalog, episodes.c.provenance_json, "run", "safety"), sa.String).in_(["1", "true"])
    query = _linked(campaign).add_columns(*group, sa.func.count().label("n"),
                                          sa.func.sum(episodes.c.steps).label("steps"), *counted) \
        .where(_sound(), filtered) \
        .group_by(*group).order_by(*group)
    with catalog.engine.connect() as conn:
        return [{"policy": r.policy_name, "task": r.task_id, "variant": r.variant_name, "episodes": int(r.n),
                 "steps": int(r.steps or 0), **{kind: int(r[5 + i] or 0) for i, kind in enumerate(kinds)}}
                for r in conn.execute(query)]


def routing_totals(catalog: Catalog, campaign: str) -> list[tuple[Cell, str, bool, int]]:
    """Per (policy, task, variant), chosen skill and success: the non-error episodes whose policy named a skill."""
    if not may_hold(catalog, campaign, "routing"):
        return []
    skill = _json(catalog, episodes.c.policy_info_json, "chosen_skill")
    success = sa.case((episodes.c.outcome == Outcome.SUCCESS.value, 1), else_=0)
    group = (campaign_episodes.c.policy_name, episodes.c.task_id, episodes.c.variant_name, skill.label("skill"),
             success.label("success"))
    query = _linked(campaign).add_columns(*group, sa.func.count().label("n")).where(
        _sound(), episodes.c.outcome != Outcome.ERROR.value, skill.is_not(None)).group_by(*group)
    with catalog.engine.connect() as conn:
        return [((r.policy_name, r.task_id, r.variant_name), str(r.skill), bool(r.success), int(r.n))
                for r in conn.execute(query)]


def provenance_totals(catalog: Catalog, campaign: str) -> dict[str, dict[str, Any]]:
    """Episodes per code revision, Python version and host, and per package and version (``packages``:
    name -> version -> episodes): one ``GROUP BY`` over the four fields together (a campaign has a few
    combinations), so the rows' JSON is read once."""
    found: dict[str, dict[str, Any]] = {"code_revisions": {}, "python": {}, "hosts": {}, "packages": {}}
    fields = {"code_revisions": "code_revision", "python": "python", "hosts": "host", "packages": "packages"}
    values = [_json(catalog, episodes.c.provenance_json, field).label(name) for name, field in fields.items()]
    query = _linked(campaign).add_columns(*values, sa.func.count().label("n")).where(_sound()).group_by(*values)
    with catalog.engine.connect() as conn:
        for r in conn.execute(query):
            for name in ("code_revisions", "python", "hosts"):
                value = r._mapping[name]
                shown = "unknown" if value is None else str(value)
                found[name][shown] = found[name].get(shown, 0) + int(r.n)
            for package, version in (json.loads(r.packages) if r.packages else {}).items():
                versions = found["packages"].setdefault(str(package), {})
                versions[str(version)] = versions.get(str(version), 0) + int(r.n)
    return found


def error_reasons(catalog: Catalog, campaign: str) -> dict[str, int]:
    """Error episodes per reason: the campaign's error links (a range of the listing index per policy, from the
    links' outcome, which they copy from their episodes) and their rows' reasons."""
    with catalog.engine.connect() as conn:
        named: Sequence[Any] = conn.execute(sa.select(cell_counts.c.policy_name).distinct().where(
            cell_counts.c.campaign == campaign, cell_counts.c.errors > 0)).scalars().all()
        policies = [str(p) for p in named]
        if not policies:
            return {}
        query = _linked(campaign).add_columns(episodes.c.reason, sa.func.count().label("n")) \
            .where(campaign_episodes.c.policy_name.in_(policies), campaign_episodes.c.outcome == Outcome.ERROR.value,
                   episodes.c.outcome == Outcome.ERROR.value).group_by(episodes.c.reason)
        return {str(r.reason): int(r.n) for r in conn.execute(query)}


def campaign_seeds(catalog: Catalog, campaign: str) -> list[int]:
    """The distinct episode seeds of the campaign's sound episodes, sorted (read from its paired seed rows,
    :mod:`assay.store.pairs`: a row per task, variant and seed)."""
    query = sa.select(seed_rows.c.seed).where(seed_rows.c.campaign == campaign, seed_rows.c.across == "policy") \
        .distinct().order_by(seed_rows.c.seed)
    with catalog.engine.connect() as conn:
        seeds: Sequence[Any] = conn.execute(query).scalars().all()
        return [int(seed) for seed in seeds]


def unsound_rows(catalog: Catalog, campaign: str | None = None) -> dict[str, str]:
    """The campaign's rows every count leaves out (an outcome that is not one): key -> why. Reads a partial index
    of such rows only (``schema.unsound_outcomes``), normally empty."""
    found = sa.select(episodes.c.key, episodes.c.outcome).where(~episodes.c.outcome.in_(OUTCOME_VALUES)).subquery()
    query = sa.select(found.c.key, found.c.outcome)
    if campaign is not None:
        linked = sa.select(campaign_episodes.c.key).where(campaign_episodes.c.campaign == campaign,
                                                          campaign_episodes.c.key == found.c.key)
        query = query.where(linked.exists())
    with catalog.engine.connect() as conn:
        return {str(r.key): f"ValueError: {r.outcome!r} is not a valid Outcome" for r in conn.execute(query)}


def variant_dumps(catalog: Catalog, keys: Iterable[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per variant key: its name and stored dump, from one row of each (a key is the hash of its variant)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    with catalog.engine.connect() as conn:
        for key in sorted(set(keys)):
            query = sa.select(episodes.c.variant_name, episodes.c.variant_json).where(
                episodes.c.variant_key == key).limit(20)
            for r in conn.execute(query):
                try:
                    found[key] = (str(r.variant_name), json.loads(r.variant_json))
                    break
                except ValueError:
                    continue  # an undecodable row names no variant
    return found


def variant_examples(catalog: Catalog, campaign: str) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """Per variant key: its name, its stored dump, and whether its first non-error episode in listing order
    (policy, task, episode index) ran under a conflicting instruction (``provenance.instruction.conflict_with``).

    Only a semantic variant's episodes can carry that mark (``sim.semantic.conflict_marks``); so the episodes are
    read (ranked per variant) for the semantic variants alone, and every other variant with a scored episode
    (``cell_counts``) is named from one of its rows, unmarked."""
    with catalog.engine.connect() as conn:
        keys: Sequence[Any] = conn.execute(sa.select(cell_counts.c.variant_key).distinct().where(
            cell_counts.c.campaign == campaign, cell_counts.c.episodes > cell_counts.c.errors)).scalars().all()
    scored = {str(k) for k in keys}
    dumps = variant_dumps(catalog, scored)
    semantic = sorted(k for k, (_, dump) in dumps.items() if any(
        isinstance(p, dict) and p.get("axis") == "semantic" for p in dump.get("perturbations", [])))
    found = {key: (name, dump, False) for key, (name, dump) in dumps.items() if key not in semantic}
    if not semantic:
        return found
    order = sa.func.row_number().over(partition_by=episodes.c.variant_key,
                                      order_by=(campaign_episodes.c.policy_name, episodes.c.task_id,
                                                episodes.c.episode_index))
    conflict = _json(catalog, episodes.c.provenance_json, "instruction", "conflict_with")
    ranked = _linked(campaign).add_columns(episodes.c.variant_key, episodes.c.variant_name, episodes.c.variant_json,
                                           conflict.label("conflict"), order.label("rank")) \
        .where(_sound(), episodes.c.outcome != Outcome.ERROR.value, episodes.c.variant_key.in_(semantic)).subquery()
    query = sa.select(ranked).where(ranked.c.rank == 1)
    with catalog.engine.connect() as conn:
        found |= {str(r.variant_key): (str(r.variant_name), json.loads(r.variant_json), bool(r.conflict))
                  for r in conn.execute(query)}
    return found


def nominal_successes(catalog: Catalog, campaign: str,
                      among: Iterable[tuple[str, str, int]] | None = None) -> dict[tuple[str, str, int], str]:
    """The key of every successful nominal episode of the campaign by (policy, task, seed): the twins failure
    attribution pairs a perturbed failure with (read from the covering indexes, no row decoded). ``among``: only
    the twins of these (policy, task, seed), looked up per task by its seeds in ``ix_episodes_paired`` (a page of
    failures reads its own twins, not the campaign's; a tuple ``IN (task, seed)`` led SQLite's planner to scan
    every nominal episode instead)."""
    query = _linked(campaign).add_columns(campaign_episodes.c.policy_name, episodes.c.task_id, episodes.c.seed,
                                          episodes.c.key) \
        .where(episodes.c.variant_key == "nominal", episodes.c.outcome == Outcome.SUCCESS.value)
    with catalog.engine.connect() as conn:
        if among is None:
            rows: Iterable[Any] = conn.execute(query)
        else:
            wanted = set(among)
            seeds: dict[str, set[int]] = {}
            for _, task, seed in wanted:
                seeds.setdefault(task, set()).add(seed)
            rows = [r for task in sorted(seeds)
                    for r in select_in(conn, query.where(episodes.c.task_id == task), episodes.c.seed,
                                       sorted(seeds[task]))
                    if (str(r.policy_name), str(r.task_id), int(r.seed)) in wanted]
        return {(str(r.policy_name), str(r.task_id), int(r.seed)): str(r.key) for r in rows}


@dataclass(frozen=True)
class CountDifference:
    """A cell whose kept counts (``cell_counts``) differ from a fresh count of its rows: field -> (kept, counted)."""

    campaign: str
    policy: str
    task: str
    variant: str  # the variant's name
    fields: dict[str, tuple[float, float]]

    def describe(self) -> str:
        """One line: the cell and each differing field."""
        told = "; ".join(f"{name} kept {_shown(kept)}, counted {_shown(counted)}"
                         for name, (kept, counted) in self.fields.items())
        return f"{self.campaign} / {self.policy} / {self.task} / {self.variant}: {told}"


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


COUNT_FIELDS = ("episodes", "successes", "failures", "timeouts", "errors", "steps", "return_sum", "return_squares")


def count_differences(catalog: Catalog, campaign: str | None = None) -> tuple[int, list[CountDifference]]:
    """The kept counts against a fresh ``GROUP BY`` of the rows (:func:`cell_totals` both ways): how many cells
    either holds, and the cells that differ. Integers must be equal; sums of returns (added in another order)
    to a relative 1e-9."""
    kept = {(t.campaign, t.policy, t.task, t.variant_key): t for t in cell_totals(catalog, campaign)}
    counted = {(t.campaign, t.policy, t.task, t.variant_key): t for t in cell_totals(catalog, campaign, from_rows=True)}
    found: list[CountDifference] = []
    for cell in sorted(set(kept) | set(counted)):
        a, b = kept.get(cell), counted.get(cell)
        fields = {}
        for name in COUNT_FIELDS:
            x = float(getattr(a, name)) if a is not None else 0.0
            y = float(getattr(b, name)) if b is not None else 0.0
            same = math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) if name.startswith("return") else x == y
            if not same:
                fields[name] = (x, y)
        holder = a if a is not None else b
        if fields and holder is not None:  # one of the two holds the cell
            found.append(CountDifference(cell[0], cell[1], cell[2], holder.variant, fields))
    return len(set(kept) | set(counted)), found



def pattern_differences(catalog: Catalog, campaign: str | None = None) -> list[str]:
    """The groups whose kept paired seed patterns (:mod:`assay.store.pairs`) differ from a fresh ``GROUP BY`` of
    the rows (:func:`seed_patterns` both ways, over every column either names), one line per group and pattern:
    ``campaign / across / g0 / g1: pattern {...} kept N, counted M``. Empty when they agree."""
    columns: dict[tuple[str, str], set[str]] = {}
    with catalog.engine.connect() as conn:
        query = sa.select(cell_counts.c.campaign, cell_counts.c.policy_name, cell_counts.c.variant_key).distinct()
        kept_names = sa.select(pairs_table.c.campaign).distinct()
        if campaign is not None:
            query = query.where(cell_counts.c.campaign == campaign)
            kept_names = kept_names.where(pairs_table.c.campaign == campaign)
        for r in conn.execute(query):
            columns.setdefault((str(r.campaign), "policy"), set()).add(str(r.policy_name))
            columns.setdefault((str(r.campaign), "variant"), set()).add(str(r.variant_key))
        kept_campaigns: Sequence[Any] = conn.execute(kept_names).scalars().all()
        for name in map(str, kept_campaigns):
            for across in pairs.ACROSS:
                for found in pairs.kept_patterns(conn, name, across):
                    columns.setdefault((name, across), set()).update(found.codes)
    lines = []
    for (name, across), named in sorted(columns.items()):
        names = sorted(named)
        both = []
        for from_rows in (False, True):
            try:
                both.append({(p.group, p.codes): p.count
                             for p in seed_patterns(catalog, name, across, names, from_rows=from_rows)})
            except DuplicateEpisodes:
                both.append({})
        kept, counted = both
        for group, codes in sorted({k for k in kept.keys() | counted.keys() if kept.get(k) != counted.get(k)}):
            lines.append(f"{name} / {across} / {group[0]} / {group[1]}: pattern "
                         f"{dict(zip(names, codes, strict=True))} kept {kept.get((group, codes), 0)}, "
                         f"counted {counted.get((group, codes), 0)}")
    return lines
