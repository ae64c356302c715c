"""robosuite's observables advance their clocks one by one at every substep: advance each shared clock once.

robosuite 1.4 calls ``env._update_observables()`` after each of a control step's substeps (25 on LIBERO), and
that calls every observable's ``update(model_timestep)`` (38 on a LIBERO scene). An observable samples its sensor
when its clock says so (on LIBERO, at the first substep of a step); at every other substep its ``update`` only adds
the timestep to its clock and compares it with its sampling period: ~900 calls a step that change nothing but the
clocks, ~5% of a state-only LIBERO step.

Observables of the plain ``Observable`` class with no delay, the same sampling period and the same clock (on LIBERO,
all of them: they are reset together and sampled together) keep the same clock for good, so during a step each
such group's clock is advanced once a substep, with ``update``'s own arithmetic and decisions, and the members the
group says are due are sampled in their own order (a sensor may read what an earlier one put in the observation
cache), as ``update`` samples them, each late one after robosuite's warning. The clocks go back to the members when
the step returns.

Where that premise does not hold, robosuite's own ``update`` runs:

* a step with an observable of another kind (a subclass, an ``update`` of its own, a delay), or a step inside a
  step, or a step of an environment that already has an ``_update_observables`` of its own, is robosuite's own;
* a forced update inside a step runs ``update`` on every member, the clocks written back first and read again
  after (robosuite's own for the rest of the step if they no longer group);
* a sensor that raises leaves every clock as robosuite's update would have left it at that observable (the ones
  before it advanced, its own advanced and unsampled, the ones after it untouched), and the exception goes on.

One premise is not checked, as checking it would cost what the grouping saves: nothing changes an observable's
settings (enabled, sampling rate, delay, the set of observables) in the middle of a step. robosuite and LIBERO
change them only between steps (``add_observable``, ``modify_observable``).

Every observation is bit-identical with robosuite's (``tests/test_libero_observables.py`` compares every
observable's value and clock at every step of a LIBERO episode, with a camera drawn at the sampled instant, and
the cases above on made-up observables).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class _Group:
    """Observables that share one clock (``time``, ``sampled``), sampling period and zero delay."""

    __slots__ = ("members", "period", "sampled", "time")

    def __init__(self, period: float, time: float, sampled: bool) -> None:
        self.period, self.time, self.sampled = period, time, sampled
        self.members: list[tuple[int, Any]] = []  # (position among the environment's observables, observable)


def _sample(observable: Any, cache: dict[str, Any]) -> None:
    """``Observable.update``'s sampling: the sensor, corrupted and filtered, as the current value and in the cache."""
    obs = np.array(observable._filter(observable._corrupter(observable._sensor(cache))))
    observable._current_observed_value = obs[0] if len(obs.shape) == 1 and obs.shape[0] == 1 else obs
    cache[observable.name] = np.array(observable._current_observed_value)
    observable._current_delay = observable._delayer()


class _Clocks:
    """One step's grouped clocks of ``inner``'s observables (:meth:`update` stands in for ``_update_observables``)."""

    def __init__(self, inner: Any, plain: Any, no_delay: Any) -> None:
        self.inner, self.plain, self.no_delay = inner, plain, no_delay
        self.groups: list[_Group] = []
        self.grouped = self._read()

    def _read(self) -> bool:
        """Group the enabled observables by clock; False (and no groups) if any is not a plain, undelayed one."""
        groups: dict[tuple[float, float, bool], _Group] = {}
        self.groups = []
        for position, observable in enumerate(self.inner._observables.values()):
            if type(observable) is not self.plain or "update" in vars(observable) or \
                    observable._delayer is not self.no_delay or observable._current_delay != 0.0:
                return False
            if not observable._enabled:
                continue  # its update does nothing
            key = (observable._sampling_timestep, observable._time_since_last_sample, observable._sampled)
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(*key)
            group.members.append((position, observable))
        self.groups = list(groups.values())
        return True

    def update(self, force: bool = False) -> None:
        """What ``_update_observables(force)`` does, each group's clock advanced once."""
        inner = self.inner
        if force or not self.grouped:  # robosuite's own, member by member, between the clocks written back and read
            self.write_back()
            for observable in inner._observables.values():
                observable.update(timestep=inner.model_timestep, obs_cache=inner._obs_cache, force=force)
            self.grouped = self._read()
            return
        due: list[tuple[int, bool, Any]] = []  # (position, late, observable)
        timestep = inner.model_timestep
        before = [(group.time, group.sampled) for group in self.groups]
        for group in self.groups:
            group.time += timestep
            if not group.sampled and group.period >= group.time:  # period - delay, the delay 0.0
                group.sampled = True
                due.extend((position, False, observable) for position, observable in group.members)
            if group.time >= group.period:
                if not group.sampled:
                    due.extend((position, True, observable) for position, observable in group.members)
                group.time %= group.period
                group.sampled = False
        if len(self.groups) > 1:
            due.sort(key=lambda entry: entry[0])
        for position, late, observable in due:
            if late:
                print(f"Warning: sampling rate for observable {observable.name} is either too low or delay is too "
                      f"high. Please adjust one (or both)")
            try:
                _sample(observable, inner._obs_cache)
            except BaseException:
                self._stopped_at(position, before, timestep)
                raise

    def _stopped_at(self, failed: int, before: list[tuple[float, bool]], timestep: float) -> None:
        """A sensor raised at position ``failed``: every clock as robosuite's update leaves it there, and no groups."""
        for group, (time, sampled) in zip(self.groups, before, strict=True):
            for position, observable in group.members:
                if position < failed:
                    observable._time_since_last_sample, observable._sampled = group.time, group.sampled
                elif position == failed:  # its clock advanced, its sample not taken
                    observable._time_since_last_sample, observable._sampled = time + timestep, sampled
                else:
                    observable._time_since_last_sample, observable._sampled = time, sampled
        self.groups, self.grouped = [], False

    def write_back(self) -> None:
        """Each member's clock is its group's again."""
        for group in self.groups:
            for _, observable in group.members:
                observable._time_since_last_sample, observable._sampled = group.time, group.sampled


def install(inner: Any) -> bool:
    """Group ``inner``'s observable clocks during each ``step`` (the module docstring); True when installed (or
    already), False where ``inner`` has no robosuite 1.4 observables or another ``step`` of its own."""
    own = inner.__dict__.get("step")
    if own is not None:
        return bool(getattr(own, "assay_grouped_clocks", False))
    import robosuite

    if not robosuite.__version__.startswith("1.4.") or not isinstance(getattr(inner, "_observables", None), dict):
        return False
    from robosuite.utils.observables import NO_DELAY, Observable

    step = inner.step  # robosuite's own, bound

    def grouped_step(action: Any) -> Any:
        if "_update_observables" in inner.__dict__:  # a step inside a step, or someone else's update: theirs
            return step(action)
        clocks = _Clocks(inner, Observable, NO_DELAY)
        if not clocks.grouped:
            return step(action)
        inner._update_observables = clocks.update
        try:
            return step(action)
        finally:
            del inner._update_observables
            clocks.write_back()

    grouped_step.assay_grouped_clocks = True  # type: ignore[attr-defined]
    inner.step = grouped_step
    return True


def uninstall(inner: Any) -> None:
    """Update the observables as robosuite wrote it again (for comparisons); another ``step`` of its own stays."""
    if getattr(inner.__dict__.get("step"), "assay_grouped_clocks", False):
        del inner.step


__all__ = ["install", "uninstall"]
