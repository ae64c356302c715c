"""Camera frames as MP4 (H.264 through PyAV), one file per camera per episode.

Frame ``i`` is the image the policy saw at step ``i``; the step table's
``observation.images.<camera>`` column holds that index. A campaign with
``video_fps`` keeps fewer frames than steps (the column is ``-1`` at steps
without one); :func:`step_frames` is for readers that need a frame per step.
Written atomically.
"""

from __future__ import annotations

import io

import numpy as np

from assay.errors import StoreError
from assay.store.episodes import Root, write_blob
from assay.store.roots import open_root


def video_relpath(key: str, camera: str) -> str:
    """Where an episode's video of ``camera`` lives under the data root."""
    return f"videos/{key[:2]}/{key}.{camera}.mp4"


def encode_video(frames: list[np.ndarray], fps: float) -> bytes:
    """H.264 MP4 bytes of RGB frames (H, W, 3) uint8."""
    import av

    buffer = io.BytesIO()
    height, width = frames[0].shape[:2]
    try:
        with av.open(buffer, mode="w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=max(1, round(fps)))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.options = {"crf": "20", "preset": "veryfast"}
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    except av.error.FFmpegError as exc:
        raise StoreError(f"cannot encode video: {exc}") from None
    return buffer.getvalue()


def write_video(root: Root, key: str, camera: str, frames: list[np.ndarray], fps: float) -> str:
    """Encode and write one camera's frames atomically; return the path relative to the store."""
    relpath = video_relpath(key, camera)
    write_blob(root, relpath, encode_video(frames, fps))
    return relpath


def read_video(root: Root, relpath: str) -> np.ndarray:
    """All frames as (T, H, W, 3) uint8; ``root`` is the data root (a directory or an fsspec URL)."""
    import av

    data_root = open_root(root)
    try:
        data = data_root.read(relpath)
    except FileNotFoundError:
        raise StoreError(f"video {data_root.where(relpath)} does not exist") from None
    with av.open(io.BytesIO(data), mode="r") as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def step_frames(root: Root, key: str, camera: str, steps: int) -> np.ndarray:
    """One frame per step (T, H, W, 3) of an episode's camera video; StoreError when the video keeps fewer
    (recorded at a ``video_fps`` below the control rate), since frame ``i`` would then not show step ``i``."""
    frames = read_video(root, video_relpath(key, camera))
    if len(frames) < steps:
        raise StoreError(f"episode {key}: its {camera!r} video keeps {len(frames)} frames for {steps} steps "
                         "(recorded with video_fps); a frame per step needs a campaign whose video_fps is "
                         "the task's control rate (LIBERO: video_fps: 20)")
    return frames[:steps]
