"""Open-loop metrics: how well a policy's actions match recorded ones on recorded observations.

Each recorded episode is replayed *open loop*: the policy sees the recorded
``observation.state`` of every step (never the consequences of its own actions)
and its predicted action is compared with the recorded ``action``. Over all
steps of all episodes of a (policy, task):

* ``mse`` = mean over steps and action dimensions of (â − a)²;
* ``r2`` = mean over action dimensions of 1 − SS_res / SS_tot (``uniform
  average``); dimensions whose recorded action never varies (SS_tot = 0) are
  skipped and counted; if all are, R² is ``None`` with a reason.

Actions are compared **inside the action box**: the environment executes clip(a, low, high),
so both the recorded action and the prediction are clipped to the task's box before the error
(``bounds``; on button-press the expert records actions beyond [−1, 1], and unclipped every
learned policy scored MSE ≈ 8.1–8.2 on the expert's overshoot alone). Each row keeps its
per-episode errors (seed, summed squared error, values) for the bootstrap below.

This module scores; calling the policy is the caller's job (a ``Predictor``), so
metrics never imports policies. ``rank_agreement`` puts an open-loop ranking
beside the closed-loop one: Kendall τ and MMRV with closed-loop success as the
reference and −MSE as the other score (lower MSE ranks higher), each with a
**bootstrap interval over evaluation seeds** when the closed-loop outcomes per seed are
given: the seeds are resampled with replacement, within three strata (seeds with both a
closed-loop episode and a recorded trajectory, seeds with only one of them: ``assay
openloop`` replays a campaign's own seeds, ``olcl`` held-out demos beside separate
evaluation seeds), every policy's success rate and MSE recomputed on the draw (a policy's
episodes on a seed stay paired with the other policies'), and the central interval of τ and
MMRV taken, widened to hold the point estimate; draws where τ is undefined are left out and
counted. ``save_openloop`` keeps a campaign's scores at ``STORE/openloop/<campaign>.json``
for reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from assay.errors import AssayError, StoreError
from assay.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, percentile_interval
from assay.metrics.correlation import _rows, correlation
from assay.serialize import DictMixin
from assay.spec import derive_seed
from assay.store import EpisodeRecord, Outcome, Store, step_matrix, write_blob


@dataclass(frozen=True)
class Trajectory:
    """One recorded episode's observations, actions and camera frames, step by step, for open-loop scoring."""

    record: EpisodeRecord
    observations: np.ndarray  # (steps, state_dim)
    actions: np.ndarray  # (steps, action_dim)
    frames: Mapping[str, np.ndarray] = field(default_factory=dict)  # camera -> recorded (steps, H, W, 3) uint8
    environment: np.ndarray | None = None  # (steps, n): the recorded observation.environment_state, where there is one


# trajectories of one task -> the policy's action at every recorded step, one array per trajectory
Predictor = Callable[[Sequence[Trajectory]], list[np.ndarray]]


def load_trajectories(store: Store, records: Sequence[EpisodeRecord], cameras: Sequence[str] = ()) -> list[Trajectory]:
    """Recorded observations and actions of every record that has step data (checksums verified), with the
    recorded frames of ``cameras`` (for pixel policies; a camera the episode did not record is left out)."""
    from assay.store import step_frames, video_relpath

    out = []
    for record in records:
        if record.data_path is None:
            continue
        table = store.steps(record)
        actions = step_matrix(table, "action", np.float64)
        frames = {camera: step_frames(store.data_root, record.key, camera, len(actions))
                  for camera in cameras if store.files.exists(video_relpath(record.key, camera))}
        environment = (step_matrix(table, "observation.environment_state", np.float64)
                       if "observation.environment_state" in table.column_names else None)
        out.append(Trajectory(record, step_matrix(table, "observation.state", np.float64), actions, frames,
                              environment))
    return out


def action_mse(predicted: np.ndarray, recorded: np.ndarray) -> float:
    """Mean squared error between predicted and recorded actions, over every step and dimension."""
    return float(np.mean((np.asarray(predicted) - np.asarray(recorded)) ** 2))


