"""Probes of a benchmark's own validity for the policies of a campaign (``assay validity CAMPAIGN``).

A score means what the benchmark says only if the policy could not have got it another way:

* **Language shortcut.** The same episodes (task, seed, scene) with the instruction withheld: empty, and another
  task's (``instruction.withheld``). A language-conditioned policy that keeps its success without its words
  was not tested on language by this benchmark. Paired by seed: the retention (probe / nominal) with its
  MOVER-R interval and the paired difference with Newcombe's interval. A policy whose contract reads no
  instruction is not run: nothing it sees changes.
* **Pose resampling** (tasks with fixed initial states, LIBERO's 50): the same seeds with layouts drawn anew by
  LIBERO's own placement initialiser (``libero.init: sampled``), from the distribution the fixed states were
  drawn from. A policy that does worse there has learned the fixed states, not the task. Other scenes, so
  unpaired: Newcombe's interval of the difference of rates.

It runs as an ordinary campaign ``<campaign>-validity`` (the nominal episodes are the campaign's own: the same
keys, not run again) and reads the counts back from the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from assay.errors import AssayError
from assay.metrics import success_interval
from assay.metrics.comparisons import newcombe_interval
from assay.metrics.intervals import newcombe_paired_interval, retention_interval
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.spec import CampaignSpec, campaign_from_data, canonical_json
from assay.store import EpisodeRecord, Outcome, Store

PROBES = {"no instruction": {"instruction.withheld": "empty"},
          "another task's instruction": {"instruction.withheld": "other-task"},
          "resampled layouts": {"libero.init": "sampled"}}
LANGUAGE = ("no instruction", "another task's instruction")
KEEPS = 0.8  # a language probe whose retention's lower end is at least this: success does not need the words


@dataclass(frozen=True)
class ProbeResult:
    """One policy under one probe against its nominal episodes."""

    policy: str
    probe: str
    nominal: tuple[int, int]  # successes, episodes
    probed: tuple[int, int]
    paired: bool
    difference: float | None  # probe - nominal
    low: float | None
    high: float | None
    retention: tuple[float, float, float] | None  # point, low, high (paired probes)
    verdict: str

    def to_dict(self) -> dict[str, object]:
        """Plain data for ``--json``."""
        return {"policy": self.policy, "probe": self.probe, "nominal": list(self.nominal),
                "probed": list(self.probed), "paired": self.paired, "difference": self.difference,
                "low": self.low, "high": self.high, "retention": self.retention, "verdict": self.verdict}


def validity_spec(spec: CampaignSpec, policies: Sequence[str] | None, probes: Sequence[str],
                  suffix: str) -> CampaignSpec:
    """A probe campaign: the campaign's tasks, seeds and policies (or some), nominal and the named probes."""
    data = spec.dump()
    if policies:
        known = [p.name for p in spec.policies]
        unknown = sorted(set(policies) - set(known))
        if unknown:
            raise AssayError(f"campaign {spec.name!r} has no policy {', '.join(unknown)}; its policies: "
                             f"{', '.join(known)}")
        data["policies"] = [p for p in data["policies"] if _name(p) in policies]
    variants: list[object] = ["nominal", *(PROBES[name] for name in probes)]
    data.update(name=f"{spec.name}-validity-{suffix}", variants=variants)
    data.pop("adaptive", None)
    return campaign_from_data(data)


def _name(policy: object) -> str:
    return str(policy["name"]) if isinstance(policy, dict) else str(policy)


def _pairs(nominal: dict[tuple[str, int], bool], probed: dict[tuple[str, int], bool]) -> tuple[int, int, int, int]:
    both = nominal_only = probe_only = neither = 0
    for scene, won in nominal.items():
        if scene not in probed:
            continue
        other = probed[scene]
        both += won and other
        nominal_only += won and not other
        probe_only += other and not won
        neither += not won and not other
    return both, nominal_only, probe_only, neither


def _outcomes(records: Sequence[EpisodeRecord], policy: str, variant: str) -> dict[tuple[str, int], bool]:
    return {(r.task_id, r.seed): r.outcome is Outcome.SUCCESS for r in records
            if r.policy_name == policy and r.variant_name == variant and r.outcome is not Outcome.ERROR}


