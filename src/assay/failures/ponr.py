"""The point of no return of a failed episode, and keyframes around it.

``recoverable(t)``: replay the episode's first ``t`` recorded actions, hand over
to the reference policy (the expert) for the rest of the episode's horizon
(``horizon - t`` steps, so "could this episode still have been saved in time"),
and see whether it succeeds. The point of no return is the last ``t`` with
``recoverable(t)``; bisection finds it in O(log T) hand-overs assuming
recoverability only ever goes from true to false (once lost, an episode stays
lost). :func:`scan_ponr` checks every ``t`` and is the ground truth that
assumption is tested against. ``None`` means the reference fails even from the
start (``t = 0``): the case is beyond the reference, not lost by the policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from assay.errors import AssayError
from assay.failures.replay import Replayer
from assay.store import write_blob


@dataclass(frozen=True)
class PointOfNoReturn:
    key: str
    t: int | None  # last step from which the reference still succeeds; None: not even from the start
    steps: int  # recorded actions in the episode
    handoffs: int  # reference rollouts the search ran
    method: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


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


def recoverable_fn(replayer: Replayer, seed: int, actions: np.ndarray, horizon: int, instruction: str = "") -> Callable[[int], bool]:
    def recoverable(t: int) -> bool:
        return replayer.handoff(seed, actions, t, max(0, horizon - t), instruction).success
    return recoverable


def find_ponr(replayer: Replayer, key: str, seed: int, actions: np.ndarray, instruction: str = "") -> PointOfNoReturn:
    fn = recoverable_fn(replayer, seed, actions, replayer.task.horizon, instruction)
    t, calls = bisect_ponr(fn, len(actions))
    return PointOfNoReturn(key, t, len(actions), calls, "bisection")


def save_ponr(root: Path, ponr: PointOfNoReturn) -> Path:
    """Write ``failures/ponr/<key>.json`` under the store root (atomically)."""
    relpath = f"failures/ponr/{ponr.key}.json"
    write_blob(root, relpath, json.dumps(ponr.to_dict(), indent=2, sort_keys=True).encode())
    return root / relpath


def load_ponrs(root: Path) -> dict[str, PointOfNoReturn]:
    out = {}
    for path in sorted((root / "failures" / "ponr").glob("*.json")):
        out[path.stem] = PointOfNoReturn(**json.loads(path.read_text()))
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


def camera_keyframes(data_root: Path, key: str, cameras: list[str], ponr: PointOfNoReturn, out_dir: Path) -> list[Path]:
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
