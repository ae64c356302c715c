"""LIBERO-Plus's seven perturbation axes as factors: procedural, one level 0-5 each, deterministic per episode seed.

LIBERO-Plus (Fei et al. 2025) reports robustness per category over seven axes. Each is a
factor ``libero_plus.<name>`` with an integer level (0 is nominal, 5 the strongest);
what a level changes is drawn from the episode seed (a generator per factor, seeded by
``derive_seed``), so the same episode always sees the same perturbation, a sweep varies
only what it declares, and every variant of a task runs on the nominal episodes' seeds
(paired). The factor -> category map is data (``spec.libero_catalog.PLUS_CATEGORIES``).

=========================  ====================================================================
``libero_plus.layout``     the goal's objects moved ``2 cm x level`` in a direction drawn from
                           the seed (after the initial state is restored, before settling)
``libero_plus.camera``     the agent-view camera moved ``2.5 cm x level`` in a drawn direction
                           and turned ``2.5 deg x level`` about a drawn axis (the wrist camera
                           rides on the hand)
``libero_plus.robot_init`` each arm joint's initial angle offset by ``0.03 rad x level``, signs
                           drawn
``libero_plus.language``   the instruction rewritten, meaning kept and grammatical (LIBERO's own set,
                           ``sim.libero_language``, cumulative): 1 a padding, 2 + verbs of the same
                           action and another sentence form, 3 + a context sentence, 4 + the clauses
                           as a sequence and two, 5 + three
``libero_plus.light``      every light's intensity scaled by ``1 +- 0.12 x level`` (sign drawn),
                           its direction tilted ``6 deg x level``, its colour tinted up to
                           ``6% x level`` per channel
``libero_plus.background`` the table's, floor's and walls' materials tinted ``12% x level``
                           towards a drawn colour; from level 3 their textures exchanged among
                           the scene's own (same kind)
``libero_plus.noise``      Gaussian noise of ``4/255 x level`` on every camera frame, drawn per
                           step from the seed
=========================  ====================================================================

``libero_plus.corruption`` (0 none, 1-50) is LIBERO-Plus's *released* sensor noise instead, by upstream's
index: its blur and fog corruptions of the agent view only (``sim.corruptions``), drawn per step from the seed.

A :class:`PlusScene` belongs to one LIBERO scene: it keeps the nominal model arrays it
changes and restores them at every reset before applying the next variant's levels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.sim.corruptions import corrupt
from assay.sim.factors import value_of
from assay.spec import Variant, derive_seed
from assay.spec.libero_catalog import PLUS_CATEGORIES

PLUS_FACTORS = tuple(PLUS_CATEGORIES)
LAYOUT_M, CAMERA_M, CAMERA_DEG, JOINT_RAD = 0.02, 0.025, 2.5, 0.03
UPSTREAM_NOISE_CAMERAS = ("agentview", "image")  # LIBERO-Plus corrupts the agent view only (LeRobot's "image")
LIGHT_SCALE, LIGHT_DEG, LIGHT_TINT, BACKGROUND_TINT, NOISE = 0.12, 6.0, 0.06, 0.12, 4.0 / 255
SWAP_FROM = 3  # the background level from which textures are exchanged
_ROBOT = ("robot0_", "gripper0_", "mount0_")


def plus_levels(variant: Variant) -> dict[str, int]:
    """The variant's LIBERO-Plus levels, by factor (only those above 0)."""
    levels = {name: int(value_of(variant, name)) for name in PLUS_FACTORS}
    return {name: level for name, level in levels.items() if level}


def _rng(factor: str, seed: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(factor, seed))


def _unit(rng: np.random.Generator, size: int = 3) -> np.ndarray:
    vector = rng.normal(size=size)
    return vector / max(float(np.linalg.norm(vector)), 1e-9)


def _rotation(axis: np.ndarray, degrees: float) -> np.ndarray:
    """The unit quaternion (w, x, y, z) of ``degrees`` about ``axis``."""
    half = np.deg2rad(degrees) / 2
    return np.concatenate([[np.cos(half)], np.sin(half) * axis])


def _multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quaternion product (w, x, y, z)."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def plus_language(text: str, level: int, seed: int) -> str:
    """The instruction at LIBERO-Plus-style language level ``level``: LIBERO's own meaning-preserving rewrites
    (``assay.sim.libero_language``), drawn from the seed."""
    from assay.sim.libero_language import rewrite

    return rewrite(text, level, seed)


