"""The per-layer trace of a MuJoCo simulator, read after each step: physics, a mocap controller, drawing time.

Everything here reads ``MjData`` and writes nothing into it (``mj_contactForce`` reads the solved constraint
forces), so a traced episode is the untraced one, bit for bit. The cheap fields cost a few microseconds a step
(arrays are looked up once, at construction); the opt-in groups (``physics.forces``, ``controller.effort``)
loop over the step's contacts or constraint rows.

* :class:`PhysicsTrace`: contacts after the step, the deepest penetration, the simulator warnings raised in
  the step (MuJoCo's counters), and with ``physics.forces`` the contacts' normal forces, the active constraint
  rows, the largest constraint violation and the solver's iterations.
* :class:`MocapTrace`: a hand driven by a mocap body through a weld (Meta-World's Sawyer): the target the
  action moved the mocap to, the components its box held back, the distance from the target to the hand, and
  with ``controller.effort`` the weld's force.
* :class:`DrawingTrace`: the time a :class:`~assay.sim.render.CameraRenderer` spent drawing since the last step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from assay.sim.protocol import LayerValue
from assay.sim.render import CameraRenderer

FORCES = "physics.forces"
EFFORT = "controller.effort"


class PhysicsTrace:
    """Physics fields of one ``MjModel``/``MjData`` pair."""

    def __init__(self, model: Any, data: Any) -> None:
        self.model, self.data = model, data
        self._counters = data.warning.number  # a live view of MuJoCo's warning counters: looked up once
        self._seen = self._raised_so_far()
        self._force = np.zeros(6)

    def _raised_so_far(self) -> int:
        return sum(self._counters.tolist())  # plain Python on 8 counters: a third of NumPy's cost here

    def reset(self) -> None:
        """A new episode: warnings are counted from here."""
        self._seen = self._raised_so_far()

    def fields(self, groups: frozenset[str]) -> dict[str, LayerValue]:
        """The step's physics fields (``physics.*``)."""
        fields: dict[str, LayerValue] = {}
        self.fill(fields, groups)
        return fields

    def fill(self, fields: dict[str, LayerValue], groups: frozenset[str]) -> None:
        """Add the step's physics fields to ``fields`` (one dict per step, however many parts fill it)."""
        data = self.data
        contacts = data.ncon
        fields["physics.contacts"] = float(contacts)
        fields["physics.penetration"] = max(0.0, -min(data.contact.dist.tolist())) if contacts else 0.0
        so_far = self._raised_so_far()
        fields["physics.warnings"] = float(so_far - self._seen if so_far >= self._seen else so_far)  # reset: zeroed
        self._seen = so_far
        if FORCES in groups:
            import mujoco

            total = largest = 0.0
            for i in range(contacts):
                mujoco.mj_contactForce(self.model, data, i, self._force)
                total += float(self._force[0])
                largest = max(largest, float(self._force[0]))
            rows = data.nefc
            kinds, positions = np.asarray(data.efc_type[:rows]), np.asarray(data.efc_pos[:rows])
            equality = kinds == mujoco.mjtConstraint.mjCNSTR_EQUALITY
            violation = max(float(np.abs(positions[equality]).max(initial=0.0)),
                            float((-positions[~equality]).max(initial=0.0)))
            fields.update({"physics.contact_force": total, "physics.max_contact_force": largest,
                           "physics.constraints": float(rows), "physics.constraint_violation": violation,
                           "physics.solver_iterations": float(data.solver_niter[0])})


class MocapTrace:
    """A hand welded to a mocap body that each action moves within a box (Meta-World's ``set_xyz_action``: the
    mocap position plus ``action[:3] × action_scale``, clipped to ``mocap_low``/``mocap_high``), read from ``env``.
    The target's components at the box are the ones it held back (a clipped target lands exactly on it)."""

    def __init__(self, env: Any, hand_body: str = "hand") -> None:
        self.env = env
        data = env.data
        # live views, looked up once: a lookup through MjData costs more than the arithmetic below
        self._target, self._hand = data.mocap_pos[0], data.xpos[env.model.body(hand_body).id]
        self._low = [float(v) for v in np.asarray(env.mocap_low).reshape(-1)[:3]]
        self._high = [float(v) for v in np.asarray(env.mocap_high).reshape(-1)[:3]]

    def fields(self, groups: frozenset[str]) -> dict[str, LayerValue]:
        """The step's controller fields (``controller.*``). Three components each, in plain Python: a few
        microseconds a step, where NumPy's call overhead on 3-vectors cost several times that."""
        x, y, z = now = self._target.tolist()
        hx, hy, hz = self._hand.tolist()
        (lx, ly, lz), (ux, uy, uz) = self._low, self._high
        fields: dict[str, LayerValue] = {
            "controller.target": now,
            "controller.saturated": float((x <= lx or x >= ux) + (y <= ly or y >= uy) + (z <= lz or z >= uz)),
            "controller.tracking_error": math.sqrt((x - hx) ** 2 + (y - hy) ** 2 + (z - hz) ** 2)}
        if EFFORT in groups:
            data = self.env.data
            import mujoco

            rows = np.asarray(data.efc_type[: data.nefc]) == mujoco.mjtConstraint.mjCNSTR_EQUALITY
            force = np.asarray(data.efc_force[: data.nefc])[rows]
            fields["controller.effort"] = math.sqrt(float(force @ force))
        return fields


class DrawingTrace:
    """How long a renderer drew since the previous call (``render.ms``)."""

    def __init__(self, renderers: list[CameraRenderer]) -> None:
        self.renderers = renderers
        self._seen = self._spent()

    def reset(self) -> None:
        """Count from here (a reset's frames are not its first step's)."""
        self._seen = self._spent()

    def _spent(self) -> float:
        return sum(r.drawing_s for r in self.renderers)

    def fields(self) -> dict[str, LayerValue]:
        """The drawing time since the last call, in milliseconds."""
        spent = self._spent()
        drawn, self._seen = spent - self._seen, spent
        return {"render.ms": drawn * 1000.0}