def _verdict(probe: str, result: ProbeResult) -> str:
    if probe in LANGUAGE:
        if result.retention is None:
            return "no nominal success: the probe says nothing"
        point, low, high = result.retention
        if low >= KEEPS:
            return (f"keeps {point:.0%} of its success with {probe} (retention's lower end {low:.2f} >= {KEEPS}): "
                    "its success here does not depend on its instruction; this benchmark does not test its language")
        if high < 1.0:
            return f"loses success with {probe} (retention {point:.2f} [{low:.2f}, {high:.2f}]): it reads its words"
        return f"inconclusive (retention {point:.2f} [{low:.2f}, {high:.2f}])"
    if result.low is None or result.high is None:
        return "no episodes to compare"
    if result.high < 0:
        return ("succeeds less on resampled layouts than on the fixed initial states: its score on the fixed set "
                "overstates it")
    if result.low > 0:
        return "succeeds more on resampled layouts than on the fixed initial states"
    return "no difference shown between the fixed initial states and resampled layouts"


def analyse(records: Sequence[EpisodeRecord], policies: Sequence[str], probes: Sequence[str]) -> list[ProbeResult]:
    """Each policy under each probe that ran, against its own nominal episodes (module docstring)."""
    out = []
    for policy in policies:
        nominal = _outcomes(records, policy, "nominal")
        for probe in probes:
            name = ",".join(f"{k}={canonical_json(v)}" for k, v in sorted(PROBES[probe].items()))
            probed = _outcomes(records, policy, name)
            if not probed:
                continue
            k0, n0, k1, n1 = sum(nominal.values()), len(nominal), sum(probed.values()), len(probed)
            if probe in LANGUAGE:
                table = _pairs(nominal, probed)
                n = sum(table)
                k0, n0, k1, n1 = table[0] + table[1], n, table[0] + table[2], n
                diff = newcombe_paired_interval(table[0], table[2], table[1], table[3])
                ratio = retention_interval(*table)
                retention = None if ratio is None else ((k1 / k0) if k0 else 0.0, ratio.low, ratio.high)
                paired = True
            else:
                diff, retention, paired = newcombe_interval(k1, n1, k0, n0), None, False
            point = (k1 / n1 - k0 / n0) if n0 and n1 else None
            result = ProbeResult(policy, probe, (k0, n0), (k1, n1), paired, point, diff.low if diff else None,
                                 diff.high if diff else None, retention, "")
            out.append(ProbeResult(**{**result.__dict__, "verdict": _verdict(probe, result)}))
    return out


def run_validity(store: Store, campaign: str, policies: Sequence[str] | None = None,
                 workers: int = 1) -> tuple[list[ProbeResult], dict[str, str]]:
    """Run (or resume) the probe campaign and analyse it; also say, per policy, which probes were skipped and why."""
    from assay.policies.contract import PROMPT_KEY
    from assay.policies.loader import policy_contract

    row = store.campaign(campaign)
    if row is None:
        known = [c.name for c in store.catalog.campaigns()]
        raise AssayError(f"no campaign {campaign!r} in {store.root}; known: {', '.join(known) or 'none yet'}")
    spec = campaign_from_data(row.spec["campaign"])
    known = [p.name for p in spec.policies]
    unknown = sorted(set(policies or ()) - set(known))
    if unknown:
        raise AssayError(f"campaign {campaign!r} has no policy {', '.join(unknown)}; its policies: {', '.join(known)}")
    plan = prepare_campaign(spec)
    fixed = all(task.initial_states for task in plan.tasks)
    skipped: dict[str, str] = {}
    readers = []
    for policy in plan.policies:
        if policies and policy.name not in policies:
            continue
        contract = policy_contract(policy)
        if contract is not None and PROMPT_KEY not in contract.observations:
            skipped[policy.name] = ("reads no instruction (its contract declares no prompt): the language probes "
                                    "cannot move it and were not run")
        else:
            readers.append(policy.name)
    chosen = [p.name for p in plan.policies if not policies or p.name in policies]
    if not fixed:
        for name in chosen:
            why = "its tasks draw initial conditions from the seed (no fixed set to resample)"
            skipped[name] = f"{skipped[name]}; {why}" if name in skipped else why
    runs = ([("language", readers, LANGUAGE)] if readers else []) + \
        ([("layouts", chosen, ("resampled layouts",))] if fixed else [])
    records: list[EpisodeRecord] = []
    for suffix, names, probes in runs:
        probe_plan = prepare_campaign(validity_spec(spec, names, probes, suffix))
        executor = InlineExecutor(store.data_root) if workers <= 1 else LocalExecutor(store.data_root, workers=workers)
        run_campaign(probe_plan, store, executor)
        records += store.catalog.episodes(campaign=probe_plan.spec.name)
    unique = list({(r.key, r.policy_name): r for r in records}.values())
    return analyse(unique, chosen, list(PROBES)), skipped


def rate_text(k: int, n: int) -> str:
    """``k/n = rate [low, high]`` (mid-p 95%)."""
    interval = success_interval(k, n)
    band = f" [{interval.low:.2f}, {interval.high:.2f}]" if interval else ""
    return f"{k}/{n}{band}"
