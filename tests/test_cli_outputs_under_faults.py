"""What `assay run` prints when things go wrong around it (issue 40): with ``--json`` stdout is exactly one
JSON document even after Ray reports a killed actor, and a full disk at the start of a run is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ASSAY = [str(Path(sys.executable).with_name("assay"))]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.sim
def test_json_stdout_parses_after_a_ray_actor_is_killed(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    campaign = tmp_path / "kills.yaml"
    campaign.write_text(
        "name: kills\nseed: 4\nepisodes: 2\nenvs_per_worker: 1\nhorizon: 20\ntasks: [metaworld/reach@1]\n"
        "policies: [{name: killer, entrypoint: 'tests.faulty_policies:KillingExpert', "
        f"params: {{marker_dir: '{markers}', modulo: 1}}}}]\n")
    done = subprocess.run([*ASSAY, "run", str(campaign), "--store", str(tmp_path / "store"), "--executor", "ray",
                           "--workers", "1", "--json"], capture_output=True, text=True, timeout=400, env=_env(),
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(markers.iterdir()), "an actor was killed"
    document = json.loads(done.stdout)  # the whole of stdout: one document, nothing after it
    assert document["ran"] == 2 and document["outcomes"].get("error", 0) == 0


@pytest.mark.slow
def test_a_full_disk_at_the_start_of_a_run_is_one_line(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tiny tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (disk / "store").mkdir()
        with open(disk / "filler", "wb", buffering=0) as filler:  # fill the disk
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass
        campaign = tmp_path / "c.yaml"
        campaign.write_text("name: c\nepisodes: 1\nhorizon: 5\ntasks: [gymnasium/Pendulum-v1]\npolicies: [random]\n")
        done = subprocess.run([*ASSAY, "run", str(campaign), "--store", str(disk / "store")], capture_output=True,
                              text=True, timeout=300, env=_env(), cwd=REPO)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "No space left on device" in lines[0], lines
    assert "Traceback" not in done.stderr
