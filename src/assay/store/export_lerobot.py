"""Export episodes as a LeRobotDataset v3.0 directory (the layout ``lerobot`` 0.4 reads).

Layout written (one chunk, one file per kind; episodes are packed, v3 style)::

    OUT/meta/info.json                                codebase_version v3.0, fps, features, path templates
    OUT/meta/stats.json                               min/max/mean/std/count per feature
    OUT/meta/tasks.parquet                            task string (the pandas index) -> task_index
    OUT/meta/episodes/chunk-000/file-000.parquet      per episode: tasks, length, dataset_from/to_index,
                                                      data and video file and time ranges, Assay provenance
    OUT/data/chunk-000/file-000.parquet               one row per frame
    OUT/videos/observation.images.<cam>/chunk-000/file-000.mp4   episodes' frames back to back (H.264)

Frame ``i`` of an episode is step ``i``: ``observation.state`` and ``action`` are
the recorded ones (float32), ``next.reward``/``next.success``/``next.done`` what the
simulator returned; ``timestamp = frame_index / fps`` where ``fps`` is the task's
control rate (it must be an integer for lerobot). The task of an episode is its
instruction. The directory is built under a temporary name and renamed into
place; an existing ``OUT`` is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import StoreError
from assay.serialize import DictMixin
from assay.store.columns import step_matrix
from assay.store.records import EpisodeRecord
from assay.store.store import Store
from assay.store.video import encode_video, read_video, step_frames

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
IMAGE_PREFIX = "observation.images."


@dataclass(frozen=True)
class ExportSummary(DictMixin):
    """What an export wrote: where, how many episodes, frames and tasks, at what fps, with which cameras."""

    path: str
    episodes: int
    frames: int
    tasks: int
    fps: int
    cameras: tuple[str, ...]


def _fps(records: list[EpisodeRecord], store: Store) -> int:
    rates = set()
    for campaign in store.catalog.campaigns():
        spec = campaign.spec or {}
        for task in spec.get("tasks", []):
            if any(task.get("hash") == r.task_hash for r in records):
                rates.add(float(task["spec"]["control_hz"]))
    if len(rates) != 1 or not float(next(iter(rates))).is_integer():
        raise StoreError(f"LeRobotDataset needs one integer fps; the episodes' control rates are "
                         f"{sorted(rates) or 'unknown'}")
    return int(next(iter(rates)))


def _stats(values: np.ndarray) -> dict[str, list[Any]]:
    values = values.reshape(len(values), -1).astype(np.float64)
    return {"min": values.min(0).tolist(), "max": values.max(0).tolist(), "mean": values.mean(0).tolist(),
            "std": values.std(0).tolist(), "count": [len(values)]}


def _per_channel(values: np.ndarray) -> list[list[list[float]]]:
    """One statistic per channel, shaped (3, 1, 1) as lerobot's image stats are."""
    return [[[float(x)]] for x in values]


def _image_stats(frames: np.ndarray) -> dict[str, list[Any]]:
    pixels = frames.reshape(-1, 3).astype(np.float64) / 255.0  # lerobot's image stats: per channel, [0, 1], (3, 1, 1)
    shape = _per_channel
    return {"min": shape(pixels.min(0)), "max": shape(pixels.max(0)), "mean": shape(pixels.mean(0)),
            "std": shape(pixels.std(0)), "count": [len(frames)]}


def _tasks_table(tasks: list[str]) -> pa.Table:
    """``tasks.parquet`` as pandas writes it: the task string is the index (lerobot reads ``tasks.index``)."""
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"], "column_indexes": [],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
                     "metadata": None},
                    {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _feature(dtype: str, shape: list[int], names: Any = None) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "names": names}


