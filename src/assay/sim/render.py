"""Camera rendering on CPU: named free cameras around the table, RGB and depth, no shadows.

MuJoCo's OSMesa backend is used when no GL backend is chosen and libOSMesa is
present (``MUJOCO_GL=osmesa``). Shadows and reflections are off unless a renderer
is built with ``effects=True`` (MuJoCo's defaults, which robosuite's renderer keeps:
a LIBERO scene's reflective stove and floor need them to match its frames); off is
about 2.5x faster at 224 px. Each named view is a free camera (look-at point,
distance, azimuth, elevation) so that camera perturbations are offsets of it.
"""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def configure_gl() -> None:
    """Pick OSMesa for headless CPU rendering unless the user chose a backend (call before importing mujoco)."""
    if "MUJOCO_GL" not in os.environ and ctypes.util.find_library("OSMesa"):
        os.environ["MUJOCO_GL"] = "osmesa"
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")


@dataclass(frozen=True)
class View:
    lookat: tuple[float, float, float]
    distance: float
    azimuth: float  # degrees
    elevation: float  # degrees, negative looks down
    fovy: float = 45.0


VIEWS: dict[str, View] = {
    "front": View((0.0, 0.68, 0.0), 0.95, -90.0, -45.0),
    "top": View((0.0, 0.65, 0.0), 1.2, -90.0, -89.0),
    "side": View((0.0, 0.65, 0.05), 1.3, 180.0, -30.0),
}


def calibration(view: View) -> np.ndarray:
    """The view's pose as 10 floats: position (3), forward (3), up (3), vertical fov in degrees.

    Same convention as MuJoCo's free camera; a policy back-projects depth pixels with it.
    """
    azimuth, elevation = np.deg2rad(view.azimuth), np.deg2rad(view.elevation)
    forward = np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)])
    up = np.array([-np.sin(elevation) * np.cos(azimuth), -np.sin(elevation) * np.sin(azimuth), np.cos(elevation)])
    position = np.asarray(view.lookat) - view.distance * forward
    return np.concatenate([position, forward, up, [view.fovy]])


class CameraRenderer:
    """Renders named views of one MuJoCo model; one GL context per resolution."""

    def __init__(self, model: Any, hidden_groups: Sequence[int] = (), effects: bool = False,
                 max_geom: int = 10000) -> None:
        """``hidden_groups``: geom groups never drawn (robosuite keeps collision meshes in group 0);
        ``effects``: draw shadows and reflections; ``max_geom``: the scene's geom capacity (robosuite's is 1000)."""
        self.model = model
        self.effects = effects
        self._max_geom = max_geom
        self._renderers: dict[tuple[int, int], Any] = {}
        self._option: Any = None
        if hidden_groups:
            import mujoco

            self._option = mujoco.MjvOption()
            for group in hidden_groups:
                self._option.geomgroup[group] = 0

    def _renderer(self, width: int, height: int) -> Any:
        import mujoco

        key = (width, height)
        if key not in self._renderers:
            self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
            self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
            renderer = mujoco.Renderer(self.model, height, width, max_geom=self._max_geom)
            if not self.effects:
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            self._renderers[key] = renderer
        return self._renderers[key]

    def render_camera(self, data: Any, camera: str, width: int, height: int, depth: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """RGB (H, W, 3) uint8 (row 0 at the top) and optional depth from a camera the model defines."""
        renderer = self._renderer(width, height)
        renderer.update_scene(data, camera=camera, scene_option=self._option)
        rgb = renderer.render().copy()
        depth_image = None
        if depth:
            renderer.enable_depth_rendering()
            renderer.update_scene(data, camera=camera, scene_option=self._option)
            depth_image = renderer.render().astype(np.float32)
            renderer.disable_depth_rendering()
        return rgb, depth_image

    def render(self, data: Any, view: View, width: int, height: int, depth: bool = False,
               boxes: Sequence[tuple[Sequence[float], Sequence[float]]] = ()) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """RGB (H, W, 3) uint8, depth (H, W) float32 metres along the view axis or None, and the
        pose MuJoCo actually used (same layout as :func:`calibration`)."""
        import mujoco

        camera = mujoco.MjvCamera()
        camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        camera.lookat[:] = view.lookat
        camera.distance, camera.azimuth, camera.elevation = view.distance, view.azimuth, view.elevation
        self.model.vis.global_.fovy = view.fovy
        renderer = self._renderer(width, height)
        renderer.update_scene(data, camera=camera)
        self._add_boxes(renderer.scene, boxes)
        rgb = renderer.render().copy()
        gl_camera = renderer.scene.camera[0]
        pose = np.concatenate([gl_camera.pos, gl_camera.forward, gl_camera.up, [view.fovy]])
        depth_image = None
        if depth:
            renderer.enable_depth_rendering()
            renderer.update_scene(data, camera=camera)
            self._add_boxes(renderer.scene, boxes)
            depth_image = renderer.render().astype(np.float32)
            renderer.disable_depth_rendering()
        return rgb, depth_image, pose

    @staticmethod
    def _add_boxes(scene: Any, boxes: Sequence[tuple[Sequence[float], Sequence[float]]]) -> None:
        """Draw visual-only boxes (distractors): in the picture, never in the physics."""
        import mujoco

        for position, rgba in boxes:
            if scene.ngeom >= scene.maxgeom:
                break
            mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_BOX, np.full(3, 0.03),
                                np.asarray(position, dtype=np.float64), np.eye(3).reshape(-1), np.asarray(rgba, dtype=np.float32))
            scene.ngeom += 1

    def close(self) -> None:
        """Free every GL context this renderer made, each while it is current.

        mujoco.Renderer.close frees its MjrContext after destroying its GL context, that is in
        whichever context is current: another renderer's, whose framebuffer objects (same ids)
        it deletes, so that renderer then returns garbage frames. Freeing in our own context first
        keeps every other renderer in the process intact (a worker closes environments while others live).
        """
        for renderer in self._renderers.values():
            gl_context, mjr_context = getattr(renderer, "_gl_context", None), getattr(renderer, "_mjr_context", None)
            if gl_context is not None and mjr_context is not None:
                gl_context.make_current()
                mjr_context.free()
            renderer.close()
        self._renderers.clear()
