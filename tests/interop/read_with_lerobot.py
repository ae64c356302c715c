"""Run in the interop environment (make test-interop): read a LeRobotDataset with the real lerobot, print JSON."""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

dataset = LeRobotDataset("assay/export", root=sys.argv[1])
camera_keys = list(dataset.meta.camera_keys)
frames = []
for i in range(len(dataset)):
    item = dataset[i]
    frames.append({
        "index": int(item["index"]), "episode_index": int(item["episode_index"]), "frame_index": int(item["frame_index"]),
        "timestamp": float(item["timestamp"]), "task": item["task"],
        "state": item["observation.state"].tolist(), "action": item["action"].tolist(),
        "images": {key: (item[key] * 255).round().to(dtype=__import__("torch").uint8).permute(1, 2, 0).tolist() for key in camera_keys},
    })
episodes = dataset.meta.episodes
json.dump({
    "num_episodes": dataset.num_episodes, "num_frames": dataset.num_frames, "fps": dataset.fps,
    "camera_keys": camera_keys,
    "episode_ranges": [[int(episodes[i]["dataset_from_index"]), int(episodes[i]["dataset_to_index"])] for i in range(dataset.num_episodes)],
    "frames": frames,
}, sys.stdout)