def r_squared(predicted: np.ndarray, recorded: np.ndarray) -> tuple[float | None, str | None, int]:
    """(R², reason, constant dimensions skipped); R² averaged uniformly over varying dimensions."""
    predicted, recorded = np.asarray(predicted, dtype=np.float64), np.asarray(recorded, dtype=np.float64)
    ss_tot = ((recorded - recorded.mean(axis=0)) ** 2).sum(axis=0)
    ss_res = ((recorded - predicted) ** 2).sum(axis=0)
    varying = ss_tot > 0
    skipped = int((~varying).sum())
    if not varying.any():
        return None, "undefined: the recorded action is constant in every dimension", skipped
    return float(np.mean(1.0 - ss_res[varying] / ss_tot[varying])), None, skipped


@dataclass(frozen=True)
class OpenLoopRow(DictMixin):
    """One (policy, task): action MSE and R² over every recorded step, and the per-episode errors."""

    policy: str
    task: str
    episodes: int
    steps: int
    mse: float
    r2: float | None
    r2_reason: str | None
    constant_dims: int
    clipped: bool = False  # actions clipped to the task's box before the error
    per_episode: tuple[tuple[int, float, int], ...] = ()  # (seed, summed squared error, values) per episode


Bounds = Mapping[str, tuple[float, float]]  # task id -> the action box (low, high)


def _clip(actions: np.ndarray, box: tuple[float, float] | None) -> np.ndarray:
    values = np.asarray(actions, dtype=np.float64)
    return values if box is None else np.clip(values, box[0], box[1])


def openloop_table(trajectories: Sequence[Trajectory], predictors: Mapping[str, Predictor],
                   bounds: Bounds | None = None) -> list[OpenLoopRow]:
    """One row per (policy, task), in sorted order; with ``bounds`` both actions are clipped to the box first."""
    if not trajectories:
        raise AssayError("no recorded trajectories with step data to replay")
    by_task: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        by_task.setdefault(trajectory.record.task_id, []).append(trajectory)
    rows = []
    for policy in sorted(predictors):
        for task in sorted(by_task):
            group = by_task[task]
            predicted = predictors[policy](group)
            for trajectory, actions in zip(group, predicted, strict=True):
                if actions.shape != trajectory.actions.shape:
                    raise AssayError(f"policy {policy!r} predicted actions of shape {actions.shape} for episode "
                                     f"{trajectory.record.key[:12]}; recorded {trajectory.actions.shape}")
            box = None if bounds is None else bounds.get(task)
            predicted = [_clip(a, box) for a in predicted]
            recorded = [_clip(t.actions, box) for t in group]
            pred, true = np.concatenate(predicted), np.concatenate(recorded)
            r2, reason, constant = r_squared(pred, true)
            per_episode = tuple((int(t.record.seed), float(np.sum((a - b) ** 2)), int(a.size))
                                for t, a, b in zip(group, predicted, recorded, strict=True))
            rows.append(OpenLoopRow(policy, task, len(group), len(true), action_mse(pred, true), r2, reason, constant,
                                    box is not None, per_episode))
    return rows


@dataclass(frozen=True)
class RankAgreement:
    """How well open-loop action error ranks a task's policies against their closed-loop success (Kendall, MMRV)."""

    task: str
    policies: tuple[str, ...]
    closed_loop: tuple[float, ...]
    open_loop_mse: tuple[float, ...]
    kendall: float | None
    kendall_reason: str | None
    mmrv: float | None  # None with fewer than two policies (no pair to misrank)
    # (ranked higher open loop, ranked lower) pairs: lower MSE but strictly lower closed-loop success
    misranked: tuple[tuple[str, str], ...] = ()
    kendall_interval: tuple[float, float] | None = None  # bootstrap over evaluation seeds (see the module doc)
    mmrv_interval: tuple[float, float] | None = None
    resamples: int = 0
    undefined_resamples: int = 0  # draws where τ was undefined (a constant side), left out of its interval


