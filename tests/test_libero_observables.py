"""robosuite's observables with their clocks grouped during a step (``sim.libero_observables``) sample what and when
robosuite's own update does: every observable's value and clock, the observation cache and the camera drawn at the
sampled instant are bit-identical at every step of a LIBERO episode; and on made-up observables of several periods
(one too slow, so it samples late and warns), a delayed one, a disabled one and a forced update."""

from __future__ import annotations

import numpy as np
import pytest

from assay.sim import default_registry, libero_forward, libero_observables, make_env
from assay.sim.libero_env import _quiet
from assay.spec import CameraSpec

pytest.importorskip("libero", reason="LIBERO is not installed (make install-test)")
with _quiet():  # robosuite 1.4's import warns (a deprecated logging call) and prints
    from robosuite.environments.base import MujocoEnv
    from robosuite.utils.observables import Observable, sensor

TASK = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


def _clocks(inner) -> list:
    """Every observable's value and clock (bytes of its value: NaN-safe, exact)."""
    return [(name, np.asarray(o.obs if o.is_active() else o._current_observed_value).tobytes(),
             o._time_since_last_sample, o._sampled, o._current_delay) for name, o in inner._observables.items()]


@pytest.mark.libero
@pytest.mark.sim
def test_a_libero_episode_observes_exactly_as_robosuite():
    task = default_registry().get(TASK).model_copy(update={"cameras": (CameraSpec(name="agentview", width=32,
                                                                                          height=32),)})
    env = make_env(task)
    try:
        inner = env._scene.inner
        assert "step" in inner.__dict__ and libero_observables.install(inner)  # installed; a second is a no-op
        rng = np.random.default_rng(3)
        actions = np.clip(rng.normal(0.0, 0.6, (40, 7)), -1.0, 1.0)
        runs = []
        for grouped in (True, False):
            if not grouped:
                libero_observables.uninstall(inner)
            try:
                observation = env.reset(4)
                rows = [(observation["state"].tobytes(), observation["image.agentview"].tobytes(), _clocks(inner))]
                for action in actions:
                    observation = env.step(action).observation
                    cache = {k: np.asarray(v).tobytes() for k, v in inner._obs_cache.items()}
                    rows.append((observation["state"].tobytes(), observation["image.agentview"].tobytes(),
                                 _clocks(inner), cache))
                runs.append(rows)
            finally:
                libero_observables.install(inner)
        assert runs[0] == runs[1]
        assert libero_forward.install(inner)  # beside the substep's forward (both installed on a LIBERO scene)
    finally:
        env.close()


class _Made:
    """A robosuite-like environment: observables of ``periods`` (Hz) and a step of ``substeps`` model timesteps,
    with robosuite's own ``_update_observables``."""

    _update_observables = MujocoEnv._update_observables

    def __init__(self, substeps: int = 25) -> None:
        self.model_timestep, self.substeps, self.t = 0.002, substeps, 0
        self._obs_cache: dict = {}
        self._observables: dict[str, Observable] = {}
        self.log: list[str] = []

    def add(self, name: str, rate: float, reads: str | None = None, **kwargs) -> None:
        @sensor(modality="made")
        def reading(cache: dict) -> np.ndarray:
            self.log.append(name)
            earlier = cache.get(reads, np.zeros(2)) if reads and cache else np.zeros(2)
            return np.array([self.t, float(np.sum(earlier))])

        self._observables[name] = Observable(name=name, sensor=reading, sampling_rate=rate, **kwargs)
        self.log.clear()  # the constructor's check of the sensor is not a sample

    def step(self, action: float) -> dict:
        for _ in range(self.substeps):
            self.t += 1
            self._update_observables()
        return {name: np.asarray(o.obs).tobytes() for name, o in self._observables.items() if o.is_active()}


def _made() -> _Made:
    made = _Made()
    made.add("arm", 20)
    made.add("hand", 20, reads="arm")  # reads the cache entry the one before it wrote in the same update
    made.add("slow", 7, reads="fast")  # another period: its own clock, sampled out of the fast one's turn
    made.add("fast", 100, reads="arm")
    made.add("late", 1000, reads="hand")  # its period is shorter than a substep: sampled late, with robosuite's warning
    made.add("every", 500, reads="slow")  # its period is a substep: its clock meets it exactly
    made.add("off", 20, enabled=False)
    made.add("hidden", 20, active=False)
    return made


def _run(made: _Made, grouped: bool, steps: int, forced_at: int | None = None) -> list:
    if grouped:
        libero_observables.install(made)
    rows = []
    for k in range(steps):
        if k == forced_at:  # a forced update between steps: robosuite's own, whichever way
            made._update_observables(force=True)
        rows.append((made.step(0.0), _clocks(made), {n: np.asarray(v).tobytes() for n, v in made._obs_cache.items()},
                     list(made.log)))
    return rows


@pytest.mark.parametrize("forced_at", [None, 3])
def test_made_up_observables_of_several_periods_sample_in_robosuites_order(forced_at, capsys, monkeypatch):
    monkeypatch.setattr("robosuite.__version__", "1.4.0")
    grouped = _run(_made(), True, 12, forced_at)
    warned = capsys.readouterr().out
    plain = _run(_made(), False, 12, forced_at)
    assert grouped == plain and warned == capsys.readouterr().out  # the same samples, clocks and warnings
    assert warned.count("Warning: sampling rate for observable late") == 12 * 25  # once a substep
    assert "observable every" not in warned and "observable fast" not in warned
    assert any("slow" in row[3] for row in plain) and plain[-1][3].count("slow") < plain[-1][3].count("arm")


def test_a_forced_update_inside_a_step_and_a_delayed_observable_are_robosuites_own(monkeypatch):
    monkeypatch.setattr("robosuite.__version__", "1.4.0")

    class Forcing(_Made):
        def step(self, action: float) -> dict:
            out = super().step(action)
            self._update_observables(force=True)  # as _get_observations(force_update=True) would, inside a step
            return out

    def build(kind: type) -> _Made:
        made = kind()
        made.add("arm", 20)
        made.add("hand", 10, reads="arm")
        return made

    assert _run(build(Forcing), True, 6) == _run(build(Forcing), False, 6)

    def delayed() -> _Made:
        made = build(_Made)
        made.add("lagging", 20, delayer=lambda: 0.004)
        return made

    made = delayed()
    libero_observables.install(made)
    assert _run(made, False, 6) == _run(delayed(), False, 6)  # a delayed observable: the step is robosuite's own


def test_it_installs_only_on_robosuite_1_4_observables(monkeypatch):
    monkeypatch.setattr("robosuite.__version__", "1.5.2")
    assert not libero_observables.install(_Made())
    monkeypatch.setattr("robosuite.__version__", "1.4.0")
    assert not libero_observables.install(type("NoObservables", (), {"step": lambda self, a: None})())
