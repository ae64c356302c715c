"""``assay episodes show``: one episode's record and what its per-step data holds."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from assay.cli.render import console
from assay.store import EpisodeRecord, Store, renderer_label, renderer_of, step_matrix


def episode_summary(store: Store, record: EpisodeRecord) -> dict[str, Any]:
    """Per-column statistics of the step table (vectors summarised by size and norm)."""
    if record.data_path is None:
        return {"rows": 0, "columns": {}}
    table = store.steps(record)
    columns: dict[str, Any] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(column.type):
            norms = np.linalg.norm(step_matrix(table, name), axis=1)
            columns[name] = {"dims": column.type.list_size, "norm_first": float(norms[0]),
                             "norm_last": float(norms[-1])}
        elif pa.types.is_boolean(column.type):
            columns[name] = {"true": int(np.sum(column.to_numpy(zero_copy_only=False)))}
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            values = column.to_pylist()  # a text trace column (a router's skill): its values and steps
            columns[name] = {value: values.count(value) for value in sorted(set(values))}
        else:
            values = column.to_numpy(zero_copy_only=False).astype(np.float64)
            if not np.isfinite(values).any():
                columns[name] = {"missing": int(len(values))}
                continue
            columns[name] = {"min": float(np.nanmin(values)), "mean": float(np.nanmean(values)),
                             "max": float(np.nanmax(values))}
    return {"rows": table.num_rows, "path": record.data_path, "sha256": record.data_sha256, "columns": columns}


def print_episode(record: EpisodeRecord, summary: dict[str, Any]) -> None:
    """Print one episode's record and its step-file summary (``assay episode``)."""
    console.print(f"[bold]episode {record.key}[/]  campaign {record.campaign}")
    fields = {
        "policy": f"{record.policy_name} ({record.policy_version})",
        "task": f"{record.task_id} (hash {record.task_hash})",
        "variant": record.variant_name,
        "seed": record.seed,
        "instruction": record.instruction,
        "outcome": record.outcome.value + (f" ({record.reason})" if record.reason else ""),
        "steps": record.steps,
        "return": round(record.total_return, 3),
        "success step": record.success_step,
        "trajectory hash": record.trajectory_hash,
        "initial conditions": json.dumps(record.initial_conditions),
        "policy info": json.dumps(record.policy_info),
        "timings": json.dumps(record.timings),
        "provenance": json.dumps(record.provenance),
    }
    renderer = renderer_of(record.provenance)
    if renderer is not None:
        fields["renderer"] = (f"{renderer_label(renderer)} ({renderer.get('vendor', '?')}"
                              + (", software" if renderer.get("software") else "") + ")")
    for name, value in fields.items():
        console.print(f"  [cyan]{name:>18}[/] {value}", highlight=False, soft_wrap=True)
    where = summary.get("path")
    console.print(f"  [cyan]{'step data':>18}[/] " + (f"{summary['rows']} rows in {where}" if where is not None
                  else "none (an error before the first step)" if record.steps == 0
                  else "none: the step file was pruned (`assay store prune`); the summary above is the catalog's"))
    for name, stats in summary["columns"].items():
        console.print(f"    {name:<28} {json.dumps(stats)}", highlight=False)
