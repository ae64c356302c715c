"""Reset-time and build-time perturbations of a Meta-World (MuJoCo) model.

Every reset first restores the nominal model arrays saved at build time, then
applies the variant's factors, so no perturbation leaks from one episode into
the next in a reused environment. The "manipulated object" is the body nearest
to the object position that Meta-World reports in the observation (dims 4:7).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.sim.factors import value_of
from assay.sim.render import VIEWS, View
from assay.spec import Variant

_ROBOT_PREFIXES = ("right_", "hand", "leftclaw", "rightclaw", "leftpad", "rightpad", "mocap", "world", "base",
                   "controller_box", "pedestal", "torso", "head", "screen", "tablelink", "RetainingWall")
_SAVED = ("light_diffuse", "light_specular", "light_ambient", "light_dir", "light_pos", "geom_rgba", "mat_rgba",
          "body_mass", "body_inertia", "geom_friction", "dof_damping", "geom_matid")


def _rotate_z(vectors: np.ndarray, degrees: float) -> np.ndarray:
    angle = np.deg2rad(degrees)
    c, s = np.cos(angle), np.sin(angle)
    rotated = vectors.copy()
    rotated[:, 0] = c * vectors[:, 0] - s * vectors[:, 1]
    rotated[:, 1] = s * vectors[:, 0] + c * vectors[:, 1]
    return rotated


class ModelPerturber:
    """Owns the nominal copy of a Sawyer env's model and applies variants to it."""

    def __init__(self, env: Any) -> None:
        self.env = env
        model = env.model
        self._nominal = {name: getattr(model, name).copy() for name in _SAVED}
        headlight = model.vis.headlight
        self._headlight = (headlight.ambient.copy(), headlight.diffuse.copy(), headlight.specular.copy())
        self._action_scale = env.action_scale
        self._frame_skip = env.frame_skip
        self._reset_space = (env._random_reset_space.low.copy(), env._random_reset_space.high.copy())
        self.object_body: int | None = None
        self._names = {kind: [getattr(model, kind)(i).name for i in range(count)]
                       for kind, count in (("material", model.nmat), ("geom", model.ngeom))}

    def locate_object(self, object_position: np.ndarray) -> None:
        """Find the manipulated object's body once, from the first observation."""
        model, data = self.env.model, self.env.data
        candidates = [i for i in range(1, model.nbody) if not model.body(i).name.startswith(_ROBOT_PREFIXES)]
        if candidates and np.linalg.norm(object_position) > 0:
            distances = [np.linalg.norm(data.xpos[i] - object_position) for i in candidates]
            best = int(np.argmin(distances))
            self.object_body = candidates[best] if distances[best] < 0.1 else None

    def _object_geoms(self) -> list[int]:
        model = self.env.model
        if self.object_body is None:
            return []
        bodies = {self.object_body}
        for i in range(model.nbody):  # children of the object (handles, lids)
            if model.body_parentid[i] in bodies and i not in bodies:
                bodies.add(i)
        return [g for g in range(model.ngeom) if model.geom_bodyid[g] in bodies]

    def restore(self) -> None:
        """Put every saved model array, the headlight and the controller settings back to nominal."""
        model = self.env.model
        for name, values in self._nominal.items():
            getattr(model, name)[:] = values
        headlight = model.vis.headlight
        headlight.ambient[:], headlight.diffuse[:], headlight.specular[:] = self._headlight
        self.env.action_scale = self._action_scale
        self.env.frame_skip = self._frame_skip
        self.env._random_reset_space.low[:], self.env._random_reset_space.high[:] = self._reset_space

    def apply_before_reset(self, variant: Variant) -> None:
        """Everything that must hold while Meta-World samples the initial state."""
        self.restore()
        scale = value_of(variant, "object.init_range")
        if scale != 1.0:
            low, high = self._reset_space
            centre, half = (low + high) / 2, (high - low) / 2
            self.env._random_reset_space.low[:] = centre - scale * half
            self.env._random_reset_space.high[:] = centre + scale * half

    def apply_after_reset(self, variant: Variant) -> None:
        """Apply the variant's model factors (lights, colours, camera, mass, friction, damping, control) after a reset.
        """
        model = self.env.model
        n = self._nominal
        intensity = value_of(variant, "light.intensity")
        color = np.asarray(value_of(variant, "light.color"), dtype=np.float64)
        model.light_diffuse[:] = n["light_diffuse"] * intensity * color[None]
        model.light_specular[:] = n["light_specular"] * intensity
        model.light_ambient[:] = n["light_ambient"] * intensity * color[None]
        ambient, diffuse, specular = self._headlight  # the viewer's headlight lights the scene too
        model.vis.headlight.ambient[:] = ambient * intensity * color
        model.vis.headlight.diffuse[:] = diffuse * intensity * color
        model.vis.headlight.specular[:] = specular * intensity
        azimuth = value_of(variant, "light.azimuth")
        if azimuth:
            model.light_dir[:] = _rotate_z(n["light_dir"], azimuth)
            model.light_pos[:] = _rotate_z(n["light_pos"], azimuth)
        tinted = (("table.color", ("table_wood", "table_col")), ("background.color", ("basic_floor", "wall_metal")))
        for factor, materials in tinted:
            if any(p.factor == factor for p in variant.perturbations):
                rgb = value_of(variant, factor)
                for i, name in enumerate(self._names["material"]):
                    if name in materials:
                        model.mat_rgba[i, :3] = rgb
        geoms = self._object_geoms()
        if any(p.factor == "object.color" for p in variant.perturbations):
            for g in geoms:
                model.geom_rgba[g, :3] = value_of(variant, "object.color")
                model.geom_matid[g] = -1  # a material would override the geom colour
        mass = value_of(variant, "object.mass")
        if mass != 1.0 and self.object_body is not None:
            model.body_mass[self.object_body] = n["body_mass"][self.object_body] * mass
            model.body_inertia[self.object_body] = n["body_inertia"][self.object_body] * mass
        model.geom_friction[:, 0] = n["geom_friction"][:, 0] * value_of(variant, "friction")
        model.dof_damping[:] = n["dof_damping"] * value_of(variant, "joint.damping")
        self.env.action_scale = self._action_scale * value_of(variant, "control.gain")
        self.env.frame_skip = int(value_of(variant, "control.frame_skip"))
        import mujoco

        # Derived quantities (world light directions, ...) follow the model only after a forward pass. It leaves
        # positions and velocities as they are, but its constraint solve also sets MuJoCo's solver warm start
        # (``qacc_warmstart``) for the first step: from the same state and actions, a loop without this pass (stock
        # Meta-World's) steps differently in the last bits, and the difference grows over an episode. Every Meta-World
        # episode since ``9c5087d`` (2026-12-02) was stepped with it (``benchmarks/inline_gap.py``'s bare loop makes the
        # same pass).
        mujoco.mj_forward(model, self.env.data)


def view_for(name: str, variant: Variant) -> View:
    """The named view with the variant's camera offsets applied."""
    base = VIEWS[name]
    return View(
        lookat=base.lookat,
        distance=max(0.2, base.distance + value_of(variant, "camera.distance")),
        azimuth=base.azimuth + value_of(variant, "camera.yaw"),
        elevation=float(np.clip(base.elevation + value_of(variant, "camera.pitch"), -89.0, 89.0)),
        fovy=value_of(variant, "camera.fovy"),
    )


# Where distractor blocks stand (table coordinates) and their colours: fixed, so a level is one scene.
DISTRACTORS = (((-0.25, 0.75, 0.03), (0.1, 0.6, 0.1, 1.0)), ((0.25, 0.75, 0.03), (0.9, 0.8, 0.1, 1.0)),
               ((-0.2, 0.5, 0.03), (0.6, 0.1, 0.7, 1.0)))


def distractor_geoms(variant: Variant) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """The (position, rgba) of each distractor block the variant asks for."""
    return DISTRACTORS[: int(value_of(variant, "distractor.count"))]
