"""Cross-harness delta attribution: one policy under two protocols, the difference split knob by knob.

``assay protocol diff P Q --policy X`` runs X under P, under Q, and under P with each knob that differs switched
to Q's value alone (``build.with_knob``: horizon, replan, image, settle, prompt, noise, renderer), every run on
the same seeds (the common trials from P's seed), so every comparison is paired by (task, variant, seed). For
each knob the effect is rate(P with Q's knob) − rate(P), with Newcombe's paired 95% interval and McNemar's exact
p (``metrics.paired``); the knobs are ranked by the size of their effect, and a knob "matters" when McNemar's exact
test detects it at 0.05. What one-at-a-time switching leaves unexplained, rate(Q) − rate(P) − Σ effects, is the
interaction (knobs that only matter together), reported beside them.

Refused in one line: two protocols over different tasks or variants (no pairing), or of different backends.
The runs are campaigns in the store (``diff-…``), so a rerun resumes and episodes shared with any other
campaign are reused. They are diagnostic by construction: none is a protocol's traversal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from assay.errors import ManifestError
from assay.metrics.paired import PairedDifference, paired_difference
from assay.protocols.build import KNOB_FIELDS, build_campaign, knob_value, realise_noise, with_knob
from assay.run import CampaignPlan, Executor, run_campaign
from assay.sim import resolve_variant
from assay.spec import PolicySpec, content_hash
from assay.spec.protocol import KNOBS, Manifest
from assay.store import Outcome, Store

ALPHA = 0.05  # a knob "matters" when McNemar's exact p is below this
Outcomes = dict[tuple[str, str, int], bool | None]  # (task, variant label, seed) -> success (None: error)


@dataclass(frozen=True)
class KnobEffect:
    """One knob switched alone from P's value to Q's: the paired effect on the success rate."""

    knob: str
    p_value: Any
    q_value: Any
    campaign: str
    effect: PairedDifference  # B = P with Q's knob, A = P

    @property
    def matters(self) -> bool:
        """Whether McNemar's exact test detects the effect at ``ALPHA`` (the interval alone can leave out 0 at a
        few pairs where the exact test cannot: 3 of 3 discordant pairs one way is p = 0.25)."""
        return self.effect.p_value < ALPHA

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"knob": self.knob, "p_value": self.p_value, "q_value": self.q_value, "campaign": self.campaign,
                "matters": self.matters, **self.effect.to_dict()}


@dataclass(frozen=True)
class ProtocolDiff:
    """P against Q for one policy: the total paired difference and its split across the knobs."""

    p: str
    q: str
    policy: str
    tasks: int
    trials: int
    seed: int
    campaigns: dict[str, str]  # "P", "Q" -> campaign name
    total: PairedDifference  # B = Q, A = P
    effects: tuple[KnobEffect, ...]  # ranked: largest |effect| first
    same: tuple[str, ...]  # knobs P and Q set alike
    notes: tuple[str, ...] = field(default=())

    @property
    def interaction(self) -> float:
        """rate(Q) − rate(P) − Σ one-at-a-time effects: what switching knobs alone does not explain."""
        return self.total.difference - sum(e.effect.difference for e in self.effects)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"p": self.p, "q": self.q, "policy": self.policy, "tasks": self.tasks, "trials": self.trials,
                "seed": self.seed, "campaigns": self.campaigns, "total": self.total.to_dict(),
                "effects": [e.to_dict() for e in self.effects], "interaction": self.interaction,
                "same": list(self.same), "notes": list(self.notes), "diagnostic": True}


def _aligned(p: Manifest, q: Manifest, suites: tuple[str, ...] | None) -> None:
    """One-line ManifestError unless P and Q run the same tasks and variants (up to the noise knob)."""
    if p.backend != q.backend:
        raise ManifestError(f"protocols {p.ref} and {q.ref} run different backends ({p.backend}, {q.backend})")
    p_tasks, q_tasks = p.task_ids(suites), q.task_ids(suites)
    if set(p_tasks) != set(q_tasks):
        only_p, only_q = sorted(set(p_tasks) - set(q_tasks)), sorted(set(q_tasks) - set(p_tasks))
        first = f"{p.ref} only: {only_p[0]}" if only_p else f"{q.ref} only: {only_q[0]}"
        raise ManifestError(f"protocols {p.ref} and {q.ref} run different tasks ({len(only_p)} only in {p.ref}, "
                            f"{len(only_q)} only in {q.ref}; {first}): a diff needs the same tasks on paired seeds")
    noise = q.knobs.noise or p.knobs.noise or "assay"
    ours = sorted((t, e.label, _frozen(realise_noise(e, noise).factors)) for t, e in p.cells(suites))
    theirs = sorted((t, e.label, _frozen(realise_noise(e, noise).factors)) for t, e in q.cells(suites))
    if ours != theirs:
        raise ManifestError(f"protocols {p.ref} and {q.ref} run different variants ({len(ours)} and {len(theirs)} "
                            "(task, variant) cells): a diff needs the same variants on paired seeds")


def _frozen(factors: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in factors.items()))


def _common(manifest: Manifest, trials: int, seed: int) -> Manifest:
    knobs = manifest.knobs.model_copy(update={"trials_per_task": trials, "seed": seed})
    return manifest.model_copy(update={"knobs": knobs, "hash": None})


def outcomes(store: Store, plan: CampaignPlan, manifest: Manifest) -> dict[str, Outcomes]:
    """The campaign's episodes per policy, keyed by (task, the manifest's variant label, seed)."""
    tasks = {t.id: t for t in plan.tasks}
    labels = {(task, resolve_variant(entry.factors, tasks[task]).key): entry.label
              for task, entry in manifest.cells() if task in tasks}
    found: dict[str, Outcomes] = {p.name: {} for p in plan.policies}
    for record in store.catalog.episodes(campaign=plan.spec.name):
        label = labels.get((record.task_id, record.variant_key))
        if label is not None and record.policy_name in found:
            ok = None if record.outcome is Outcome.ERROR else record.outcome is Outcome.SUCCESS
            found[record.policy_name][(record.task_id, label, record.seed)] = ok
    return found




def protocol_diff(p: Manifest, q: Manifest, policies: Sequence[PolicySpec], store: Store, executor: Executor,
                  suites: tuple[str, ...] | None = None, trials: int | None = None, video_fps: float | None = None,
                  on_campaign: Callable[[str, CampaignPlan], None] | None = None) -> list[ProtocolDiff]:
    """Run the policies under P, Q and P with each differing knob switched to Q's, on paired seeds (module doc);
    one diff per policy (they share the campaigns)."""
    _aligned(p, q, suites)
    common = trials or min(p.knobs.trials_per_task, q.knobs.trials_per_task)
    notes = []
    if p.knobs.seed != q.knobs.seed:
        notes.append(f"seeds: {p.ref} starts at {p.knobs.seed}, {q.ref} at {q.knobs.seed}; every run uses "
                     f"{p.ref}'s, so the episodes pair")
    if trials is None and p.knobs.trials_per_task != q.knobs.trials_per_task:
        notes.append(f"trials: {p.ref} runs {p.knobs.trials_per_task} per task, {q.ref} {q.knobs.trials_per_task}; "
                     f"every run uses {common}")
    base, target = _common(p, common, p.knobs.seed), _common(q, common, p.knobs.seed)
    differing = [k for k in KNOBS if knob_value(base, k) != knob_value(target, k)]
    runs = {"P": base, "Q": target, **{k: with_knob(base, k, target) for k in differing}}
    who = "-".join(x.name for x in policies)
    who = who if len(who) <= 40 else content_hash([x.name for x in policies], length=12)
    results: dict[str, dict[str, Outcomes]] = {}
    names: dict[str, str] = {}
    for label, manifest in runs.items():
        name = f"diff-{p.name}-v{p.version}-to-{q.name}-v{q.version}-{label}-{who}"
        plan = build_campaign(manifest, policies, suites, name=name[:100], video_fps=video_fps)
        if on_campaign is not None:
            on_campaign(label, plan)
        run_campaign(plan, store, executor)
        results[label], names[label] = outcomes(store, plan, manifest), plan.spec.name
    same = tuple(k for k in KNOB_FIELDS if k not in differing)
    diffs = []
    for policy in (x.name for x in policies):
        effects = sorted((KnobEffect(k, knob_value(base, k), knob_value(target, k), names[k],
                                     paired_difference(results["P"][policy], results[k][policy])) for k in differing),
                         key=lambda e: (-abs(e.effect.difference), -int(e.matters), e.knob))
        diffs.append(ProtocolDiff(p.ref, q.ref, policy, len(base.task_ids(suites)), common, p.knobs.seed,
                                  {"P": names["P"], "Q": names["Q"]},
                                  paired_difference(results["P"][policy], results["Q"][policy]), tuple(effects), same,
                                  tuple(notes)))
    return diffs
