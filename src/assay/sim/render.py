"""Camera rendering: named free cameras around the table, RGB and depth; which GL drew them.

The GL backend is chosen once per process, before MuJoCo is imported (:func:`configure_gl`,
unless ``MUJOCO_GL`` is set): NVIDIA's EGL where an NVIDIA EGL device exists (GPU rasterisation,
headless), else OSMesa when libOSMesa is present (software, on the CPU). Shadows and reflections
are off unless a renderer is built with ``effects=True`` (MuJoCo's defaults, which robosuite's
renderer keeps: a LIBERO scene's reflective stove and floor need them to match its frames); off is
about 2.5x faster at 224 px on CPU. Each named view is a free camera (look-at point, distance,
azimuth, elevation) so that camera perturbations are offsets of it.

:func:`renderer_info` says what drew this process's frames (the backend and the GL vendor,
renderer and version strings, read from the first context made); every episode with a camera
records it in its provenance (``renderer``). Before a campaign's first episode, :func:`gpu_software_warning`
says (one line) when a host with an NVIDIA GPU would draw its cameras in software.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.serialize import DictMixin

EGL_EXTENSIONS = 0x3055  # eglQueryDeviceStringEXT's name for a device's extension list
NVIDIA_DEVICE_EXTENSION = "EGL_NV_device_cuda"  # present on NVIDIA's EGL devices only
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")  # Mesa's CPU rasterisers


def gpu_host() -> bool:
    """Whether this host has an NVIDIA GPU (its driver's device nodes or its /proc entry)."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def egl_devices() -> list[str]:
    """The extension string of each EGL device (``eglQueryDevicesEXT``); [] without libEGL or device
    enumeration. Mesa lists its software device here (``EGL_MESA_device_software``), NVIDIA each GPU."""
    name = ctypes.util.find_library("EGL")
    if name is None:
        return []
    try:
        egl = ctypes.CDLL(name)
        egl.eglGetProcAddress.restype = ctypes.c_void_p
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        query_devices_address = egl.eglGetProcAddress(b"eglQueryDevicesEXT")
        query_string_address = egl.eglGetProcAddress(b"eglQueryDeviceStringEXT")
        if not query_devices_address or not query_string_address:
            return []
        query_devices = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_int))(query_devices_address)
        query_string = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)(query_string_address)
        count = ctypes.c_int(0)
        if not query_devices(0, None, ctypes.byref(count)) or count.value <= 0:
            return []
        devices = (ctypes.c_void_p * count.value)()
        if not query_devices(count.value, devices, ctypes.byref(count)):
            return []
        return [(query_string(device, EGL_EXTENSIONS) or b"").decode(errors="replace")
                for device in devices[: count.value]]
    except (OSError, AttributeError):
        return []


def nvidia_egl_device() -> bool:
    """Whether an NVIDIA EGL device exists (looked for only on a host with an NVIDIA GPU)."""
    return gpu_host() and any(NVIDIA_DEVICE_EXTENSION in extensions.split() for extensions in egl_devices())


def configure_gl() -> None:
    """Choose MuJoCo's GL backend unless the user did (call before importing mujoco): ``egl`` where an
    NVIDIA EGL device exists, else ``osmesa`` when libOSMesa is present. Child processes inherit the choice."""
    if "MUJOCO_GL" in os.environ:
        return
    if nvidia_egl_device():
        os.environ["MUJOCO_GL"] = "egl"
        os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    elif ctypes.util.find_library("OSMesa"):
        os.environ["MUJOCO_GL"] = "osmesa"
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")


def software_rendering_reason(backend: str | None, gpu: bool, nvidia_egl: bool) -> str | None:
    """Why a campaign's cameras would be drawn in software on a host with an NVIDIA GPU (one line), or None
    where they are not (no GPU; ``backend`` egl on an NVIDIA EGL device; glfw or unset: not a CPU rasteriser).

    ``backend``: ``MUJOCO_GL`` as the process has it (after :func:`configure_gl`); ``gpu``: :func:`gpu_host`;
    ``nvidia_egl``: :func:`nvidia_egl_device`. Pure, so each case is tested without a GPU."""
    if not gpu:
        return None
    if backend == "osmesa":
        fix = ("MUJOCO_GL=osmesa is set: unset it (Assay then picks egl) or set MUJOCO_GL=egl" if nvidia_egl else
               "no NVIDIA EGL device was found (NVIDIA's libEGL_nvidia.so.0 and glvnd's libEGL.so.1 are needed), "
               "so OSMesa was chosen")
    elif backend == "egl" and not nvidia_egl:
        fix = ("MUJOCO_GL=egl but no NVIDIA EGL device was found (NVIDIA's libEGL_nvidia.so.0 and glvnd's "
               "libEGL.so.1 are needed), so EGL falls back to Mesa's software device, if any")
    else:
        return None
    return (f"this host has an NVIDIA GPU, but this campaign's cameras will be drawn in software ({backend}, on the "
            f"CPU: ~400x slower a frame than the GPU); {fix}")


