"""The Ray policy actor's batching, without Ray: one DynamicBatcher, every observation key forwarded."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import PolicyContext
from assay.run.ray_executor import BatchingPolicyActor
from assay.testing import fake_task

SEEN: list[dict[str, Any]] = []


class KeyRecorder:
    """Answers each row with its image's mean and its state, and records what every call received."""

    def reset(self, context: PolicyContext) -> None:
        self.seeds = context.seeds

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        SEEN.append({"keys": sorted(observations), "rows": len(observations["env_ids"]), "seeds": self.seeds,
                     "instruction": list(observations["instruction"])})
        image = observations["image.front"].reshape(len(observations["env_ids"]), -1).mean(axis=1)
        return np.stack([image / 255.0, observations["state"][:, 0]], axis=1)[:, :1]


def _observations(values: list[float], instruction: str) -> dict[str, Any]:
    rows = len(values)
    return {"state": np.asarray(values, dtype=np.float64).reshape(rows, 1),
            "image.front": np.stack([np.full((4, 4, 3), int(v * 10), np.uint8) for v in values]),
            "depth.front": np.ones((rows, 4, 4), np.float32), "calib.front": np.zeros((rows, 10)),
            "instruction": [instruction] * rows}


def test_concurrent_requests_merge_into_one_call_with_every_observation_key():
    SEEN.clear()
    server = BatchingPolicyActor({"name": "keys", "entrypoint": "tests.test_ray_serving:KeyRecorder"}, max_batch=8,
                          max_wait_s=0.2)
    task = fake_task()

    async def both() -> list[np.ndarray]:
        return await asyncio.gather(server.act(task, _observations([1.0, 2.0], "a"), [11, 12]),
                                    server.act(task, _observations([3.0], "b"), [13]))

    first, second = asyncio.run(both())
    assert [call["rows"] for call in SEEN] == [3]  # the two requests met in one policy call
    assert SEEN[0]["keys"] == ["calib.front", "depth.front", "env_ids", "image.front", "instruction", "state"]
    assert SEEN[0]["seeds"] == (11, 12, 13) and SEEN[0]["instruction"] == ["a", "a", "b"]
    assert first.tolist() == [[10 / 255.0], [20 / 255.0]] and second.tolist() == [[30 / 255.0]]
    stats = asyncio.run(server.stats())
    assert stats == {"calls": 1, "requests": 2, "rows": 3, "max_requests_per_call": 2, "max_rows_per_call": 3}


def test_a_full_batch_of_rows_closes_at_once_and_the_rest_waits_for_the_next():
    SEEN.clear()
    server = BatchingPolicyActor({"name": "keys", "entrypoint": "tests.test_ray_serving:KeyRecorder"}, max_batch=2,
                          max_wait_s=0.2)
    task = fake_task()

    async def three() -> list[np.ndarray]:
        return await asyncio.gather(*(server.act(task, _observations([float(i)], "x"), [i]) for i in range(3)))

    asyncio.run(three())
    assert [call["rows"] for call in SEEN] == [2, 1]
