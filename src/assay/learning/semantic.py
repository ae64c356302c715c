"""The semantic robustness experiment: a policy that reads language, under every semantic factor.

Design (fixed before running): (1) collect ``demos`` scripted-expert episodes per
task on the demonstration seed stream, under the *nominal* instruction only;
(2) train multi-task behaviour cloning conditioned on the MiniLM embedding of the
instruction (``conditioning: instruction``; no task id is given to the network);
(3) on the held-out evaluation seed stream, run that policy, the instruction
router and the scripted expert on every task at nominal and at one pre-declared
level of each semantic factor (``LEVELS``), all on the same seeds; (4) score
retention on paired seeds with bootstrap intervals (``metrics.retention_table``).
Endpoint: semantic retention per policy and factor. The expert never reads the
instruction, so its retention must be exactly 1.0 on every factor: a built-in
check of the pairing, not a finding. Episodes under ``instruction.conflict`` are
marked and scored by the scene's task (axis ``semantic:conflict``): there a low
retention means the policy *followed* the conflicting words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.learning.bc import TrainConfig, TrainResult, train_bc
from assay.learning.data import episode_demo
from assay.learning.runs import DEMO_SEED, EVAL_SEED, bc_spec
from assay.metrics import RetentionRow, retention_table, robustness_profile
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.sim import FACTORS
from assay.spec import CampaignSpec, PolicySpec, content_hash
from assay.store import EpisodeRecord, Outcome, Store

# One level per semantic factor, chosen before any run: the far end of each factor that is still a fair request.
LEVELS: dict[str, Any] = {
    "instruction.paraphrase": "indirect",
    "instruction.synonym": "both",
    "instruction.distractor": 2,
    "instruction.form": "question",
    "instruction.typo_rate": 0.1,
    "instruction.length": "verbose",
    "instruction.referring": "function",
    "instruction.template": "unseen",
    "instruction.conflict": "same-family",
    "instruction.object": "same-category",
}
TASKS = ("metaworld/reach@1", "metaworld/push@1", "metaworld/pick-place@1", "metaworld/drawer-open@1")


@dataclass(frozen=True)
class SemanticConfig:
    """The experiment's size: tasks, demos per task, evaluation seeds per cell, training, horizon, levels."""

    tasks: tuple[str, ...] = TASKS
    demos: int = 25
    episodes: int = 10
    seed: int = 0
    epochs: int = 100
    hidden: tuple[int, ...] = (256, 256)
    horizon: int = 200
    workers: int = 1
    levels: dict[str, Any] = field(default_factory=lambda: dict(LEVELS))

    def __post_init__(self) -> None:
        if min(self.demos, self.episodes, self.epochs) < 1 or not self.tasks:
            raise AssayError("semantic profile: --demos, --episodes and --epochs must be at least 1, "
                             "with one task or more")
        unknown = sorted(set(self.levels) - set(FACTORS))
        if unknown:
            raise AssayError(f"semantic profile: unknown factor(s) {', '.join(unknown)}; "
                             "see `assay factors --axis semantic`")

    def tag(self) -> str:
        """Names the demo set: the same tasks, demo count and horizon share their demonstrations."""
        return content_hash({"tasks": list(self.tasks), "demos": self.demos, "horizon": self.horizon}, length=8)


@dataclass
class SemanticResult:
    """The checkpoint, the campaigns and the paired retention rows of one run."""

    checkpoint: TrainResult
    campaign: str
    demo_campaign: str
    retention: list[RetentionRow]
    nominal: dict[str, tuple[int, int]]  # policy -> (successes, scored) at nominal

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: checkpoint, campaigns, nominal counts, retention rows and the per-axis profile."""
        return {"checkpoint": self.checkpoint.to_dict(), "campaign": self.campaign, "demo_campaign": self.demo_campaign,
                "nominal": {k: list(v) for k, v in self.nominal.items()},
                "retention": [r.to_dict() for r in self.retention],
                "profile": [p.to_dict() for p in robustness_profile(self.retention)]}


def _run(store: Store, spec: CampaignSpec, workers: int) -> list[EpisodeRecord]:
    planned = prepare_campaign(spec)
    executor = InlineExecutor(store.data_root) if workers <= 1 else LocalExecutor(store.data_root, workers=workers)
    run_campaign(planned, store, executor)
    return store.catalog.episodes(campaign=spec.name)


def run_semantic_profile(store: Store, config: SemanticConfig, out_dir: Path,
                         say: Callable[[str], None] = lambda _: None) -> SemanticResult:
    """Collect nominal demos, train instruction-conditioned BC, evaluate it beside the router and the expert."""
    tag = config.tag()
    demo_name = f"semantic-{tag}-demos"
    say(f"collecting {config.demos} expert demos per task ({len(config.tasks)} tasks, nominal instructions)")
    demo_spec = CampaignSpec(name=demo_name, seed=DEMO_SEED, episodes=config.demos, tasks=config.tasks,
                             policies=(PolicySpec(name="expert", builtin="expert"),), horizon=config.horizon,
                             envs_per_worker=4)
    records = [r for r in _run(store, demo_spec, config.workers) if r.outcome is Outcome.SUCCESS]
    if not records:
        raise AssayError("semantic profile: the expert solved no demonstration episode")
    demos = [episode_demo(store, r) for r in sorted(records, key=lambda r: (r.task_id, r.seed))]
    train = TrainConfig(seed=config.seed, epochs=config.epochs, hidden=config.hidden, conditioning="instruction")
    say(f"training instruction-conditioned BC on {len(demos)} demos ({sum(len(d.actions) for d in demos)} frames)")
    checkpoint = train_bc(demos, train, out_dir / f"language-bc-{tag}-s{config.seed}.pt")
    policies = (bc_spec("language-bc", Path(checkpoint.path)), PolicySpec(name="router", builtin="router"),
                PolicySpec(name="expert", builtin="expert"))
    variants = ({}, *({name: value} for name, value in config.levels.items()))
    name = f"semantic-{tag}-eval-{checkpoint.version[-12:]}-{content_hash(config.levels, length=6)}-n{config.episodes}"
    spec = CampaignSpec(name=name, seed=EVAL_SEED, episodes=config.episodes, tasks=config.tasks, policies=policies,
                        variants=variants, horizon=config.horizon, envs_per_worker=4)
    say(f"evaluating 3 policies x {len(config.tasks)} tasks x {len(variants)} variants x {config.episodes} seeds")
    evaluation = _run(store, spec, config.workers)
    nominal = {}
    for policy in policies:
        mine = [r for r in evaluation if r.policy_name == policy.name and r.variant_key == "nominal"]
        nominal[policy.name] = (sum(r.outcome is Outcome.SUCCESS for r in mine),
                                sum(r.outcome is not Outcome.ERROR for r in mine))
    return SemanticResult(checkpoint, name, demo_name, retention_table(evaluation), nominal)


def expert_is_blind(rows: Sequence[RetentionRow], policy: str = "expert") -> bool:
    """True when every row of ``policy`` with a defined retention is exactly 1.0 (it never reads the words)."""
    mine = [r for r in rows if r.policy == policy and r.retention is not None]
    return bool(mine) and all(r.retention == 1.0 and r.only_nominal == r.only_variant == 0 for r in mine)
