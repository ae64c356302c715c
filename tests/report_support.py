"""A tiny real campaign for the report, server and browser tests, built once per session.

Meta-World reach, expert and random, 2 episodes each, nominal plus one behavioral
variant, one 64x64 camera (so every episode has an MP4), inline executor. The
horizon is cut to 60 steps (the expert reaches in ~50) to keep the tier fast.
Then the commands whose results a report shows, each for real through the CLI:
``failures mine``, a regression set of random's failures rerun with the expert,
the point of no return of one failure, and ``openloop`` on the expert's episodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.sim import TaskRegistry, default_registry
from assay.spec import campaign_from_data
from assay.store import Store

CAMPAIGN = {
    "name": "tiny",
    "seed": 0,
    "episodes": 2,
    "tasks": ["metaworld/reach@1"],
    "policies": ["expert", "random"],
    "variants": ["nominal", {"action.noise": 0.5}],
    "cameras": [{"name": "front", "width": 64, "height": 64}],
}
HORIZON = 60
REGRESSION_SET = "tiny-fails"


def build_store(root: Path) -> Path:
    task = default_registry().get("metaworld/reach@1").model_copy(update={"horizon": HORIZON})
    plan = prepare_campaign(campaign_from_data(CAMPAIGN), TaskRegistry([task]))
    with Store(root) as store:
        run_campaign(plan, store, InlineExecutor(store.root))
    for command in (["failures", "mine", "--campaign", "tiny"],
                    ["regress", "add", REGRESSION_SET, "--from", "tiny", "--policy", "random", "--holdout", "0"],
                    ["regress", "run", REGRESSION_SET, "--policy", "expert"],
                    ["failures", "ponr", "--campaign", "tiny", "--policy", "random", "--limit", "1"],
                    ["openloop", "--campaign", "tiny", "--reference", "expert"]):
        result = CliRunner().invoke(app, [*command, "--store", str(root)])
        assert result.exit_code == 0, (command, result.output)
    return root


@pytest.fixture(scope="session")
def report_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("report") / "store")
