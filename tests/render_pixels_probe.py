"""Render one frame per camera in a fresh process (its GL backend from MUJOCO_GL) and save them as .npy.

    python -m tests.render_pixels_probe OUT_DIR metaworld|libero SIZE

Used by tests/test_renderer.py to compare EGL's pixels with OSMesa's for the same state.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from assay.sim import default_registry, make_env, renderer_info
from assay.spec import CameraSpec

SCENES = {
    "metaworld": ("metaworld/pick-place@1", ("front", "top", "side")),
    "libero": ("libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket", ("agentview", "wrist")),
}


def main(out: Path, scene: str, size: int) -> None:
    task_id, cameras = SCENES[scene]
    task = default_registry().get(task_id)
    task = task.model_copy(update={"cameras": tuple(CameraSpec(name=c, width=size, height=size) for c in cameras)})
    env = make_env(task)
    try:
        observation = env.reset(2)
        for camera in cameras:
            np.save(out / f"{camera}.npy", observation[f"image.{camera}"])
        info = renderer_info()
        (out / "renderer.json").write_text(json.dumps(info.to_dict() if info else None))
    finally:
        env.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
