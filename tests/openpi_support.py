"""A plain openpi-style policy server, written with the real openpi-client's msgpack-numpy.

It is what a VLA checkpoint served by openpi looks like from the outside: one metadata frame on
connect (no Assay identity), then per request it *reads* ``observation/image`` (and
``observation/wrist_image`` when asked), as openpi's input transforms do: a missing key raises
``KeyError`` and the traceback goes back as a text frame. It answers a chunk of zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")


@contextlib.contextmanager
def openpi_server(metadata: dict[str, Any] | None = None, keys: tuple[str, ...] = ("observation/image",),
                  action_dim: int = 4, chunk: int = 2) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve on a free port; yields (url, the decoded requests it saw)."""
    from websockets.asyncio.server import serve

    seen: list[dict[str, Any]] = []
    ready, port = threading.Event(), []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    packer = msgpack_numpy.Packer()

    async def handler(ws: Any) -> None:
        await ws.send(packer.pack(metadata or {}))
        async for frame in ws:
            try:
                obs = msgpack_numpy.unpackb(frame)
                seen.append(obs)
                images = [obs[key] for key in keys]  # openpi's transforms index the keys they need
                assert all(image.dtype == np.uint8 and image.ndim == 3 for image in images), "images must be uint8 HWC"
                await ws.send(packer.pack({"actions": np.zeros((chunk, action_dim))}))
            except Exception:  # noqa: BLE001 - openpi sends the traceback and closes
                await ws.send(traceback.format_exc())
                await ws.close(1011, "Internal server error. Traceback included in previous frame.")
                return

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port.append(server.sockets[0].getsockname()[1])
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"ws://127.0.0.1:{port[0]}", seen
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