def export_lerobot(store: Store, records: list[EpisodeRecord], out: Path, robot_type: str = "sawyer") -> ExportSummary:
    """Write ``records`` (in the given order; they must have step data) as a LeRobotDataset v3.0 at ``out``."""
    out = Path(out)
    if out.exists():
        raise StoreError(f"{out} already exists; export to a new directory")
    records = [r for r in records if r.data_path is not None]
    if not records:
        raise StoreError("no episodes with step data to export")
    fps = _fps(records, store)
    tasks = sorted({r.instruction for r in records})
    tables = [store.steps(r) for r in records]
    cameras = sorted({c[len(IMAGE_PREFIX):] for t in tables for c in t.column_names if c.startswith(IMAGE_PREFIX)})
    if any(not all(f"{IMAGE_PREFIX}{cam}" in t.column_names for cam in cameras) for t in tables):
        raise StoreError(f"episodes disagree on cameras ({', '.join(cameras)}); export episodes with the same cameras")
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        summary = _write(store, records, tables, tmp, fps, tasks, cameras, robot_type)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportSummary(str(out), *summary)


def _write(store: Store, records: list[EpisodeRecord], tables: list[pa.Table], root: Path, fps: int,
           tasks: list[str], cameras: list[str], robot_type: str) -> tuple[int, int, int, int, tuple[str, ...]]:
    state = [step_matrix(t, "observation.state", np.float32) for t in tables]
    action = [step_matrix(t, "action", np.float32) for t in tables]
    lengths = [len(t) for t in tables]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    frame_index = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
    episode_index = np.concatenate([np.full(n, i, np.int64) for i, n in enumerate(lengths)])
    task_index = np.concatenate([np.full(n, tasks.index(r.instruction), np.int64)
                                 for r, n in zip(records, lengths, strict=True)])
    columns: dict[str, np.ndarray] = {
        "observation.state": np.concatenate(state), "action": np.concatenate(action),
        "next.reward": np.concatenate([t.column("reward").to_numpy() for t in tables]).astype(np.float32),
        "next.success": np.concatenate([t.column("success").to_numpy(zero_copy_only=False)
                                        for t in tables]).astype(bool),
        "next.done": np.concatenate([np.arange(n) == n - 1 for n in lengths]),
        "timestamp": (frame_index / fps).astype(np.float32), "frame_index": frame_index,
        "episode_index": episode_index, "index": np.arange(total, dtype=np.int64), "task_index": task_index,
    }
    arrays = {name: pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
              if v.ndim == 2 else pa.array(v) for name, v in columns.items()}
    (root / "data" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(arrays), root / DATA_PATH.format(chunk_index=0, file_index=0))
    features = {
        "observation.state": _feature("float32", [state[0].shape[1]], None),
        "action": _feature("float32", [action[0].shape[1]], None),
        "next.reward": _feature("float32", [1]), "next.success": _feature("bool", [1]),
        "next.done": _feature("bool", [1]),
        "timestamp": _feature("float32", [1]), "frame_index": _feature("int64", [1]),
        "episode_index": _feature("int64", [1]), "index": _feature("int64", [1]), "task_index": _feature("int64", [1]),
    }
    stats = {name: _stats(values) for name, values in columns.items()}
    episodes: dict[str, Any] = {
        "episode_index": pa.array(range(len(records)), pa.int64()),
        "tasks": pa.array([[r.instruction] for r in records], pa.list_(pa.string())),
        "length": pa.array(lengths, pa.int64()),
        "data/chunk_index": pa.array([0] * len(records), pa.int64()),
        "data/file_index": pa.array([0] * len(records), pa.int64()),
        "dataset_from_index": pa.array(offsets[:-1], pa.int64()),
        "dataset_to_index": pa.array(offsets[1:], pa.int64()),
    }
    for camera in cameras:
        key = IMAGE_PREFIX + camera
        clips = [step_frames(store.data_root, r.key, camera, n) for r, n in zip(records, lengths, strict=True)]
        frames = np.concatenate(clips)
        height, width = frames.shape[1:3]
        path = root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True)
        path.write_bytes(encode_video(list(frames), fps))
        features[key] = {"dtype": "video", "shape": [int(height), int(width), 3],
                         "names": ["height", "width", "channels"],
                         "info": {"video.height": int(height), "video.width": int(width), "video.codec": "h264",
                                  "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": fps,
                                  "video.channels": 3, "has_audio": False}}
        stats[key] = _image_stats(frames)
        episodes[f"videos/{key}/chunk_index"] = pa.array([0] * len(records), pa.int64())
        episodes[f"videos/{key}/file_index"] = pa.array([0] * len(records), pa.int64())
        episodes[f"videos/{key}/from_timestamp"] = pa.array(offsets[:-1] / fps, pa.float64())
        episodes[f"videos/{key}/to_timestamp"] = pa.array(offsets[1:] / fps, pa.float64())
    episodes["meta/episodes/chunk_index"] = pa.array([0] * len(records), pa.int64())
    episodes["meta/episodes/file_index"] = pa.array([0] * len(records), pa.int64())
    episodes["assay/key"] = pa.array([r.key for r in records])
    episodes["assay/task_id"] = pa.array([r.task_id for r in records])
    episodes["assay/task_hash"] = pa.array([r.task_hash for r in records])
    episodes["assay/variant_key"] = pa.array([r.variant_key for r in records])
    episodes["assay/seed"] = pa.array([r.seed for r in records], pa.int64())
    episodes["assay/outcome"] = pa.array([r.outcome.value for r in records])
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(episodes), root / EPISODES_PATH)
    pq.write_table(_tasks_table(tasks), root / "meta" / "tasks.parquet")
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": len(records),
        "total_frames": total, "total_tasks": len(tasks), "chunks_size": 1000, "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500, "fps": fps, "splits": {"train": f"0:{len(records)}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if cameras else None, "features": features,
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    (root / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
    return len(records), total, len(tasks), fps, tuple(cameras)


@dataclass(frozen=True)
class LeRobotEpisode:
    """One episode read back from a LeRobotDataset export: its task, states, actions, timestamps and frames."""

    index: int
    task: str
    states: np.ndarray
    actions: np.ndarray
    timestamps: np.ndarray
    frames: dict[str, np.ndarray]  # camera key -> (T, H, W, 3)
    assay_key: str


def read_lerobot(root: Path) -> tuple[dict[str, Any], list[LeRobotEpisode]]:
    """Our reader of the v3.0 layout (info, tasks, episodes metadata, data, videos), independent of the writer's
    in-memory state: it follows only the path templates and index columns, as lerobot does."""
    info = json.loads((root / "meta" / "info.json").read_text())
    if info.get("codebase_version") != CODEBASE_VERSION:
        raise StoreError(f"{root} is not a LeRobotDataset {CODEBASE_VERSION}")
    tasks_table = pq.read_table(root / "meta" / "tasks.parquet")
    index_col = json.loads(tasks_table.schema.metadata[b"pandas"])["index_columns"][0]
    tasks = dict(zip(tasks_table.column("task_index").to_pylist(), tasks_table.column(index_col).to_pylist(),
                     strict=True))
    meta = pq.read_table(root / EPISODES_PATH).to_pylist()
    videos = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    data_cache: dict[tuple[int, int], pa.Table] = {}
    out = []
    for row in meta:
        where = (row["data/chunk_index"], row["data/file_index"])
        if where not in data_cache:
            data_path = info["data_path"].format(chunk_index=where[0], file_index=where[1])
            data_cache[where] = pq.read_table(root / data_path)
        data = data_cache[where]
        rows = data.slice(row["dataset_from_index"], row["dataset_to_index"] - row["dataset_from_index"])
        if rows.column("episode_index").to_pylist() != [row["episode_index"]] * row["length"]:
            raise StoreError(f"{root}: episode {row['episode_index']}'s index range holds other episodes' frames")
        frames = {}
        for key in videos:
            path = root / info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                    file_index=row[f"videos/{key}/file_index"])
            start = round(row[f"videos/{key}/from_timestamp"] * info["fps"])
            stop = round(row[f"videos/{key}/to_timestamp"] * info["fps"])
            frames[key] = read_video(path.parent, path.name)[start:stop]
        task = {tasks[i] for i in rows.column("task_index").to_pylist()}
        out.append(LeRobotEpisode(row["episode_index"], task.pop() if len(task) == 1 else "",
                                  step_matrix(rows, "observation.state", np.float64),
                                  step_matrix(rows, "action", np.float64),
                                  rows.column("timestamp").to_numpy(), frames, row["assay/key"]))
    return info, out
