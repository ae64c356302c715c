"""Known-answer system identification on the simulator: issue 55's all-factor fits on pick-place (docs/TWIN.md).

Records two episodes of the state expert (100 steps, seed 1000) in a hidden reality, then fits every control and
dynamics factor from the nominal twin with the default search and prints status, fit, intervals and replays.
Run: ``PYTHONPATH=src python benchmarks/sysid_known_answers.py [friction|two|null]`` (about 1-2 CPU minutes each).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from assay.sim import default_registry
from assay.spec import PolicySpec
from assay.store import Store
from assay.twin import Twin, TwinSettings, identify, nominal_twin, run_twins, trajectories_from_store

TASK = "metaworld/pick-place@1"
REALITIES = {"friction": Twin(name="friction", task=TASK, dynamics={"friction": 0.12}),
             "two": Twin(name="two", task=TASK, control={"control.gain": 0.6}, dynamics={"joint.damping": 5}),
             "null": nominal_twin(TASK)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reality", choices=sorted(REALITIES))
    args = parser.parse_args()
    settings = TwinSettings(policies=(PolicySpec(name="expert", builtin="expert"),), episodes=2, horizon=100,
                            seed=1000)
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "lab") as lab:
        run_twins("lab", [REALITIES[args.reality]], settings, lab)
        trajectories = trajectories_from_store(lab, "lab", "expert")
    started = time.time()
    result = identify(default_registry().get(TASK), trajectories, nominal_twin(TASK), restarts=1)
    document = {key: value for key, value in result.to_dict().items() if key != "twin"}
    print(json.dumps({**document, "wall_s": round(time.time() - started, 1)}, indent=1, default=str))


if __name__ == "__main__":
    main()
