"""Which renderer drew an episode: chosen per process (EGL on an NVIDIA device, else OSMesa), recorded in
every camera episode's provenance, and EGL's pixels equal OSMesa's within LIBERO's fidelity bound.

On this CPU machine EGL is Mesa's (llvmpipe behind EGL's device platform); on a GPU host it is NVIDIA's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.sim.render import egl_devices, gpu_host, nvidia_egl_device
from assay.spec import campaign_from_data
from assay.store import EpisodeRecord, Outcome, Store, renderer_counts, renderer_notes, renderer_of

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = (10, 0.001)  # LIBERO's bound: at most 0.1% of pixels differ by more than 10/255


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def test_this_host_lists_mesas_egl_device_and_no_nvidia_one_so_osmesa_is_chosen():
    if gpu_host():
        pytest.skip("an NVIDIA host: EGL is chosen there (benchmarks/device/libero_gpu.py checks it)")
    devices = egl_devices()
    assert devices and all("EGL_NV_device_cuda" not in d for d in devices)  # Mesa's software device
    assert nvidia_egl_device() is False
    chosen = subprocess.run([sys.executable, "-c", "import os, assay.sim; print(os.environ['MUJOCO_GL'])"],
                            env=_env(), capture_output=True, text=True, check=True).stdout.strip()
    kept = subprocess.run([sys.executable, "-c", "import os, assay.sim; print(os.environ['MUJOCO_GL'])"],
                          env=_env(MUJOCO_GL="egl"), capture_output=True, text=True, check=True).stdout.strip()
    assert (chosen, kept) == ("osmesa", "egl")  # no NVIDIA device: OSMesa; a user's choice is kept


def test_importing_assay_sim_loads_no_simulator_so_the_gl_backend_is_chosen_first():
    # assay.sim calls configure_gl() after its own imports: none of them may load mujoco or a package that does
    probe = ("import sys, assay.sim; "
             "print(sorted(m for m in ('mujoco', 'metaworld', 'gymnasium', 'robosuite') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], env=_env(), capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


def _record(key: str, renderer: dict | None) -> EpisodeRecord:
    return EpisodeRecord(key=key, campaign="c", task_id="t@1", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name="p", policy_version="1", policy_spec={},
                         seed=0, episode_index=0, instruction="", outcome=Outcome.SUCCESS, reason="", steps=1,
                         total_return=0.0, success_step=0, trajectory_hash="",
                         provenance={"renderer": renderer} if renderer else {})


GPU = {"backend": "egl", "vendor": "NVIDIA Corporation", "renderer": "NVIDIA H200/PCIe/SSE2", "version": "4.6",
       "software": False, "gpu_host": True}
CPU = {"backend": "osmesa", "vendor": "Mesa/X.org", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "version": "4.5",
       "software": True, "gpu_host": False}


def test_one_renderer_says_nothing_several_are_named_with_counts_and_software_on_a_gpu_warns():
    assert renderer_notes([_record("a", CPU), _record("b", CPU), _record("c", None)]) == []
    mixed = [_record("a", GPU), _record("b", GPU), _record("c", CPU)]
    assert renderer_counts(mixed) == {"egl: NVIDIA H200/PCIe/SSE2": 2, "osmesa: llvmpipe (LLVM 15.0.6, 256 bits)": 1}
    (note,) = renderer_notes(mixed)
    assert note == ("mixed renderers: this campaign's frames were drawn by 2 renderers: egl: NVIDIA H200/PCIe/SSE2 "
                    "(2 episodes); osmesa: llvmpipe (LLVM 15.0.6, 256 bits) (1 episodes)")
    slow = [_record("a", {**CPU, "gpu_host": True})]
    (warning,) = renderer_notes(slow)
    assert warning.startswith("warning: 1 episodes were rendered in software (osmesa: llvmpipe") and "\n" not in warning
    assert renderer_of({}) is None and renderer_of({"renderer": GPU}) == GPU


@pytest.mark.sim
def test_a_camera_episode_records_its_renderer_and_episodes_show_prints_it(tmp_path: Path):
    base = {"name": "r", "seed": 1, "episodes": 1, "horizon": 6, "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "expert", "builtin": "expert"}]}
    with Store(tmp_path / "store") as store:
        for name, cameras in (("r", [{"name": "front", "width": 32, "height": 32}]), ("none", [])):
            spec = campaign_from_data({**base, "name": name, "cameras": cameras})
            run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path / "store"))
        (seen,), (blind,) = store.catalog.episodes(campaign="r"), store.catalog.episodes(campaign="none")
    info = renderer_of(seen.provenance)
    assert info is not None and info["backend"] == os.environ["MUJOCO_GL"]
    assert info["gpu_host"] is gpu_host() and info["vendor"] and info["version"]
    if not gpu_host():  # this CPU machine: OSMesa, Mesa's llvmpipe, software
        assert info["backend"] == "osmesa" and "llvmpipe" in info["renderer"] and info["software"] is True
    assert renderer_of(blind.provenance) is None  # no camera: nothing drew it
    shown = subprocess.run([str(Path(sys.executable).with_name("assay")), "episodes", "show", seen.key, "--store",
                            str(tmp_path / "store"), "--json"], env=_env(), capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["renderer"] == info


def _pixels(tmp_path: Path, backend: str, scene: str, size: int) -> tuple[dict[str, np.ndarray], dict]:
    out = tmp_path / backend
    out.mkdir()
    subprocess.run([sys.executable, "-m", "tests.render_pixels_probe", str(out), scene, str(size)], cwd=ROOT,
                   env=_env(MUJOCO_GL=backend), check=True, capture_output=True, timeout=900)
    frames = {p.stem: np.load(p) for p in out.glob("*.npy")}
    return frames, json.loads((out / "renderer.json").read_text())


def _check_within_fidelity(egl: dict[str, np.ndarray], osmesa: dict[str, np.ndarray]) -> None:
    assert egl.keys() == osmesa.keys() and egl
    threshold, share = FIDELITY
    for camera, frame in egl.items():
        differ = np.abs(frame.astype(int) - osmesa[camera].astype(int)).max(axis=-1) > threshold
        assert differ.mean() <= share, f"{camera}: {differ.mean():.4%} of pixels differ by more than {threshold}/255"
        assert frame.std() > 5  # a scene, not a blank frame


@pytest.mark.sim
def test_egl_draws_metaworlds_pixels_as_osmesa_does(tmp_path: Path):
    egl, egl_info = _pixels(tmp_path, "egl", "metaworld", 64)
    osmesa, osmesa_info = _pixels(tmp_path, "osmesa", "metaworld", 64)
    assert egl_info["backend"] == "egl" and osmesa_info["backend"] == "osmesa"
    _check_within_fidelity(egl, osmesa)


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.sim
def test_egl_draws_liberos_pixels_as_osmesa_does(tmp_path: Path):
    egl, egl_info = _pixels(tmp_path, "egl", "libero", 224)
    osmesa, _ = _pixels(tmp_path, "osmesa", "libero", 224)
    assert egl_info["backend"] == "egl"
    _check_within_fidelity(egl, osmesa)


@pytest.mark.sim
@pytest.mark.slow
def test_a_campaign_drawn_by_two_renderers_says_so_in_results_and_the_report(tmp_path: Path):
    """One episode drawn under EGL (Mesa's, here), the other re-run under OSMesa after it was forgotten."""
    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"name": "mixed", "seed": 2, "episodes": 2, "horizon": 5,
                                "tasks": ["metaworld/reach@1"], "policies": [{"name": "expert", "builtin": "expert"}],
                                "cameras": [{"name": "front", "width": 32, "height": 32}]}))
    store = tmp_path / "store"
    assay = str(Path(sys.executable).with_name("assay"))

    def run(backend: str) -> None:
        subprocess.run([assay, "run", str(spec), "--store", str(store), "--executor", "inline", "--json"],
                       env=_env(MUJOCO_GL=backend), check=True, capture_output=True, timeout=600)

    run("egl")
    with Store(store) as opened:
        first = sorted(r.key for r in opened.catalog.episodes(campaign="mixed"))
        assert opened.forget(first[:1]) == 1
    run("osmesa")
    with Store(store) as opened:
        backends = sorted(renderer_of(r.provenance)["backend"] for r in opened.catalog.episodes(campaign="mixed"))
    assert backends == ["egl", "osmesa"]
    shown = subprocess.run([assay, "results", "--store", str(store), "--campaign", "mixed", "--json"], env=_env(),
                           check=True, capture_output=True, text=True).stdout
    document = json.loads(shown)
    assert len(document["renderers"]) == 2 and sum(document["renderers"].values()) == 2
    assert [n.split(":")[0] for n in document["notes"]] == ["mixed renderers"]
    text = subprocess.run([assay, "results", "--store", str(store), "--campaign", "mixed"], env=_env(),
                          check=True, capture_output=True, text=True).stdout
    assert "mixed renderers: this campaign's frames were drawn by 2 renderers" in " ".join(text.split())
    html = tmp_path / "r.html"
    subprocess.run([assay, "report", "mixed", "--store", str(store), "--output", str(html)], env=_env(), check=True,
                   capture_output=True)
    assert "mixed renderers: this campaign's frames were drawn by 2 renderers" in unescape(html.read_text())
