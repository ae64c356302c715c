"""The point of no return of a failed episode, and keyframes around it.

``recoverable(t)``: replay the episode's first ``t`` recorded actions, hand over
to the reference policy (the expert), give it a fixed, declared **budget** of
steps (by default the task's horizon, whatever ``t`` is), and see whether it
succeeds. The point of no return is the last probed ``t`` from which the expert
still succeeds; a state late in the episode is therefore not "lost" merely
because little time was left. The time-limited reading (budget ``horizon - t``:
"could this episode still have been saved in time") is reported beside it, from
the same hand-overs: the reference does not know its budget, so it succeeds
within ``horizon - t`` exactly when its fixed-budget run succeeded that fast.

Recoverability along an episode is not monotone (a state can be lost and a
later one saved again), so the search never bisects blindly. ``bracket`` probes
every ``stride``-th step and the last step, takes the last recoverable probe,
and bisects only inside the gap after it; the result carries that gap
(``interval``: the last recoverable and the first lost step found), the stride
(states between probes were not looked at), and whether the probes already saw
a lost state before a recoverable one (``non_monotone``). ``scan`` checks every
step and is the ground truth. Under a noisy variant each probe runs ``draws``
noise draws and counts as recoverable when at least half succeed.

Nothing is searched on a replay that does not reproduce the recording
(:meth:`Replayer.verify`): such an episode gets ``verified: false``, the step it
diverged at, and no point of no return. ``t`` is ``None`` when the reference
fails even from the start, or the replay is unverified; ``lost`` is false when
even the last state is recoverable (the policy ran out of time, it did not ruin
the episode).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from assay.errors import AssayError
from assay.failures.replay import Replayer
from assay.serialize import DictMixin
from assay.store import write_blob
from assay.store.roots import Root

DEFAULT_PROBES = 12  # bracket: about this many evenly spaced probes before refining


@dataclass(frozen=True)
class PointOfNoReturn(DictMixin):
    """A failed episode's point of no return: the last recorded step the reference policy still recovers from."""

    key: str
    t: int | None  # last probed step from which the reference succeeds within ``budget``; None: none found
    steps: int  # recorded actions in the episode
    handoffs: int  # reference rollouts the search ran (draws included)
    method: str  # scan | bracket | bisection (older files) | unverified
    budget: int | None = None  # the reference's declared step budget from every state
    lost: bool | None = None  # False: even the last state is recoverable (no point of no return)
    interval: tuple[int, int] | None = None  # (last recoverable, first lost) steps found: the uncertainty
    stride: int = 1  # steps between probes before refining (1: every state was checked)
    non_monotone: bool | None = None  # a probed lost state lies before a recoverable one
    t_time_limited: int | None = None  # the same search with budget horizon - t (among the probes)
    draws: int = 1  # noise draws per probe
    verified: bool | None = None  # the replay reproduced the recording
    mismatch: str | None = None  # why not, when it did not
    probes: dict[str, float] = field(default_factory=dict)  # t -> share of draws that succeeded

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> PointOfNoReturn:
        """Read a stored result back; unknown keys (from newer files) are ignored."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if isinstance(known.get("interval"), list):
            known["interval"] = tuple(known["interval"])  # type: ignore[arg-type]
        return cls(**known)  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line for the CLI, the report and the dashboard."""
        if self.verified is False:
            return f"not searched: {self.mismatch}"
        budget = f"a fixed budget of {self.budget} steps" if self.budget is not None else "the time left"
        if self.t is None:
            return f"the expert fails even from the start with {budget}"
        if self.lost is False:
            head = f"never lost: the expert still succeeds from the last state (step {self.steps}) with {budget}"
        else:
            lo, hi = self.interval or (self.t, self.t)
            head = f"step {self.t} of {self.steps} with {budget} (lost by step {hi}"
            head += f"; probes every {self.stride} steps)" if self.stride > 1 else ")"
        parts = [head]
        if self.non_monotone:
            parts.append("recoverability is not monotone here (a lost state before a recoverable one)")
        if self.t_time_limited is not None and self.budget is not None:
            parts.append(f"time-limited (budget horizon - t): step {self.t_time_limited}")
        if self.draws > 1:
            parts.append(f"{self.draws} noise draws per probe")
        return "; ".join(parts)

    @property
    def point(self) -> int | None:
        """The step to act on: ``t`` when the episode was lost, else None (nothing was ruined)."""
        return self.t if self.lost is not False else None


