"""Camera frames as MP4 (H.264 through PyAV), one file per camera per episode.

Frame ``i`` is the image the policy saw at step ``i``; the step table's
``observation.images.<camera>`` column holds that index. Written atomically.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np

from assay.errors import StoreError


def video_relpath(key: str, camera: str) -> str:
    return f"videos/{key[:2]}/{key}.{camera}.mp4"


def write_video(root: Path, key: str, camera: str, frames: list[np.ndarray], fps: float) -> str:
    import av

    relpath = video_relpath(key, camera)
    final = root / relpath
    tmp = final.with_name(f"{final.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        height, width = frames[0].shape[:2]
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=max(1, round(fps)))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.options = {"crf": "20", "preset": "veryfast"}
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, final)
    except (OSError, av.error.FFmpegError) as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write video {final}: {exc}") from None
    return relpath


def read_video(root: Path, relpath: str) -> np.ndarray:
    """All frames as (T, H, W, 3) uint8."""
    import av

    path = root / relpath
    if not path.exists():
        raise StoreError(f"video {path} does not exist")
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
