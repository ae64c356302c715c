"""The GL backend each host gets (NVIDIA's EGL where a device exists, else OSMesa; a user's MUJOCO_GL kept) and
the one-line warning ``assay run`` prints before the first episode when a GPU host would draw in software.

A GPU host is simulated by monkeypatching ``gpu_host``, ``nvidia_egl_device`` and ``egl_devices`` (this CPU
machine has none); nothing here builds a simulator or makes a GL context.
"""

from __future__ import annotations

import ctypes.util
import os

import pytest
from typer.testing import CliRunner

from assay.cli import campaign_commands
from assay.cli.app import app
from assay.errors import AssayError
from assay.sim import render

NVIDIA = "EGL_NV_device_cuda EGL_EXT_device_drm EGL_EXT_device_persistent_id"  # an NVIDIA EGL device's extensions
MESA = "EGL_MESA_device_software"  # Mesa's software device, listed on any host with Mesa's EGL
OSMESA_ON_GPU = ("this host has an NVIDIA GPU, but this campaign's cameras will be drawn in software (osmesa, on the "
                 "CPU: ~400x slower a frame than the GPU); MUJOCO_GL=osmesa is set: unset it (Assay then picks egl) "
                 "or set MUJOCO_GL=egl")


@pytest.fixture
def clean_gl(monkeypatch):
    """No MUJOCO_GL or PYOPENGL_PLATFORM (restored afterwards, whatever configure_gl writes)."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    return monkeypatch


def _libraries(monkeypatch, osmesa: bool) -> None:
    monkeypatch.setattr(ctypes.util, "find_library",
                        lambda name: "libOSMesa.so.8" if osmesa and name == "OSMesa" else None)


def test_an_nvidia_egl_device_gets_egl(clean_gl):
    clean_gl.setattr(render, "nvidia_egl_device", lambda: True)
    _libraries(clean_gl, osmesa=True)  # OSMesa present too: the GPU still wins
    render.configure_gl()
    assert (os.environ["MUJOCO_GL"], os.environ["PYOPENGL_PLATFORM"]) == ("egl", "egl")


def test_a_users_mujoco_gl_is_kept_even_beside_an_nvidia_device(clean_gl):
    clean_gl.setattr(render, "nvidia_egl_device", lambda: True)
    clean_gl.setenv("MUJOCO_GL", "osmesa")
    render.configure_gl()
    assert os.environ["MUJOCO_GL"] == "osmesa" and "PYOPENGL_PLATFORM" not in os.environ


@pytest.mark.parametrize(("osmesa", "chosen"), [(True, "osmesa"), (False, None)])
def test_without_an_nvidia_device_osmesa_where_present_else_nothing_is_chosen(clean_gl, osmesa, chosen):
    clean_gl.setattr(render, "nvidia_egl_device", lambda: False)
    _libraries(clean_gl, osmesa)
    render.configure_gl()
    assert os.environ.get("MUJOCO_GL") == chosen and os.environ.get("PYOPENGL_PLATFORM") == chosen


@pytest.mark.parametrize(("gpu", "devices", "expected"), [
    (True, [NVIDIA, MESA], True),
    (True, [MESA], False),  # a GPU host without NVIDIA's EGL library: Mesa's device only
    (True, [], False),  # no libEGL at all
    (False, [NVIDIA], False),  # no GPU: not looked for
])
def test_an_nvidia_egl_device_is_one_with_nvidias_cuda_extension_on_a_gpu_host(monkeypatch, gpu, devices, expected):
    monkeypatch.setattr(render, "gpu_host", lambda: gpu)
    monkeypatch.setattr(render, "egl_devices", lambda: devices)
    assert render.nvidia_egl_device() is expected


@pytest.mark.parametrize(("backend", "gpu", "nvidia_egl", "expected"), [
    ("osmesa", False, False, None),  # a CPU host: software is all there is
    ("egl", False, False, None),
    ("egl", True, True, None),  # the GPU draws
    ("glfw", True, False, None),  # a window system's GL: not known to be software
    (None, True, False, None),  # nothing chosen (no OSMesa, no NVIDIA EGL): MuJoCo's default, not a rasteriser
    ("osmesa", True, True, OSMESA_ON_GPU),
    ("osmesa", True, False, "this host has an NVIDIA GPU, but this campaign's cameras will be drawn in software "
     "(osmesa, on the CPU: ~400x slower a frame than the GPU); no NVIDIA EGL device was found (NVIDIA's "
     "libEGL_nvidia.so.0 and glvnd's libEGL.so.1 are needed), so OSMesa was chosen"),
    ("egl", True, False, "this host has an NVIDIA GPU, but this campaign's cameras will be drawn in software "
     "(egl, on the CPU: ~400x slower a frame than the GPU); MUJOCO_GL=egl but no NVIDIA EGL device was found "
     "(NVIDIA's libEGL_nvidia.so.0 and glvnd's libEGL.so.1 are needed), so EGL falls back to Mesa's software "
     "device, if any"),
])
def test_software_rendering_reason_names_the_cause_and_the_fix(backend, gpu, nvidia_egl, expected):
    assert render.software_rendering_reason(backend, gpu, nvidia_egl) == expected


def test_the_warning_reads_this_process_and_host(clean_gl):
    clean_gl.setattr(render, "gpu_host", lambda: True)
    clean_gl.setattr(render, "nvidia_egl_device", lambda: True)
    clean_gl.setenv("MUJOCO_GL", "osmesa")
    assert render.gpu_software_warning() == OSMESA_ON_GPU
    clean_gl.setenv("MUJOCO_GL", "egl")
    assert render.gpu_software_warning() is None
    clean_gl.setattr(render, "gpu_host", lambda: False)
    clean_gl.setenv("MUJOCO_GL", "osmesa")
    assert render.gpu_software_warning() is None


CAMPAIGN = """name: gl
episodes: 1
tasks: [metaworld/reach@1]
policies: [expert]
"""


@pytest.mark.parametrize("cameras", [True, False])
def test_assay_run_warns_in_one_line_before_the_first_episode(tmp_path, clean_gl, cameras):
    """A GPU host whose user set MUJOCO_GL=osmesa: the warning comes before any episode runs (run_campaign is
    replaced by one that stops at once), and only for a campaign that draws a camera."""
    clean_gl.setattr(render, "gpu_host", lambda: True)
    clean_gl.setattr(render, "nvidia_egl_device", lambda: True)
    clean_gl.setenv("MUJOCO_GL", "osmesa")

    def no_episode(*_args, **_kwargs):
        raise AssayError("stopped before the first episode")

    clean_gl.setattr(campaign_commands, "run_campaign", no_episode)
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN + ("cameras: [{name: front, width: 32, height: 32}]\n" if cameras else "cameras: []\n"))
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "--executor", "inline"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].endswith("stopped before the first episode")
    assert lines[:-1] == ([f"warning: {OSMESA_ON_GPU}"] if cameras else [])


def test_a_ray_cluster_elsewhere_is_not_judged_by_this_hosts_gl(clean_gl):
    clean_gl.setattr(render, "gpu_host", lambda: True)
    clean_gl.setattr(render, "nvidia_egl_device", lambda: True)
    clean_gl.setenv("MUJOCO_GL", "osmesa")
    from assay.run import prepare_campaign
    from assay.spec import campaign_from_data

    planned = prepare_campaign(campaign_from_data({"name": "gl", "episodes": 1, "tasks": ["metaworld/reach@1"],
                                                   "policies": ["expert"], "cameras": [{"name": "front"}]}))
    assert campaign_commands.software_rendering(planned, "ray", "ray://head:10001") is None
    assert campaign_commands.software_rendering(planned, "ray", None) == OSMESA_ON_GPU
    assert campaign_commands.software_rendering(planned, "local", None) == OSMESA_ON_GPU


def test_after_the_run_the_stored_warning_is_left_out_of_stderr_once_given_before():
    from assay.store.provenance import renderer_notes_of

    slow = {"backend": "osmesa", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "software": True, "gpu_host": True}
    fast = {"backend": "egl", "renderer": "NVIDIA H100 80GB HBM3/PCIe/SSE2", "software": False, "gpu_host": True}
    both = renderer_notes_of([(slow, 3), (fast, 1)])
    assert [note.split(":")[0] for note in both] == ["mixed renderers", "warning"]
    assert both[1].startswith("warning: 3 episodes were rendered in software (osmesa: llvmpipe")
    assert renderer_notes_of([(slow, 3), (fast, 1)], software=False) == both[:1]
    assert renderer_notes_of([(slow, 3)], software=False) == []
