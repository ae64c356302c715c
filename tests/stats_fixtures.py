"""Hand-built episode records for the statistics tests (no simulator)."""

from __future__ import annotations

from assay.store import EpisodeRecord, Outcome

CODES = {"S": Outcome.SUCCESS, "F": Outcome.FAILURE, "T": Outcome.TIMEOUT, "E": Outcome.ERROR}


def records(table: dict[tuple[str, str], str], seed_offset: int = 0, variant: str = "nominal") -> list[EpisodeRecord]:
    """``{(policy, task): "SSFE..."}``: one episode per letter, seed = offset + position (so policies pair up)."""
    out = []
    for (policy, task), codes in table.items():
        for i, code in enumerate(codes):
            seed = seed_offset + i
            out.append(EpisodeRecord(
                key=f"{policy}-{task}-{variant}-{seed}", campaign="c", task_id=task, task_hash="h",
                variant_key=variant, variant_name=variant, variant={}, policy_name=policy, policy_version="1",
                policy_spec={}, seed=seed, episode_index=i, instruction="", outcome=CODES[code], reason="",
                steps=10, total_return=0.0, success_step=None, trajectory_hash=""))
    return out