def bisect_ponr(recoverable: Callable[[int], bool], steps: int) -> tuple[int | None, int]:
    """(last t in [0, steps] with recoverable(t), calls made), assuming true-then-false."""
    calls = 1
    if not recoverable(0):
        return None, calls
    calls += 1
    if recoverable(steps):
        return steps, calls
    lo, hi = 0, steps  # recoverable(lo) and not recoverable(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        calls += 1
        if recoverable(mid):
            lo = mid
        else:
            hi = mid
    return lo, calls


def scan_ponr(recoverable: Callable[[int], bool], steps: int) -> int | None:
    """The last t in [0, steps] with recoverable(t), by checking every t."""
    found = [t for t in range(steps + 1) if recoverable(t)]
    return found[-1] if found else None


@dataclass(frozen=True)
class Search:
    """Where a search over ``recoverable`` ended: see the module docstring."""

    t: int | None
    interval: tuple[int, int] | None
    non_monotone: bool
    probed: dict[int, bool]


def _conclude(probed: dict[int, bool], steps: int) -> Search:
    ordered = sorted(probed)
    good = [t for t in ordered if probed[t]]
    if not good:
        return Search(None, None, False, probed)
    last = good[-1]
    lost_after = [t for t in ordered if t > last]
    non_monotone = any(not probed[t] for t in ordered if t < last)
    return Search(last, (last, lost_after[0]) if lost_after else (last, last), non_monotone, probed)


def bracket_search(recoverable: Callable[[int], bool], steps: int, stride: int) -> Search:
    """Probe every ``stride``-th step and the last, then bisect the gap after the last recoverable probe."""
    probed = {t: recoverable(t) for t in sorted({*range(0, steps + 1, max(1, stride)), steps})}
    search = _conclude(probed, steps)
    if search.interval is None:
        return search
    lo, hi = search.interval
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probed[mid] = recoverable(mid)
        lo, hi = (mid, hi) if probed[mid] else (lo, mid)
    return _conclude(probed, steps)


def scan_search(recoverable: Callable[[int], bool], steps: int) -> Search:
    """Probe every step from 0 to ``steps`` and conclude from all of them (the exhaustive search)."""
    return _conclude({t: recoverable(t) for t in range(steps + 1)}, steps)


def recoverable_fn(
    replayer: Replayer, seed: int, actions: np.ndarray, horizon: int, instruction: str = ""
) -> Callable[[int], bool]:
    """The time-limited reading (budget ``horizon - t``), kept for comparison with the fixed budget."""
    def recoverable(t: int) -> bool:
        return replayer.handoff(seed, actions, t, max(0, horizon - t), instruction).success
    return recoverable


class _Probes:
    """Hand-overs at a fixed budget, memoised per t: success share over draws and steps to success."""

    def __init__(self, replayer: Replayer, seed: int, actions: np.ndarray, budget: int, draws: int,
                 instruction: str) -> None:
        self.replayer, self.seed, self.actions = replayer, seed, actions
        self.budget, self.instruction = budget, instruction
        self.draws = draws if replayer.stochastic else 1
        self.runs: dict[int, list[int | None]] = {}  # t -> steps the reference needed per draw (None: failed)

    def _run(self, t: int) -> list[int | None]:
        if t not in self.runs:
            out: list[int | None] = []
            for draw in range(self.draws):
                rollout = self.replayer.handoff(self.seed, self.actions, t, self.budget, self.instruction, draw)
                out.append(len(rollout.actions) if rollout.success else None)
            self.runs[t] = out
        return self.runs[t]

    def share(self, t: int, budget: int | None = None) -> float:
        limit = self.budget if budget is None else budget
        runs = self._run(t)
        return sum(k is not None and k <= limit for k in runs) / len(runs)

    def fixed(self, t: int) -> bool:
        return self.share(t) >= 0.5

    @property
    def handoffs(self) -> int:
        return sum(len(v) for v in self.runs.values())


