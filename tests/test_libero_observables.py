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
def test_a_libero_episode_observes_exactly_as_robosuite(monkeypatch):
    calls = [0]
    update = Observable.update

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Observable, "update", counted)
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
                    calls[0] = 0
                    observation = env.step(action).observation
                    assert calls[0] == (0 if grouped else 25 * len(inner._observables))  # the grouping ran
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
    """A robosuite-like environment: observables, a step of ``substeps`` model timesteps with robosuite's own
    ``_update_observables`` after each, and ``hook(made, substep)`` after each update if given."""

    _update_observables = MujocoEnv._update_observables

    def __init__(self, substeps: int = 25, hook=None) -> None:
        self.model_timestep, self.substeps, self.t, self.hook = 0.002, substeps, 0, hook
        self._obs_cache: dict = {}
        self._observables: dict[str, Observable] = {}
        self.log: list[str] = []

    def add(self, name: str, rate: float, reads: str | None = None, fails_at: int | None = None, kind=Observable,
            **kwargs) -> None:
        @sensor(modality="made")
        def reading(cache: dict) -> np.ndarray:
            if fails_at is not None and self.t == fails_at:
                raise RuntimeError(f"{name}'s sensor failed")
            self.log.append(name)
            earlier = cache.get(reads, np.zeros(2)) if reads and cache else np.zeros(2)
            return np.array([self.t, float(np.sum(earlier))])

        self._observables[name] = kind(name=name, sensor=reading, sampling_rate=rate, **kwargs)
        self.log.clear()  # the constructor's check of the sensor is not a sample

    def step(self, action: float) -> dict:
        for substep in range(self.substeps):
            self.t += 1
            self._update_observables()
            if self.hook is not None:
                self.hook(self, substep)
        return {name: np.asarray(o.obs).tobytes() for name, o in self._observables.items() if o.is_active()}


def _made(hook=None) -> _Made:
    made = _Made(hook=hook)
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
    """Every step's observation, clocks, cache and sample log (or the exception a step raised, and then the same)."""
    if grouped:
        assert libero_observables.install(made)
    rows = []
    for k in range(steps):
        if k == forced_at:  # a forced update between steps: robosuite's own, whichever way
            made._update_observables(force=True)
        try:
            answer = made.step(0.0)
        except RuntimeError as exc:
            answer = str(exc)
        rows.append((answer, _clocks(made), {n: np.asarray(v).tobytes() for n, v in made._obs_cache.items()},
                     list(made.log)))
    return rows


def _both(build, steps: int = 6, capsys=None) -> list:
    """The rows of ``build()`` grouped and as robosuite steps it, asserted equal (and what each printed)."""
    grouped = _run(build(), True, steps)
    printed = capsys.readouterr().out if capsys is not None else None
    plain = _run(build(), False, steps)
    assert grouped == plain
    if capsys is not None:
        assert printed == capsys.readouterr().out
    return plain


@pytest.fixture(autouse=True)
def _robosuite_1_4(monkeypatch):
    monkeypatch.setattr("robosuite.__version__", "1.4.0")  # LIBERO's (the test's robosuite may be another)


@pytest.mark.parametrize("forced_at", [None, 3])
def test_made_up_observables_of_several_periods_sample_in_robosuites_order(forced_at, capsys):
    grouped = _run(_made(), True, 12, forced_at)
    warned = capsys.readouterr().out
    plain = _run(_made(), False, 12, forced_at)
    assert grouped == plain and warned == capsys.readouterr().out  # the same samples, clocks and warnings
    assert warned.count("Warning: sampling rate for observable late") == 12 * 25  # once a substep
    assert "observable every" not in warned and "observable fast" not in warned
    assert any("slow" in row[3] for row in plain) and plain[-1][3].count("slow") < plain[-1][3].count("arm")


def test_observables_of_another_kind_make_the_step_robosuites_own():
    class Halved(Observable):  # an update of its own: half the time passes for it
        def update(self, timestep, obs_cache, force=False):
            super().update(timestep / 2, obs_cache, force)

    def build(kind: str):
        def made() -> _Made:
            made = _made()
            if kind == "subclass":
                made.add("own", 20, kind=Halved)
            elif kind == "instance":
                made.add("own", 20)
                observable = made._observables["own"]
                update = observable.update
                observable.update = lambda timestep, obs_cache, force=False: update(timestep / 2, obs_cache, force)
            else:  # a delay near the period: it moves the instant robosuite samples at
                made.add("own", 20, delayer=lambda: 0.049)
            return made
        return made

    for kind in ("subclass", "instance", "delay"):
        rows = _both(build(kind), steps=8)
        assert any("own" in row[3] for row in rows), kind


def test_a_forced_update_inside_a_step_is_robosuites_own_and_the_rest_of_the_step_follows_it():
    def forcing(made: _Made, substep: int) -> None:
        if substep in (4, 20):
            made._update_observables(force=True)  # as _get_observations(force_update=True) would, inside a step

    _both(lambda: _made(forcing))

    def adding(made: _Made, substep: int) -> None:  # a delayed observable comes in: the clocks no longer group
        if made.t == 30:
            made.add("lagging", 20, delayer=lambda: 0.01)
            made._update_observables(force=True)

    assert any("lagging" in row[3] for row in _both(lambda: _made(adding)))


def test_a_step_inside_a_step_and_a_sensor_that_raises_leave_the_clocks_as_robosuite_does():
    def nesting() -> _Made:
        done: list[int] = []  # each build its own: two steps inside steps, the second inside the first

        def nested(made: _Made, substep: int) -> None:
            if substep == 3 and len(done) < 2:
                done.append(1)
                made.step(0.0)

        return _made(nested)

    _both(nesting)
    for rate, fails_at in ((20, 26), (1000, 27)):  # sampled on time at a step's first substep; late at its second
        def failing(rate: int = rate, fails_at: int = fails_at) -> _Made:
            made = _made()
            made.add("broken", rate, reads="arm", fails_at=fails_at)
            made.add("after", 20)
            return made

        rows = _both(failing, steps=5)
        assert rows[1][0] == "broken's sensor failed" and rows[2][0] != rows[1][0], rate  # raised once, then went on


def test_it_installs_only_on_robosuite_1_4_observables_and_leaves_another_step_alone(monkeypatch):
    made = _Made()
    theirs = made.step
    made.step = theirs  # an instance's own step: not wrapped, not removed
    assert not libero_observables.install(made)
    libero_observables.uninstall(made)
    assert made.__dict__["step"] is theirs
    monkeypatch.setattr("robosuite.__version__", "1.5.2")
    assert not libero_observables.install(_Made())
    monkeypatch.setattr("robosuite.__version__", "1.4.0")
    assert not libero_observables.install(type("NoObservables", (), {"step": lambda self, a: None})())
    made = _Made()
    assert libero_observables.install(made) and libero_observables.install(made)  # a second is a no-op
    libero_observables.uninstall(made)
    assert "step" not in made.__dict__
