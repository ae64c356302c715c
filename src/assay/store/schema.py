"""The catalog's tables (SQLAlchemy Core), in one place: the episodes, campaigns and their links, the store's
own facts, the per-cell counts kept beside them (``cell_counts``, :mod:`assay.store.counts`), the episodes
whose files were pruned (``pruned_episodes``, :mod:`assay.store.retention`), the links of forgotten episodes
waiting for their rerun (``forgotten_links``, :mod:`assay.store.relinks`), what the last ``store verify`` found
wrong (``failed_checks``, :mod:`assay.store.checks`) and the drivers' job leases
(``job_claims``, :mod:`assay.store.claims`).

Columns of ``episodes`` are derived from ``EpisodeRecord``'s fields (``assay.store.catalog``); a test keeps
them equal. Two covering indexes serve the aggregate queries (:mod:`assay.store.aggregates`): each link's
``(campaign, key, policy_name)``, and each episode's key with the columns a count reads, so a ``GROUP BY``
over a campaign reads neither table's wide rows.
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
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"episodes": ("data_bytes",)}

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
