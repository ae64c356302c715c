"""Failure categories against injected faults on LIBERO: a confusion matrix, not one golden episode per fault.

    MUJOCO_GL=osmesa python benchmarks/libero_fault_confusion.py --store runs/confusion --episodes 10 --workers 2

One campaign (``cameras: []``): ``libero-faulty-expert`` with each fault of ``assay.policies.libero_faults``
(``EXPECTED``: the category each must get; ``wrong`` needs a distractor from Python and is left out) on three
tasks (LIBERO-Object's soup and ketchup into the basket, LIBERO-Spatial's bowl onto the plate) x ``--episodes``
initial states each; then the category ``assay failures mine`` gives every failure (``failures.categorize``),
and the matrix of injected fault (rows) against the mined category (columns), per task and pooled, with each
fault's agreement (the share of its episodes given its expected category) and a mid-p 95% interval. Written to
``STORE/confusion.json`` and printed as a Markdown table (docs/LIBERO.md quotes it). The campaign resumes: a
rerun only categorizes again.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from assay.failures import categorize, step_arrays
from assay.learning.runs import run_grid
from assay.metrics import success_interval
from assay.policies.libero_faults import EXPECTED
from assay.spec import PolicySpec
from assay.store import Outcome, Store

TASKS = (
    "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2",
    "libero/object/pick_up_the_ketchup_and_place_it_in_the_basket@2",
    "libero/spatial/pick_up_the_black_bowl_next_to_the_plate_and_place_it_on_the_plate@2",
)
FAULTS = tuple(f for f in EXPECTED if f != "wrong")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, default=Path("runs/confusion"))
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    policies = [PolicySpec(name=fault, builtin="libero-faulty-expert", params={"fault": fault}) for fault in FAULTS]
    with Store(args.store) as store:
        _, records = run_grid(store, "fault-confusion", TASKS, policies, args.episodes, 0, None, args.workers,
                              cameras=())
        found = {r.key: categorize(r, step_arrays(store.steps(r))).category for r in records
                 if r.outcome is not Outcome.SUCCESS and r.data_path}
        matrix: dict[str, Counter[str]] = {fault: Counter() for fault in FAULTS}
        per_task: dict[str, dict[str, Counter[str]]] = {t: {f: Counter() for f in FAULTS} for t in TASKS}
        for record in records:
            category = found.get(record.key)
            label = "success" if record.outcome is Outcome.SUCCESS else category.value if category else "uncategorized"
            matrix[record.policy_name][label] += 1
            per_task[record.task_id][record.policy_name][label] += 1
    columns = sorted({c for row in matrix.values() for c in row})
    agreement = {}
    for fault, row in matrix.items():
        n, k = sum(row.values()), row[EXPECTED[fault]]
        interval = success_interval(k, n)
        agreement[fault] = {"expected": EXPECTED[fault], "agree": k, "episodes": n,
                            "low": interval.low if interval else None, "high": interval.high if interval else None}
    result = {"tasks": TASKS, "episodes_per_task": args.episodes, "columns": columns,
              "matrix": {f: dict(r) for f, r in matrix.items()},
              "per_task": {t: {f: dict(r) for f, r in rows.items()} for t, rows in per_task.items()},
              "agreement": agreement}
    (args.store / "confusion.json").write_text(json.dumps(result, indent=2))
    print("| injected fault (expected) | " + " | ".join(columns) + " | agreement [95%] |")
    print("|---" * (len(columns) + 2) + "|")
    for fault, row in matrix.items():
        a = agreement[fault]
        band = f"[{a['low']:.2f}, {a['high']:.2f}]" if a["low"] is not None else "-"
        print(f"| {fault} ({EXPECTED[fault]}) | " + " | ".join(str(row.get(c, 0)) for c in columns)
              + f" | {a['agree']}/{a['episodes']} {band} |")


if __name__ == "__main__":
    main()
