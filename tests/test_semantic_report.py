"""The report's semantic rows: retention CIs, conflict rows apart, and the blind-policy note."""

from __future__ import annotations

from assay.report import robustness_rows
from assay.report.data import ReportData
from assay.report.html import _robustness
from assay.store import EpisodeRecord, Outcome

S, F = Outcome.SUCCESS, Outcome.FAILURE


def _record(policy: str, factor: str | None, seed: int, outcome: Outcome) -> EpisodeRecord:
    perturbations = [] if factor is None else [{"axis": "semantic", "factor": factor, "value": "x"}]
    marks = {"instruction": {"conflict_with": "metaworld/sweep@1", "scored_against": "scene"}} \
        if factor == "instruction.conflict" else {}
    name = "nominal" if factor is None else f"{factor}=x"
    return EpisodeRecord(key=f"{policy}{name}{seed}", campaign="c", task_id="metaworld/push@1", task_hash="h",
                         variant_key=name, variant_name=name, variant={"perturbations": perturbations},
                         policy_name=policy, policy_version="1", policy_spec={}, seed=seed, episode_index=seed,
                         instruction="", outcome=outcome, reason="", steps=1, total_return=0.0, success_step=None,
                         trajectory_hash="", provenance=marks)


def test_semantic_rows_carry_intervals_and_the_report_says_what_they_mean():
    records = []
    for seed in range(6):
        for factor in (None, "instruction.synonym", "instruction.conflict"):
            records.append(_record("expert", factor, seed, S if seed < 5 else F))
        records.append(_record("lbc", None, seed, S))
        records.append(_record("lbc", "instruction.synonym", seed, S if seed % 2 else F))
        records.append(_record("lbc", "instruction.conflict", seed, F))
    rows = {(r.policy, r.factor): r for r in robustness_rows(records)}
    expert = rows[("expert", "instruction.synonym")]
    assert expert.retention == 1.0 and expert.discordant == 0
    assert rows[("expert", "instruction.conflict")].axis == "semantic:conflict"
    lbc = rows[("lbc", "instruction.synonym")]
    assert lbc.retention == 0.5 and lbc.discordant == 3 and lbc.ci_low is not None and lbc.ci_low <= 0.5 <= lbc.ci_high
    data = ReportData(campaign="c", spec={}, store_root="/", episodes=len(records), rates=(), leaderboard=None,
                      signoffs=(), robustness=tuple(rows.values()), outcomes_by_policy={}, failure_categories={},
                      gallery=(), provenance={}, reproduce=())
    html = _robustness(data)
    assert "95% CI" in html and "semantic:conflict" in html
    assert "<b>expert</b>: semantic retention exactly 1.0 on all 2 variants" in html
    assert "<b>lbc</b>: semantic retention exactly" not in html
