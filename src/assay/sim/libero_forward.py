"""robosuite's OSC substep recomputes the positions and velocities of a state it has just computed: skip the repeats.

robosuite 1.4 runs a control step as ``control_timestep / model_timestep`` substeps (25 on LIBERO) of::

    sim.forward()            # the state the controller reads
    env._pre_action(action)  # the OSC controller: its update() calls sim.forward() again, on the same state
    sim.step()               # mj_step: forward again (with the new controls), then the integration

Nothing between the loop's ``sim.forward()`` and ``sim.step()`` writes positions or velocities (the controller
reads the state and writes the controls last), so the two later forwards' position and velocity stages
(collision detection, kinematics, the mass matrix, the bias forces) give what the loop's forward gave. Their
acceleration stages do not: the controls change, and MuJoCo's constraint solver starts from the warm start the
solve before it left (skipping the controller's forward altogether moved LIBERO's objects by ~1e-13 from the
first step). So:

* inside ``_pre_action``, ``sim.forward()`` runs ``mj_forwardSkip(model, data, mjSTAGE_VEL, 0)``: the actuation,
  the acceleration, the constraint solve and the acceleration sensors, as the full forward runs them;
* the ``sim.step()`` that follows runs ``mj_step2`` (the same stages, then the integration): ``mj_step`` less its
  checks and its position and velocity stages. Where the checks would find a bad state (a NaN, or a value beyond
  ``mjMAXVAL``: MuJoCo then resets it and warns), that step is ``mj_step`` whole.

Every state is bit-identical to robosuite's own step (``tests/test_libero_forward.py`` compares positions,
velocities, warm start, controls, sensors, observations and rewards at every step of expert and noisy episodes,
and counts the position stages MuJoCo ran). Measured here: a state-only LIBERO-Object step costs ~22% less CPU
(docs/PERFORMANCE.md).

One thing is counted differently: a warning that MuJoCo raises in a position or velocity stage (a full contact
buffer) is counted once a substep, where robosuite's three runs of those stages counted it up to three times, so
the trace's ``physics.warnings`` counts fewer. ``info.unstable`` (a warning count that rose) is what it was, except
in one case: a step in which MuJoCo resets a bad state (a reset zeroes the counters) after such warnings earlier in
the episode, where the smaller count before can read as unchanged after. ``mj_step2`` also does not call MuJoCo's
global ``mjcb_control`` callback, which ``mj_step``'s forward does; nothing in robosuite or LIBERO sets it.

Installed only where the premise is known to hold: robosuite 1.4 with every robot under the OSC controller
(LIBERO's ``OSC_POSE``) and MuJoCo's Euler or implicit integrators (``mj_step2`` does not run RK4); elsewhere the
environment steps as robosuite wrote it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _good(values: np.ndarray, limit: float) -> bool:
    """What ``mj_checkPos``/``mj_checkVel`` accept: no NaN and nothing beyond ``limit`` (``mujoco.mjMAXVAL``; MuJoCo's
    ``mju_isBad``)."""
    return bool(np.abs(values).max(initial=0.0) <= limit)


def applies(inner: Any) -> bool:
    """Whether ``inner`` (a robosuite environment) is robosuite 1.4 with every robot under OSC control, integrated
    by a method ``mj_step2`` runs (not RK4)."""
    import mujoco
    import robosuite
    from robosuite.controllers.osc import OperationalSpaceController

    robots = getattr(inner, "robots", None) or []
    return robosuite.__version__.startswith("1.4.") and bool(robots) and all(
        isinstance(getattr(robot, "controller", None), OperationalSpaceController) for robot in robots) and \
        int(inner.sim.model._model.opt.integrator) != int(mujoco.mjtIntegrator.mjINT_RK4)


def install(inner: Any) -> bool:
    """Make ``inner``'s substeps skip the repeated position and velocity stages (the module docstring); True when
    installed, False (nothing changed) where :func:`applies` says no."""
    if "_pre_action" in inner.__dict__:  # installed already (a second wrapper would undo the first's attributes)
        return True
    if not applies(inner):
        return False
    import mujoco

    pre_action = inner._pre_action  # robosuite's own, bound
    stage, limit = mujoco.mjtStage.mjSTAGE_VEL, float(mujoco.mjMAXVAL)

    def repeated_forward() -> None:
        sim = inner.sim
        mujoco.mj_forwardSkip(sim.model._model, sim.data._data, stage, 0)

    def step_after_forward() -> None:
        sim = inner.sim
        del sim.step  # once: the substep's own step
        model, data = sim.model._model, sim.data._data
        if _good(data.qpos, limit) and _good(data.qvel, limit):
            mujoco.mj_step2(model, data)
        else:  # mj_step's checks reset a bad state (and warn): then nothing computed before is current
            mujoco.mj_step(model, data)

    def assay_pre_action(action: Any, policy_step: bool = False) -> Any:
        sim = inner.sim  # the environment's sim now (robosuite replaces it on a hard reset)
        sim.forward = repeated_forward  # instance attributes: the controllers hold this same sim
        try:
            result = pre_action(action, policy_step)
        finally:
            del sim.forward
        sim.step = step_after_forward
        return result

    inner._pre_action = assay_pre_action
    return True


def uninstall(inner: Any) -> None:
    """Step ``inner`` as robosuite wrote it again (for comparisons)."""
    inner.__dict__.pop("_pre_action", None)
    inner.sim.__dict__.pop("step", None)


__all__ = ["applies", "install", "uninstall"]