def misranked_pairs(policies: Sequence[str], mse: Sequence[float],
                    closed: Sequence[float]) -> tuple[tuple[str, str], ...]:
    """Every pair the open-loop order gets wrong: the policy with the lower MSE has the strictly lower success."""
    out = []
    for i in range(len(policies)):
        for j in range(i + 1, len(policies)):
            if mse[i] == mse[j]:
                continue
            better, other = (i, j) if mse[i] < mse[j] else (j, i)
            if closed[better] < closed[other]:
                out.append((policies[better], policies[other]))
    return tuple(sorted(out))


def first_per_task(records: Sequence[EpisodeRecord], episodes: int) -> list[EpisodeRecord]:
    """At most ``episodes`` recorded episodes per task, in (episode index, variant) order.

    ``openloop --episodes N`` means N per task whatever the number of variants (the first
    seeds first; at one seed, nominal before the other variants by name).
    """
    by_task: dict[str, list[EpisodeRecord]] = {}
    for record in sorted(records, key=lambda r: (r.task_id, r.episode_index, r.variant_name != "nominal",
                                                 r.variant_name, r.key)):
        by_task.setdefault(record.task_id, []).append(record)
    return [r for task in sorted(by_task) for r in by_task[task][:episodes]]


ClosedOutcomes = Mapping[tuple[str, str], Mapping[int, float]]  # (policy, task) -> seed -> 1.0 success / 0.0


def rank_agreement(rows: Sequence[OpenLoopRow], closed_rates: Mapping[tuple[str, str], float],
                   closed_outcomes: ClosedOutcomes | None = None, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED, confidence: float = 0.95) -> list[RankAgreement]:
    """Per task: Kendall τ and MMRV of the open-loop order (−MSE) against closed-loop success rates, with
    bootstrap intervals over evaluation seeds when ``closed_outcomes`` (per seed) is given."""
    result = []
    for task in sorted({r.task for r in rows}):
        cells = [r for r in rows if r.task == task and (r.policy, task) in closed_rates]
        closed = [closed_rates[(r.policy, task)] for r in cells]
        score = [-r.mse for r in cells]
        tau, reason = correlation("kendall", closed, score, ("closed-loop", "open-loop"))
        value, _ = correlation("mmrv", closed, score)
        names, mse = tuple(r.policy for r in cells), tuple(r.mse for r in cells)
        boot: _Boot = (None, None, 0, 0)
        if closed_outcomes is not None and len(cells) >= 2 and all(c.per_episode for c in cells):
            boot = _seed_bootstrap(cells, [closed_outcomes.get((c.policy, task), {}) for c in cells], tau, value,
                                   resamples, derive_seed("openloop-agreement", seed, task), confidence)
        result.append(RankAgreement(task, names, tuple(closed), mse, tau, reason, value,
                                    misranked_pairs(names, mse, closed), *boot))
    return result


# (Kendall interval, MMRV interval, resamples, resamples where τ was undefined)
_Boot = tuple[tuple[float, float] | None, tuple[float, float] | None, int, int]