class PlusScene:
    """The model arrays one LIBERO scene's LIBERO-Plus factors change, their nominal values, and how to apply them."""

    def __init__(self, inner: Any, goal: list[tuple[str, ...]]) -> None:
        self.inner = inner
        model = inner.sim.model._model
        self._camera = int(model.camera("agentview").id)
        self._nominal_camera = (model.cam_pos[self._camera].copy(), model.cam_quat[self._camera].copy())
        self._nominal_light = (model.light_diffuse.copy(), model.light_specular.copy(), model.light_dir.copy())
        owners = tuple(f"{name}_" for name in (*inner.objects_dict, *inner.fixtures_dict)) + _ROBOT
        self._materials = [i for i in range(model.nmat) if not model.mat(i).name.startswith(owners)]
        self._nominal_rgba = model.mat_rgba[self._materials].copy()
        self._nominal_texid = model.mat_texid[self._materials].copy()
        moved = [p[1] for p in goal if p[1] in inner.objects_dict]
        self._free = [self._free_joint(inner, name) for name in dict.fromkeys(moved)]
        arm = [model.joint(f"robot0_joint{i}") for i in range(1, 8)]
        self._arm = np.array([int(joint.qposadr[0]) for joint in arm])

    @staticmethod
    def _free_joint(inner: Any, name: str) -> int:
        joint = inner.get_object(name).joints[0]
        address = inner.sim.model.get_joint_qpos_addr(joint)
        return int(address[0] if isinstance(address, tuple) else address)

    def reset_model(self, variant: Variant, seed: int) -> None:
        """Restore the nominal camera, lights and materials, then apply the variant's levels of them."""
        model = self.inner.sim.model._model
        model.cam_pos[self._camera], model.cam_quat[self._camera] = self._nominal_camera
        model.light_diffuse[:], model.light_specular[:], model.light_dir[:] = self._nominal_light
        model.mat_rgba[self._materials] = self._nominal_rgba
        model.mat_texid[self._materials] = self._nominal_texid
        levels = plus_levels(variant)
        if "libero_plus.camera" in levels:
            self._move_camera(levels["libero_plus.camera"], seed)
        if "libero_plus.light" in levels:
            self._relight(levels["libero_plus.light"], seed)
        if "libero_plus.background" in levels:
            self._repaint(levels["libero_plus.background"], seed)

    def _move_camera(self, level: int, seed: int) -> None:
        model, rng = self.inner.sim.model._model, _rng("libero_plus.camera", seed)
        position, orientation = self._nominal_camera
        model.cam_pos[self._camera] = position + CAMERA_M * level * _unit(rng)
        model.cam_quat[self._camera] = _multiply(_rotation(_unit(rng), CAMERA_DEG * level), orientation)

    def _relight(self, level: int, seed: int) -> None:
        model, rng = self.inner.sim.model._model, _rng("libero_plus.light", seed)
        diffuse, specular, direction = self._nominal_light
        scale = 1.0 + LIGHT_SCALE * level * (1.0 if rng.random() < 0.5 else -1.0)
        tint = 1.0 + LIGHT_TINT * level * rng.uniform(-1.0, 1.0, size=(len(diffuse), 3))
        model.light_diffuse[:] = np.clip(diffuse * scale * tint, 0.0, None)
        model.light_specular[:] = np.clip(specular * scale, 0.0, None)
        for i in range(len(direction)):
            tilted = _rotation(_unit(rng), LIGHT_DEG * level)
            w, x, y, z = tilted
            matrix = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                               [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                               [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
            model.light_dir[i] = matrix @ direction[i]

    def _repaint(self, level: int, seed: int) -> None:
        model, rng = self.inner.sim.model._model, _rng("libero_plus.background", seed)
        weight = min(BACKGROUND_TINT * level, 1.0)
        colours = rng.uniform(0.0, 1.0, size=(len(self._materials), 3))
        rgba = self._nominal_rgba.copy()
        rgba[:, :3] = (1.0 - weight) * rgba[:, :3] + weight * colours
        model.mat_rgba[self._materials] = rgba
        if level < SWAP_FROM:
            return
        textures = self._nominal_texid.copy()
        for kind in sorted({int(model.tex_type[t]) for t in textures[:, 1] if t >= 0}):
            rows = [r for r, t in enumerate(textures[:, 1]) if t >= 0 and int(model.tex_type[t]) == kind]
            if len(rows) > 1:  # a cyclic shift by a drawn offset: every one of them gets another's texture
                shift = 1 + int(rng.integers(len(rows) - 1))
                textures[rows, 1] = np.roll(self._nominal_texid[rows, 1], shift)
        model.mat_texid[self._materials] = textures

    def perturb_state(self, variant: Variant, seed: int) -> bool:
        """Move the goal's objects and the arm's joints as the variant's levels say (after the state is restored);
        whether anything moved."""
        levels = plus_levels(variant)
        data = self.inner.sim.data._data
        if "libero_plus.layout" in levels:
            rng = _rng("libero_plus.layout", seed)
            for address in self._free:
                data.qpos[address: address + 2] += LAYOUT_M * levels["libero_plus.layout"] * _unit(rng, 2)
        if "libero_plus.robot_init" in levels:
            signs = np.where(_rng("libero_plus.robot_init", seed).random(len(self._arm)) < 0.5, -1.0, 1.0)
            data.qpos[self._arm] += JOINT_RAD * levels["libero_plus.robot_init"] * signs
        moved = bool(levels.keys() & {"libero_plus.layout", "libero_plus.robot_init"})
        if moved:
            data.qvel[:] = 0.0
            self.inner.sim.forward()
        return moved

    @staticmethod
    def noisy(frame: np.ndarray, variant: Variant, seed: int, step: int, camera: str) -> np.ndarray:
        """``frame`` with the variant's sensor noise (the same for the same episode, step and camera): upstream's
        corruption of the agent view (``libero_plus.corruption``), then Assay's Gaussian noise."""
        index = int(value_of(variant, "libero_plus.corruption"))
        if index and camera in UPSTREAM_NOISE_CAMERAS:
            frame = corrupt(frame, index, np.random.default_rng([derive_seed("libero_plus.corruption", seed), step]))
        level = int(value_of(variant, "libero_plus.noise"))
        if not level:
            return frame
        rng = np.random.default_rng([derive_seed(f"libero_plus.noise/{camera}", seed), step])
        noise = rng.normal(0.0, NOISE * level * 255.0, size=frame.shape)
        return np.clip(frame.astype(np.float64) + noise, 0, 255).astype(np.uint8)
