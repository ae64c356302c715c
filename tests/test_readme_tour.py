"""Every line of the README's tour runs as written, so the tour cannot drift from the commands (issue 45).

The lines run in order in one scratch directory holding a copy of ``examples/`` (and the files a line names)
with the example campaigns cut to a few short episodes; a line that would run for minutes gets size options
appended (``SIZES``: episodes, horizons, epochs, search budgets, and the in-process executor or one worker where
the line leaves the executor to its default: the same results on any executor, tested elsewhere, and the
sentence model loaded once for every language line; never anything else); the two servers are started, asked
once and stopped; ``<KEY>`` and ``<KEY-PREFIX>`` become a failed episode's key. A line the table does not know
(a command someone adds to the tour) still runs, as written. The counts the tour's comments and the README's
prose give are checked against the code.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from assay.cli.app import app

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
TOUR = [line for line in re.search(r"## A short tour\n\n```bash\n(.*?)```", README, re.S).group(1).splitlines()
        if line.strip()]
SHELL_SETUP = {"source .venv/bin/activate"}

# Options appended to a line whose defaults run for minutes (sizes only: the line's own arguments are kept).
SIZES: dict[str, list[str]] = {
    "sweep --factor light.intensity": ["--episodes", "1", "--horizon", "40", "-x", "inline"],
    "sweep --factor instruction.typo_rate": ["--episodes", "1", "-x", "inline"],
    "run examples/language.yaml": ["-x", "inline"],
    "run examples/semantic.yaml": ["-x", "inline"],
    "run examples/vision.yaml": ["-x", "inline"],
    "run examples/adaptive_compare.yaml": ["-x", "inline"],
    "failures resample": ["--samples", "1", "--seeds", "1"],
    "boundary -t": ["-n", "1", "--iterations", "1"],
    "semantic-profile": ["--tasks", "metaworld/reach@1", "--demos", "2", "--episodes", "1", "--epochs", "2",
                         "--horizon", "60"],
    "failures ponr <KEY>": ["--budget", "30"],
    "failures ponr --campaign": ["--budget", "30"],
    "openloop": ["--episodes", "1"],
    "train-bc --data": ["--epochs", "2"],
    "train-bc --obs image+proprio": ["--epochs", "1"],
    "zoo build": ["--tasks", "metaworld/reach@1", "--demos", "2", "--epochs", "1", "--horizon", "60"],
    "ladder --tasks": ["--demos", "2", "--heldout", "1", "--epochs", "2", "--horizon", "60", "--own-min", "0"],
    "noise examples/recipes": ["--seeds", "0,1"],
    "compare --recipes": ["--seeds", "0,1"],
    "flywheel --task": ["--probe", "2", "--eval", "2", "--epochs", "2", "--horizon", "40"],
    "twin sysid": ["--parameters", "control.gain", "--max-trajectories", "2", "--max-evaluations", "6",
                   "--restarts", "0"],
    "make flywheel-confirm": ["--workers", "1"],
    "benchmarks/twin_blind.py": ["--episodes", "1", "--only", "b-mass-4", "--jobs", "1", "--evaluations", "4",
                                 "--resamples", "100", "--horizon", "40", "--rendering-steps", "5"],
}

# Lines that cannot run as written yet, and why (strict: the test fails once one runs, so the entry goes).
KNOWN_GAPS: dict[str, str] = {}

# The example files as the tour runs them: a few short episodes (keys capped wherever they appear).
CAPS = {"episodes": 2, "horizon": 60, "max_episodes": 8, "batch": 4, "base_demos": 3, "extra_demos": 1,
        "pool": 12, "probe": 4, "eval": 4, "replicates": 1, "epochs": 2, "bootstrap": 200}
FLYWHEEL_CAPS = {"horizon": 200, "pool": 20, "probe": 6, "eval": 2}  # the slice needs successful expert demos
CAMPAIGN_CAPS = {"vision.yaml": {"episodes": 1, "horizon": 150}, "semantic.yaml": {"episodes": 1, "horizon": 30},
                 "language.yaml": {"episodes": 1, "horizon": 40}, "push-goal-slice.yaml": FLYWHEEL_CAPS,
                 "push-goal-slice-confirm.yaml": FLYWHEEL_CAPS, "push-gain-variant-slice.yaml": FLYWHEEL_CAPS}


def _capped(data: Any, caps: dict[str, int]) -> Any:
    if isinstance(data, dict):
        return {k: (min(v, caps[k]) if k in caps and isinstance(v, int) and not isinstance(v, bool) else
                    _capped(v, caps)) for k, v in data.items()}
    if isinstance(data, list):
        return [_capped(v, caps) for v in data]
    return data


def _scratch(root: Path) -> None:
    shutil.copytree(REPO / "examples", root / "examples")
    for path in (root / "examples").rglob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump(_capped(data, {**CAPS, **CAMPAIGN_CAPS.get(path.name, {})}), sort_keys=False))
    (root / "benchmarks").mkdir()
    shutil.copy(REPO / "benchmarks" / "twin_blind.py", root / "benchmarks")
    shutil.copy(REPO / "Makefile", root / "Makefile")


def _cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (the tour's cost, less noisy than wall time)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _make_recipe(target: str) -> list[str]:
    """The assay command a Makefile target runs (``$(ASSAY)`` is the venv's assay; variables at their defaults)."""
    text = (REPO / "Makefile").read_text()
    defaults = dict(re.findall(r"^([A-Z_]+) \?= (\S+)$", text, re.M))
    recipe = re.search(rf"^{re.escape(target)}:.*\n\t(.*)$", text, re.M).group(1)
    recipe = re.sub(r"\$\(([A-Z_]+)\)", lambda m: "assay" if m.group(1) == "ASSAY" else defaults[m.group(1)], recipe)
    return shlex.split(recipe)


def _sizes(line: str) -> list[str]:
    return [arg for key, extra in SIZES.items() if key in line for arg in extra]


def _keys(store: Path) -> dict[str, str]:
    result = CliRunner().invoke(app, ["episodes", "ls", "--store", str(store), "--policy", "random", "--outcome",
                                      "timeout", "--json"])
    failed = [e for e in json.loads(result.stdout)["episodes"] if e["data_path"]]
    return {"<KEY-PREFIX>": failed[0]["key"][:12], "<KEY>": failed[0]["key"]}


def _serve(args: list[str], probe: str, root: Path) -> str:
    """Start a server line, wait until ``probe`` (a URL, or ``port:N``) answers, stop it; '' when it answered."""
    server = subprocess.Popen([sys.executable, "-m", "assay", *args], cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if server.poll() is not None:
                return f"exited {server.returncode}: {server.stdout.read() if server.stdout else ''}"
            try:
                if probe.startswith("port:"):
                    socket.create_connection(("127.0.0.1", int(probe[5:])), timeout=1).close()
                else:
                    urllib.request.urlopen(probe, timeout=5).read()
                return ""
            except OSError:
                time.sleep(0.3)
        return "never answered"
    finally:
        server.terminate()
        server.communicate(timeout=30)


def _run_line(line: str, root: Path, keys: dict[str, str]) -> str:
    """Run one tour line in ``root``; '' when it succeeded, else what went wrong."""
    for placeholder, value in keys.items():
        line = line.replace(placeholder, value)
    words = shlex.split(line, comments=True)
    said = re.search(r"\(exit (\d)\)", line.split("#", 1)[1]) if "#" in line else None
    expected = int(said.group(1)) if said else 0  # a line whose comment says "(exit 1)" shows a gate failing
    if words[0] == "make":
        words = _make_recipe(words[1])
    extra = _sizes(line)
    if words[0] == "python":
        done = subprocess.run([sys.executable, *words[1:], *extra], cwd=root, capture_output=True, text=True,
                              timeout=900, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        return "" if done.returncode == expected else f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert words[0] == "assay", line
    if words[1] == "serve-policy":
        port = _free_port()
        return _serve([*[str(port) if w == "8000" else w for w in words[1:]], *extra], f"port:{port}", root)
    if words[1] == "serve":
        port = _free_port()
        return _serve([*words[1:], "--port", str(port), *extra], f"http://127.0.0.1:{port}/api/campaigns", root)
    result = CliRunner().invoke(app, [*words[1:], *extra])
    if result.exit_code == expected:
        return ""
    raised = "".join(traceback.format_exception(result.exception)) if result.exc_info and not isinstance(
        result.exception, SystemExit) else ""
    return f"exit {result.exit_code} (expected {expected}): {result.output[-2000:]}{raised[-3000:]}"


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> dict[int, str]:
    """Each tour line's outcome ('' = it ran), run in order in one scratch directory."""
    root = tmp_path_factory.mktemp("tour")
    _scratch(root)
    previous = Path.cwd()
    os.chdir(root)  # the tour runs from the repository root; here the scratch copy of what it reads
    outcomes: dict[int, str] = {}
    keys: dict[str, str] = {}
    begun, spent = time.monotonic(), _cpu_seconds()
    try:
        for index, line in enumerate(TOUR):
            if line.strip() in SHELL_SETUP:
                outcomes[index] = ""
                continue
            if "<KEY" in line and not keys:
                keys = _keys(root / "runs" / "demo")
            started, cpu = time.monotonic(), _cpu_seconds()
            outcomes[index] = _run_line(line, root, keys)
            print(f"tour line {index} ({time.monotonic() - started:.0f}s, CPU {_cpu_seconds() - cpu:.0f}s): {line[:90]}"
                  + (f"\n  FAILED: {outcomes[index]}" if outcomes[index] else ""), file=sys.stderr)
    finally:
        os.chdir(previous)
        print(f"tour: {len(outcomes)} lines in {time.monotonic() - begun:.0f}s, CPU {_cpu_seconds() - spent:.0f}s",
              file=sys.stderr)
    return outcomes


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(TOUR)), ids=[line.split("#")[0].strip()[:60] for line in TOUR])
def test_every_tour_line_runs_as_written(tour, index, request):
    gap = next((why for key, why in KNOWN_GAPS.items() if key in TOUR[index]), None)
    if gap is not None:
        request.applymarker(pytest.mark.xfail(reason=gap, strict=True))
    assert tour[index] == "", f"README tour line {index + 1}: {TOUR[index]}\n{tour[index]}"


def test_the_tours_counts_are_the_codes():
    from assay.policies import BUILTIN_POLICIES
    from assay.sim import FACTORS, default_registry
    from assay.sim.factors import object_free_tasks

    backends = [t.backend for t in default_registry().list()]
    assert f"{backends.count('metaworld')} Meta-World v3 and {backends.count('libero')} LIBERO tasks in all" in README
    assert f"the {backends.count('libero')} LIBERO tasks" in README
    assert f"robosuite 1.5's {backends.count('robosuite')} tasks, only served" in README
    axes = [f.axis.value for f in FACTORS.values()]
    assert (f"{len(FACTORS)} perturbation factors: {axes.count('visual')} visual, {axes.count('behavioral')} "
            f"behavioral, {axes.count('semantic')} semantic") in README
    [policies] = [line for line in TOUR if line.startswith("assay policies")]
    assert policies.split("#", 1)[1].strip() == ", ".join(sorted(BUILTIN_POLICIES))
    assert f"on the {len(object_free_tasks())} Meta-World tasks without an object body" in README


def test_the_demos_episode_counts_are_its_campaigns():
    from assay.spec import load_campaign

    def episodes(name: str) -> int:
        spec = load_campaign(REPO / "examples" / name)
        return len(spec.policies) * len(spec.tasks) * len(spec.variants) * spec.episodes

    assert f"= {episodes('quickstart.yaml')} closed-loop episodes" in README
    assert f"{episodes('reality-proxy.yaml')} more\nepisodes" in README or \
        f"{episodes('reality-proxy.yaml')} more episodes" in README


def test_every_tour_line_that_reads_a_campaign_names_it():
    """A store holds many campaigns (a sweep, a boundary search and a regression rerun each add one), and a
    command without a campaign reads the latest: a tour line that scores one must say which."""
    reads = ("assay results ", "assay compare ", "assay leaderboard ", "assay failures mine", "assay priorities",
             "assay openloop", "assay correlate", "assay estimate-real", "assay leakage")
    loose = [line for line in TOUR if line.startswith(reads) and "--campaign" not in line and "-c " not in line
             and "--recipes" not in line
             and "--csv leaderboard" not in line]
    assert loose == []
