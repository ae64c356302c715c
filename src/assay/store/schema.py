"""The catalog's tables (SQLAlchemy Core), in one place: the episodes, campaigns and their links, the store's
own facts, the per-cell counts kept beside them (``cell_counts``, :mod:`assay.store.counts`), the episodes
whose files were pruned (``pruned_episodes``, :mod:`assay.store.retention`), the links of forgotten episodes
waiting for their rerun (``forgotten_links``, :mod:`assay.store.relinks`), what the last ``store verify`` found
wrong (``failed_checks``, :mod:`assay.store.checks`) and the drivers' job leases
(``job_claims``, :mod:`assay.store.claims`).

Columns of ``episodes`` are derived from ``EpisodeRecord``'s fields (``assay.store.catalog``); a test keeps
them equal. Two covering indexes serve the aggregate queries (:mod:`assay.store.aggregates`): each link's
``(campaign, key, policy_name)``, and each episode's key with the columns a count reads, so a ``GROUP BY``
over a campaign reads neither table's wide rows. Beside them: the paired seed rows and their pattern counts
(``seed_rows``, ``seed_patterns``: :mod:`assay.store.pairs`), the listing index a page of a campaign's episodes
reads (:mod:`assay.store.listing`), an episode's paired twins by task and seed, what a resume reads of a row
(``ix_episodes_resume``) and, on SQLite, the rows whose JSON the database rejects (a partial index). A catalog
made before an index gets it on open (:data:`ADDED_INDEXES`).
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

episodes = sa.Table(
    "episodes",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("task_id", sa.String(200), nullable=False, index=True),
    sa.Column("task_hash", sa.String(64), nullable=False),
    sa.Column("variant_key", sa.String(64), nullable=False, index=True),
    sa.Column("variant_name", sa.Text, nullable=False),
    sa.Column("variant_json", sa.Text, nullable=False),
    sa.Column("policy_version", sa.String(200), nullable=False),
    sa.Column("policy_json", sa.Text, nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("episode_index", sa.Integer, nullable=False),
    sa.Column("instruction", sa.Text, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False, index=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("total_return", sa.Float, nullable=False),
    sa.Column("success_step", sa.Integer, nullable=True),
    sa.Column("trajectory_hash", sa.String(64), nullable=False),
    sa.Column("initial_conditions_json", sa.Text, nullable=False),
    sa.Column("policy_info_json", sa.Text, nullable=False, default="{}"),
    sa.Column("data_path", sa.Text, nullable=True),
    sa.Column("data_sha256", sa.String(64), nullable=True),
    sa.Column("data_bytes", sa.BigInteger, nullable=True),
    sa.Column("timings_json", sa.Text, nullable=False),
    sa.Column("provenance_json", sa.Text, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)

campaigns = sa.Table(
    "campaigns",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("spec_hash", sa.String(64), nullable=False),
    sa.Column("spec_json", sa.Text, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)

campaign_episodes = sa.Table(
    "campaign_episodes",
    metadata,
    sa.Column("campaign", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(64), sa.ForeignKey("episodes.key"), primary_key=True),
    sa.Column("policy_name", sa.String(200), nullable=False),
    # The episode's outcome and when the link was made (UTC, ISO 8601 to the microsecond), copied onto the link so
    # that a campaign's episodes are listed newest first, page by page, from one index (:mod:`assay.store.listing`).
    # Added after catalogs were first made: filled from the episodes on open where NULL.
    sa.Column("outcome", sa.String(16), nullable=True),
    sa.Column("linked_at", sa.String(40), nullable=True),
)

store_meta = sa.Table(
    "store_meta",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# What the aggregate queries read of an episode, after its key (a unique covering index: every key is unique).
FACT_COLUMNS = ("task_id", "variant_key", "variant_name", "seed", "outcome", "steps", "total_return")
episode_facts = sa.Index("ix_episodes_facts", episodes.c.key, *(episodes.c[name] for name in FACT_COLUMNS),
                         unique=True)
link_policies = sa.Index("ix_campaign_episodes_policy", campaign_episodes.c.campaign, campaign_episodes.c.key,
                         campaign_episodes.c.policy_name)
# A campaign's links of one policy and outcome in the order they were made: a page of episodes (or of failures),
# newest first, is a range of this index per (policy, outcome) cell (:mod:`assay.store.listing`).
link_listing = sa.Index("ix_campaign_episodes_listing", campaign_episodes.c.campaign, campaign_episodes.c.policy_name,
                        campaign_episodes.c.outcome, campaign_episodes.c.linked_at, campaign_episodes.c.key)
# Links without the two columns above (made before them, or by an older Assay): normally none, so asking costs
# nothing; the catalog fills them on open.
_unlisted = sa.or_(campaign_episodes.c.outcome.is_(None), campaign_episodes.c.linked_at.is_(None))
unlisted_links = sa.Index("ix_campaign_episodes_unlisted", campaign_episodes.c.key, sqlite_where=_unlisted,
                          postgresql_where=_unlisted)

# An episode's paired twins (same task and seed, another variant or policy) found by (task, seed), keys included
# (covering): what failure attribution reads of its failures' successful nominal twins, without a pass over the
# campaign.
episode_twins = sa.Index("ix_episodes_paired", episodes.c.task_id, episodes.c.seed, episodes.c.variant_key,
                         episodes.c.outcome, episodes.c.key)

# What a resume reads of a recorded episode (Catalog.resume_rows: outcome, file and its size), by key: a resume of a
# million episodes reads this index, not a million wide rows scattered over the table.
resume_facts = sa.Index("ix_episodes_resume", episodes.c.key, episodes.c.outcome, episodes.c.data_path,
                        episodes.c.data_bytes)
# The JSON columns of a row (a dict field of EpisodeRecord: ``<field>_json``, and ``policy_json``).
JSON_COLUMNS = ("variant_json", "policy_json", "initial_conditions_json", "policy_info_json", "timings_json",
                "provenance_json")
# On SQLite, the rows whose JSON the database rejects (``json_valid``: edited behind Assay's back): a partial index,
# normally empty and kept by SQLite as rows are written, so a resume asks it instead of checking every row.
_unparsable = sa.not_(sa.and_(*(sa.func.json_valid(episodes.c[name]) == 1 for name in JSON_COLUMNS)))
unparsable_rows = sa.Index("ix_episodes_unparsable", episodes.c.key, sqlite_where=_unparsable).ddl_if(
    dialect="sqlite")

OUTCOME_VALUES = ("success", "failure", "timeout", "error")  # Outcome's values (records.py), for the index below
# The rows whose outcome is none of them: edited behind Assay's back. A partial index, normally empty, so asking
# whether a campaign has any costs nothing.
_unsound = ~episodes.c.outcome.in_(OUTCOME_VALUES)
unsound_outcomes = sa.Index("ix_episodes_unsound", episodes.c.key, sqlite_where=_unsound, postgresql_where=_unsound)

cell_counts = sa.Table(
    "cell_counts",
    metadata,
    sa.Column("campaign", sa.String(200), primary_key=True),
    sa.Column("policy_name", sa.String(200), primary_key=True),
    sa.Column("task_id", sa.String(200), primary_key=True),
    sa.Column("variant_key", sa.String(64), primary_key=True),
    sa.Column("variant_name", sa.Text, nullable=False),
    sa.Column("episodes", sa.BigInteger, nullable=False),
    sa.Column("successes", sa.BigInteger, nullable=False),
    sa.Column("failures", sa.BigInteger, nullable=False),
    sa.Column("timeouts", sa.BigInteger, nullable=False),
    sa.Column("errors", sa.BigInteger, nullable=False),
    sa.Column("steps", sa.BigInteger, nullable=False),  # over the non-error episodes, as the two sums below
    sa.Column("return_sum", sa.Float, nullable=False),
    sa.Column("return_squares", sa.Float, nullable=False),
)

# Paired seed rows (:mod:`assay.store.pairs`), kept beside the rows in the same transactions as ``cell_counts``: one
# row per (campaign, across, group, seed) with the outcome code of each column on it (``across`` "policy": group
# (task, variant key), a column per policy; "variant": group (policy, task), a column per variant key), and how
# many rows of each group show each pattern of codes (what McNemar, Newcombe, the leaderboard's bootstrap and
# retention read: a few hundred rows per campaign, whatever its size).
seed_rows = sa.Table(
    "seed_rows",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),  # a hash of (campaign, across, g0, g1, seed)
    sa.Column("campaign", sa.String(200), nullable=False),
    sa.Column("across", sa.String(8), nullable=False),
    sa.Column("g0", sa.String(200), nullable=False),
    sa.Column("g1", sa.String(200), nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("pattern", sa.Text, nullable=False),  # canonical JSON: column -> outcome code
)
# A paired row by what it pairs (a group's rows for a recount; one row by its group and seed, as a join reads it)
seed_row_groups = sa.Index("ix_seed_rows_row", seed_rows.c.campaign, seed_rows.c.across, seed_rows.c.g0,
                           seed_rows.c.g1, seed_rows.c.seed)
seed_patterns = sa.Table(
    "seed_patterns",
    metadata,
    sa.Column("campaign", sa.String(200), primary_key=True),
    sa.Column("across", sa.String(8), primary_key=True),
    sa.Column("g0", sa.String(200), primary_key=True),
    sa.Column("g1", sa.String(200), primary_key=True),
    sa.Column("pattern_id", sa.String(40), primary_key=True),  # a hash of the pattern
    sa.Column("pattern", sa.Text, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
)

# Episodes whose step file and videos were deleted by ``assay store prune`` (:mod:`assay.store.retention`): their
# rows stay (summaries, counts, keys a resume skips) with ``data_path`` NULL, and here is what the file was.
pruned_episodes = sa.Table(
    "pruned_episodes",
    metadata,
    sa.Column("key", sa.String(64), sa.ForeignKey("episodes.key"), primary_key=True),
    sa.Column("data_path", sa.Text, nullable=False),
    sa.Column("data_sha256", sa.String(64), nullable=True),
    sa.Column("data_bytes", sa.BigInteger, nullable=True),
    sa.Column("pruned_at", sa.String(40), nullable=False),
)

# The links of forgotten episodes (:mod:`assay.store.relinks`): a repair forgets an episode every campaign that
# linked it loses, and re-runs it for one of them; the new row brings every link here back, in its own transaction.
forgotten_links = sa.Table(
    "forgotten_links",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("campaign", sa.String(200), primary_key=True),
    sa.Column("policy_name", sa.String(200), nullable=False),
)

# What the last ``assay store verify`` found wrong (:mod:`assay.store.checks`): replaced by each verify, an entry
# deleted when its episode is forgotten (a repair). A campaign linking one has its results refused.
failed_checks = sa.Table(
    "failed_checks",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("problem", sa.Text, nullable=False),
    sa.Column("found_at", sa.String(40), nullable=False),
)

# Nullable columns added to existing tables after catalogs were first made: an older catalog gets them on
# open (ALTER TABLE ... ADD COLUMN), its old rows holding NULL there. Readers of an older Assay ignore them.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"episodes": ("data_bytes",), "campaign_episodes": ("outcome", "linked_at")}

# Job leases (:mod:`assay.store.claims`): which driver runs a job that has no row yet, and until when its lease
# holds. A driver claims a batch's jobs before it dispatches them and deletes its claims once their rows are
# written; a claim whose lease ran out (its driver died) is taken over. Rows here are transient.
job_claims = sa.Table(
    "job_claims",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("campaign", sa.String(200), nullable=False),
    sa.Column("owner", sa.String(200), nullable=False, index=True),  # host:pid:random of the driver
    sa.Column("expires_at", sa.Float, nullable=False),  # seconds since the epoch, by the owner's clock
)

# The indexes a catalog made before them lacks (``create_all`` makes a missing table's, never a new one of an old
# table): :class:`~assay.store.catalog.Catalog` makes each on open where it is missing.
ADDED_INDEXES = (episode_facts, link_policies, unsound_outcomes, link_listing, unlisted_links, episode_twins,
                 seed_row_groups, resume_facts, unparsable_rows)