def _seed_bootstrap(cells: Sequence[OpenLoopRow], outcomes: Sequence[Mapping[int, float]], tau: float | None,
                    mmrv_value: float | None, resamples: int, seed: int, confidence: float) -> _Boot:
    """Kendall τ and MMRV intervals over resampled evaluation seeds (stratified; see the module docstring)."""
    opened = sorted({s for c in cells for s, _, _ in c.per_episode})
    closing = sorted({s for o in outcomes for s in o})
    seeds = sorted(set(opened) | set(closing))
    column = {s: i for i, s in enumerate(seeds)}
    rng = np.random.default_rng(seed)
    weights = np.zeros((resamples, len(seeds)))
    for stratum in (set(opened) & set(closing), set(opened) - set(closing), set(closing) - set(opened)):
        members = np.array([column[s] for s in sorted(stratum)], dtype=np.int64)
        if members.size:
            picks = members[rng.integers(0, members.size, (resamples, members.size))]
            np.add.at(weights, (np.arange(resamples)[:, None], picks), 1.0)
    p = len(cells)
    sse, values = np.zeros((len(seeds), p)), np.zeros((len(seeds), p))
    wins, scored = np.zeros((len(seeds), p)), np.zeros((len(seeds), p))
    for j, (cell, outcome) in enumerate(zip(cells, outcomes, strict=True)):
        for s, error, count in cell.per_episode:
            sse[column[s], j] += error
            values[column[s], j] += count
        for s, success in outcome.items():
            if not np.isnan(success):
                wins[column[s], j] += success
                scored[column[s], j] += 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        mse = (weights @ sse) / (weights @ values)
        rate = (weights @ wins) / (weights @ scored)
    ok = np.asarray(np.isfinite(mse).all(axis=1) & np.isfinite(rate).all(axis=1), dtype=bool)[:, None]
    closed, score = np.where(ok, rate, 0.0), np.where(ok, -mse, 0.0)
    tau_draws = np.where(ok[:, 0], _rows("kendall", closed, score), np.nan)
    mmrv_draws = np.where(ok[:, 0], _rows("mmrv", closed, score), np.nan)
    return (_held(tau_draws, tau, confidence), _held(mmrv_draws, mmrv_value, confidence), resamples,
            int(np.isnan(tau_draws).sum()))


def _held(draws: np.ndarray, point: float | None, confidence: float) -> tuple[float, float] | None:
    """The percentile interval of the finite draws, widened to hold the point estimate (None: no finite draw)."""
    interval = percentile_interval(draws, confidence)
    if interval is None or point is None:
        return None if interval is None else (interval.low, interval.high)
    return min(interval.low, point), max(interval.high, point)


def closed_outcomes(records: Sequence[EpisodeRecord]) -> dict[tuple[str, str], dict[int, float]]:
    """Closed-loop success per (policy, task) and episode seed (``error`` episodes left out), for the bootstrap."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for record in records:
        if record.outcome is not Outcome.ERROR:
            out.setdefault((record.policy_name, record.task_id), {})[record.seed] = float(
                record.outcome is Outcome.SUCCESS)
    return out


def _openloop_relpath(campaign: str) -> str:
    return f"openloop/{campaign}.json"


def save_openloop(store: Store, campaign: str, reference: str, rows: Sequence[OpenLoopRow],
                  closed_rates: Mapping[tuple[str, str], float], agreement: Sequence[RankAgreement],
                  variant: str | None = None) -> str:
    """Keep a campaign's open-loop scores beside its episodes (atomically); return the path under the store."""
    document = {"schema_version": 1, "campaign": campaign, "reference": reference, "variant": variant,
                "openloop": [r.to_dict() for r in rows],
                "closed_loop": [{"policy": p, "task": t, "rate": v} for (p, t), v in sorted(closed_rates.items())],
                "agreement": [asdict(a) for a in agreement]}
    relpath = _openloop_relpath(campaign)
    write_blob(store.root, relpath, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
    return str(store.root / relpath)


def load_openloop(store: Store, campaign: str) -> dict[str, object] | None:
    """What ``assay openloop`` saved for ``campaign`` (None when it was never run)."""
    path = store.root / _openloop_relpath(campaign)
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
        rows = [OpenLoopRow(**{**r, "per_episode": tuple(tuple(e) for e in r.get("per_episode", ()))})
                for r in document["openloop"]]
        agreement = [RankAgreement(**{**a, "policies": tuple(a["policies"]), "closed_loop": tuple(a["closed_loop"]),
                                      "open_loop_mse": tuple(a["open_loop_mse"]),
                                      "misranked": tuple(tuple(p) for p in a.get("misranked", ())),
                                      **{k: tuple(a[k]) for k in ("kendall_interval", "mmrv_interval")
                                         if a.get(k) is not None}})
                     for a in document["agreement"]]
        closed = {(c["policy"], c["task"]): float(c["rate"]) for c in document["closed_loop"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}; rerun `assay openloop --campaign {campaign}`") from None
    return {"reference": document.get("reference"), "variant": document.get("variant"), "rows": rows,
            "closed": closed, "agreement": agreement}