def find_ponr(replayer: Replayer, key: str, seed: int, actions: np.ndarray, instruction: str = "",
              states: np.ndarray | None = None, budget: int | None = None, method: str = "bracket",
              draws: int = 3, probes: int = DEFAULT_PROBES) -> PointOfNoReturn:
    """The point of no return of one recorded episode (see the module docstring).

    ``states``: the recorded ``observation.state`` rows; when given, the replay is verified first and an
    episode whose replay diverges gets no search. ``budget`` defaults to the task's horizon.
    """
    steps = len(actions)
    budget = replayer.task.horizon if budget is None else budget
    if budget < 1:
        raise AssayError(f"--budget {budget} is not valid; valid: a positive number of steps")
    if method not in ("bracket", "scan"):
        raise AssayError(f"point-of-no-return method {method!r} is not valid; valid: bracket, scan")
    if states is not None:
        check = replayer.verify(seed, actions, states)
        if not check.ok:
            return PointOfNoReturn(key, None, steps, 1, "unverified", budget, None, verified=False,
                                   mismatch=check.describe())
    probe = _Probes(replayer, seed, actions, budget, draws, instruction)
    stride = 1 if method == "scan" else max(1, math.ceil(steps / probes))
    search = scan_search(probe.fixed, steps) if method == "scan" else bracket_search(probe.fixed, steps, stride)
    horizon = replayer.task.horizon
    timed = _conclude({t: probe.share(t, max(0, horizon - t)) >= 0.5 for t in probe.runs}, steps)
    return PointOfNoReturn(
        key, search.t, steps, probe.handoffs, method, budget,
        lost=None if search.t is None else search.t < steps,
        interval=search.interval, stride=stride, non_monotone=search.non_monotone,
        t_time_limited=timed.t, draws=probe.draws, verified=True if states is not None else None,
        probes={str(t): round(probe.share(t), 4) for t in sorted(probe.runs)})


def save_ponr(root: Path, ponr: PointOfNoReturn) -> Path:
    """Write ``failures/ponr/<key>.json`` under the store root (atomically)."""
    relpath = f"failures/ponr/{ponr.key}.json"
    write_blob(root, relpath, json.dumps(ponr.to_dict(), indent=2, sort_keys=True).encode())
    return root / relpath


def load_ponrs(root: Path) -> dict[str, PointOfNoReturn]:
    """Every stored point of no return of the store at ``root``, by episode key."""
    out = {}
    for path in sorted((root / "failures" / "ponr").glob("*.json")):
        out[path.stem] = PointOfNoReturn.from_dict(json.loads(path.read_text()))
    return out


def keyframe_steps(t: int, steps: int, around: int = 10, count: int = 5) -> list[int]:
    """``count`` steps spread over [t - around, t + around], clipped to the episode."""
    lo, hi = max(0, t - around), min(steps - 1, t + around)
    return sorted({int(round(x)) for x in np.linspace(lo, hi, count)})


def state_plot(path: Path, arrays: dict[str, np.ndarray], ponr: PointOfNoReturn) -> Path:
    """A PNG/SVG (by suffix) of the episode's events with the point of no return and keyframes marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AssayError("keyframe plots need matplotlib: pip install 'assay[failures]'") from None
    names = [n for n in ("ee_obj_dist", "obj_goal_dist", "contact", "grasped", "lifted") if f"info.{n}" in arrays]
    state = arrays["observation.state"]
    figure, axes = plt.subplots(len(names) + 1, 1, figsize=(8, 1.4 * (len(names) + 1)), sharex=True)
    axes[0].plot(state[:, 2], label="hand z")
    axes[0].set_ylabel("hand z (m)")
    for axis, name in zip(axes[1:], names, strict=True):
        axis.plot(arrays[f"info.{name}"])
        axis.set_ylabel(name, fontsize=7)
    for axis in axes:
        if ponr.t is not None:
            axis.axvline(ponr.t, color="red", linewidth=1.0)
            for k in keyframe_steps(ponr.t, len(state)):
                axis.axvline(k, color="grey", linewidth=0.5, linestyle=":")
    axes[0].set_title(f"{ponr.key[:12]}: point of no return t={ponr.t} of {ponr.steps}", fontsize=9)
    axes[-1].set_xlabel("step")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def camera_keyframes(data_root: Root, key: str, cameras: list[str], ponr: PointOfNoReturn, out_dir: Path) -> list[Path]:
    """PNG frames of each camera at the keyframe steps around the point of no return."""
    if ponr.t is None or not cameras:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from assay.store import read_video, video_relpath

    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for camera in cameras:
        frames = read_video(data_root, video_relpath(key, camera))
        for step in keyframe_steps(ponr.t, len(frames)):
            path = out_dir / f"{key}.{camera}.{step:04d}.png"
            plt.imsave(path, frames[step])
            written.append(path)
    return written
