"""A stand-in for openpi's LIBERO policy server (``scripts/serve_policy.py --env LIBERO``).

It speaks openpi's protocol with the real ``openpi_client.msgpack_numpy`` codec: a
metadata frame on connect, then one ``{"actions": (10, 7)}`` reply per request. Like
openpi's LIBERO policy it reads ``observation/state`` (8 values), ``prompt`` and,
when sent, ``observation/image`` / ``observation/wrist_image`` (224 x 224 x 3
uint8); a request that lacks what it reads fails the way openpi's does (a traceback
text frame). Every request's keys and shapes are appended to ``--log`` (JSON lines).
The chunk is a deterministic function of the state: move down and to the centre,
gripper open.

    python -m tests.openpi_libero_server --port 8000 --log requests.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import traceback
from pathlib import Path
from typing import Any

import numpy as np

CHUNK = 10


def infer(observation: dict[str, Any]) -> dict[str, np.ndarray]:
    state = np.asarray(observation["observation/state"], dtype=np.float64)
    if state.shape != (8,):
        raise ValueError(f"observation/state has shape {state.shape}, LIBERO's is (8,)")
    if not isinstance(observation["prompt"], str) or not observation["prompt"]:
        raise ValueError("prompt must be a non-empty string")
    for key in ("observation/image", "observation/wrist_image"):
        if key in observation:
            image = np.asarray(observation[key])
            if image.shape != (224, 224, 3) or image.dtype != np.uint8:
                raise ValueError(f"{key} is {image.shape} {image.dtype}, expected (224, 224, 3) uint8")
    toward = np.clip(np.array([-state[0], -state[1], 0.1 - state[2]]) * 5.0, -0.5, 0.5)
    step = np.concatenate([toward, np.zeros(3), [-1.0]])
    return {"actions": np.stack([step * (1.0 - 0.05 * i) for i in range(CHUNK)]).astype(np.float32)}


async def serve(port: int, log: Path | None) -> None:
    import websockets.asyncio.server as ws_server
    from openpi_client import msgpack_numpy

    packer = msgpack_numpy.Packer()

    async def handler(websocket: Any) -> None:
        await websocket.send(packer.pack({}))  # openpi's LIBERO server sends its (here empty) metadata
        async for message in websocket:
            try:
                observation = msgpack_numpy.unpackb(message)
                if log is not None:
                    shapes = {k: list(np.shape(v)) for k, v in observation.items()}
                    with log.open("a") as out:
                        out.write(json.dumps({"keys": sorted(observation), "shapes": shapes}) + "\n")
                await websocket.send(packer.pack(infer(observation)))
            except Exception:  # noqa: BLE001 - openpi answers a failing request with its traceback
                await websocket.send(traceback.format_exc())
                await websocket.close(1011, "Internal server error")
                return

    async with ws_server.serve(handler, "127.0.0.1", port, compression=None, max_size=None):
        await asyncio.Future()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.log))


if __name__ == "__main__":
    main()