def gpu_software_warning() -> str | None:
    """:func:`software_rendering_reason` for this process and host, read before a campaign's first episode
    (``assay run`` prints it as one ``warning:`` line; episodes record what drew them afterwards)."""
    gpu = gpu_host()
    return software_rendering_reason(os.environ.get("MUJOCO_GL"), gpu, gpu and nvidia_egl_device())


@dataclass(frozen=True)
class RendererInfo(DictMixin):
    """What drew a process's frames: MuJoCo's GL backend and the context's GL strings."""

    backend: str  # MUJOCO_GL: egl, osmesa, glfw
    vendor: str  # GL_VENDOR, e.g. "NVIDIA Corporation", "Mesa/X.org"
    renderer: str  # GL_RENDERER, e.g. "NVIDIA H200/PCIe/SSE2", "llvmpipe (LLVM 15.0.6, 256 bits)"
    version: str  # GL_VERSION
    software: bool  # a CPU rasteriser (OSMesa, or Mesa's llvmpipe/softpipe behind EGL)
    gpu_host: bool  # the host has an NVIDIA GPU


_RENDERER: list[RendererInfo] = []  # this process's renderer, once a context has been made


def _read_renderer() -> RendererInfo:
    """The GL strings of the context current now (just made by a renderer)."""
    backend = os.environ.get("MUJOCO_GL", "glfw")
    try:
        from OpenGL import GL

        strings = [GL.glGetString(name) for name in (GL.GL_VENDOR, GL.GL_RENDERER, GL.GL_VERSION)]
        vendor, renderer, version = ((s or b"").decode(errors="replace") for s in strings)
    except Exception as exc:  # noqa: BLE001 - provenance never stops a frame; say why it is missing
        vendor, renderer, version = "unknown", f"unknown ({type(exc).__name__})", "unknown"
    software = backend == "osmesa" or any(name in renderer.lower() for name in SOFTWARE_RENDERERS)
    return RendererInfo(backend, vendor, renderer, version, software, gpu_host())


def renderer_info() -> RendererInfo | None:
    """The renderer that drew this process's frames (None before its first GL context)."""
    return _RENDERER[0] if _RENDERER else None


@dataclass(frozen=True)
class View:
    """A free camera's pose: the point it looks at, its distance, azimuth and elevation, and its field of view."""

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
    """Renders named views of one MuJoCo model; one GL context per resolution. ``frames_drawn`` and
    ``drawing_s`` count what it drew and how long it took (the per-layer trace reads their increments)."""

    def __init__(self, model: Any, hidden_groups: Sequence[int] = (), effects: bool = False,
                 max_geom: int = 10000) -> None:
        """``hidden_groups``: geom groups never drawn (robosuite keeps collision meshes in group 0);
        ``effects``: draw shadows and reflections; ``max_geom``: the scene's geom capacity (robosuite's is 1000)."""
        self.model = model
        self.effects = effects
        self._max_geom = max_geom
        self._renderers: dict[tuple[int, int], Any] = {}
        self._option: Any = None
        self.frames_drawn = 0
        self.drawing_s = 0.0
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
            if not _RENDERER:  # its context is current now
                _RENDERER.append(_read_renderer())
            if not self.effects:
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
                renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            self._renderers[key] = renderer
        return self._renderers[key]

    def render_camera(
        self, data: Any, camera: str, width: int, height: int, depth: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """RGB (H, W, 3) uint8 (row 0 at the top) and optional depth from a camera the model defines."""
        started = time.perf_counter()
        renderer = self._renderer(width, height)
        renderer.update_scene(data, camera=camera, scene_option=self._option)
        rgb = renderer.render().copy()
        depth_image = None
        if depth:
            renderer.enable_depth_rendering()
            renderer.update_scene(data, camera=camera, scene_option=self._option)
            depth_image = renderer.render().astype(np.float32)
            renderer.disable_depth_rendering()
        self._drew(started)
        return rgb, depth_image

    def _drew(self, started: float) -> None:
        self.frames_drawn += 1
        self.drawing_s += time.perf_counter() - started

    def render(
        self, data: Any, view: View, width: int, height: int, depth: bool = False,
        boxes: Sequence[tuple[Sequence[float], Sequence[float]]] = (),
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """RGB (H, W, 3) uint8, depth (H, W) float32 metres along the view axis or None, and the
        pose MuJoCo actually used (same layout as :func:`calibration`)."""
        import mujoco

        started = time.perf_counter()
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
        self._drew(started)
        return rgb, depth_image, pose

    @staticmethod
    def _add_boxes(scene: Any, boxes: Sequence[tuple[Sequence[float], Sequence[float]]]) -> None:
        """Draw visual-only boxes (distractors): in the picture, never in the physics."""
        import mujoco

        for position, rgba in boxes:
            if scene.ngeom >= scene.maxgeom:
                break
            mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_BOX, np.full(3, 0.03),
                                np.asarray(position, dtype=np.float64), np.eye(3).reshape(-1),
                                np.asarray(rgba, dtype=np.float32))
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


def adopt_renderer(info: RendererInfo) -> None:
    """Take ``info`` as the renderer of this process's frames when it made none itself: a served simulator's
    (``assay.served``), whose frames this process records."""
    if not _RENDERER:
        _RENDERER.append(info)
