"""Is there a deployment gap? A base-only check run before a flywheel design is declared (issue 43).

No arm is trained or run: the check only asks whether a base policy trained outside a candidate gap fails inside
it, so a design's gap is chosen before anything can show how targeted or random data do there. Two modes:

* ``regions``: state BC on push; each candidate gap is one end of a ``rand_vec`` component (``--gaps
  3:0.07:above`` is goal x >= 0.07); the base learns from the first 20 pool successes outside it and runs on
  ``--eval`` scenes, counted inside and outside the gap. ``--range-scale`` widens the initial-condition ranges
  (the ``object.init_range`` factor).
* ``variants``: pixel BC (64 px front camera; ``--obs state``: state BC) on nominal demos only, and the expert,
  evaluated under nominal and each candidate variant (``--variants '{"light.intensity": 0.1}' ...``).

Each ``--draws`` is a fresh pool (campaign seed 1900 + draw) and base (training seed = draw); evaluation uses
campaign seed 3900: seed streams no flywheel replicate uses. Example (docs/RESULTS.md)::

    PYTHONPATH=src python examples/flywheel/gap_check.py regions --store runs/gap --range-scale 2.0 \\
        --gaps 3:0.14:above 0:0.14:above --draws 2 --eval 150
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from assay.failures.priorities import InitRegion
from assay.learning.bc import TrainConfig, train_bc
from assay.learning.data import episode_demo
from assay.learning.flywheel_design import Where, initial, select_base
from assay.learning.pixel_bc import PixelTrainConfig, train_pixel_bc
from assay.learning.runs import bc_spec, run_grid
from assay.spec import CameraSpec, PolicySpec
from assay.store import EpisodeRecord, Outcome, Store

EXPERT = [PolicySpec(name="expert", builtin="expert")]


def _safe(gap: str) -> str:
    """A candidate gap as a policy name (``3:0.14:above`` -> ``3_0.14_above``)."""
    return gap.replace(":", "_")


def _count(records: list[EpisodeRecord]) -> str:
    return f"{sum(r.outcome is Outcome.SUCCESS for r in records)}/{len(records)}"


def regions(store: Store, args: argparse.Namespace) -> dict[str, Any]:
    """State BC outside each candidate region, success inside and outside it."""
    variants = [{"object.init_range": args.range_scale}] if args.range_scale != 1.0 else [{}]
    gaps = {}
    for text in args.gaps:
        component, threshold, side = text.split(":")
        gaps[text] = InitRegion(int(component), float(threshold), side == "below")
    specs, result = [], {}
    for draw in range(args.draws):
        _, pool = run_grid(store, f"gap-pool{draw}", [args.task], EXPERT, args.pool, 1900 + draw, args.horizon,
                           args.workers, variants=variants)
        result[f"pool {draw}"] = _count(pool)
        for name, gap in gaps.items():
            outside = Where(InitRegion(gap.component, gap.threshold, not gap.below))
            path = Path(args.store) / f"base-{_safe(name)}-{draw}.pt"
            if not path.is_file():
                train_bc([episode_demo(store, r) for r in select_base(pool, outside, 20)],
                         TrainConfig(seed=draw, epochs=100), path)
            specs.append(bc_spec(f"{_safe(name)}-d{draw}", path))
    _, evaluation = run_grid(store, "gap-eval", [args.task], specs, args.eval, 3900, args.horizon, args.workers,
                             variants=variants)
    by_name = {_safe(name): gap for name, gap in gaps.items()}
    for spec in specs:
        gap = by_name[spec.name.rsplit("-d", 1)[0]]
        mine = [r for r in evaluation if r.policy_name == spec.name]
        result[spec.name] = {"gap": _count([r for r in mine if gap.contains(initial(r))]),
                             "rest": _count([r for r in mine if not gap.contains(initial(r))])}
    return result


def variants(store: Store, args: argparse.Namespace) -> dict[str, Any]:
    """BC on nominal demos (pixel, or state with ``--obs state``), and the expert beside it, under nominal and
    each candidate variant."""
    requests = [{}] + [json.loads(v) for v in args.variants]
    pixel = args.obs == "pixel"
    camera = (CameraSpec(name="front", width=64, height=64),) if pixel else ()
    specs, result = list(EXPERT), {}
    for draw in range(args.draws):
        _, pool = run_grid(store, f"gap-{args.obs}-pool{draw}", [args.task], EXPERT, args.pool, 1900 + draw,
                           args.horizon, args.workers, camera)
        demos = [episode_demo(store, r) for r in pool if r.outcome is Outcome.SUCCESS][:args.base]
        path = Path(args.store) / f"{args.obs}-base-{draw}.pt"
        if not path.is_file():
            if pixel:
                train_pixel_bc(store, demos, PixelTrainConfig(seed=draw, epochs=args.epochs), path)
            else:
                train_bc(demos, TrainConfig(seed=draw, epochs=args.epochs), path)
        specs.append(PolicySpec(name=f"base-d{draw}", builtin="pixel-bc" if pixel else "bc",
                                params={"path": str(path.resolve())}))
    _, evaluation = run_grid(store, f"gap-{args.obs}-eval", [args.task], specs, args.eval, 3900, args.horizon,
                             args.workers, camera, requests)
    for spec in specs:
        mine = [r for r in evaluation if r.policy_name == spec.name]
        result[spec.name] = {name: _count([r for r in mine if r.variant_name == name])
                             for name in sorted({r.variant_name for r in mine})}
    return result


def main() -> None:
    """Parse the arguments, run the check, print and save its counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("regions", "variants"))
    parser.add_argument("--store", required=True)
    parser.add_argument("--task", default=None, help="default: push (regions), button-press-topdown (variants)")
    parser.add_argument("--gaps", nargs="*", default=["3:0.07:above"], help="component:threshold:above|below")
    parser.add_argument("--variants", nargs="*", default=['{"light.intensity": 0.3}'])
    parser.add_argument("--range-scale", type=float, default=1.0)
    parser.add_argument("--draws", type=int, default=1)
    parser.add_argument("--pool", type=int, default=120)
    parser.add_argument("--obs", choices=("pixel", "state"), default="pixel", help="the base's input (variants)")
    parser.add_argument("--base", type=int, default=10, help="base demos (variants)")
    parser.add_argument("--epochs", type=int, default=20, help="training epochs (variants)")
    parser.add_argument("--eval", type=int, default=150)
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if args.task is None:
        args.task = "metaworld/push@1" if args.mode == "regions" else "metaworld/button-press-topdown@1"
    if args.horizon is None:
        args.horizon = 200 if args.mode == "regions" else 100
    started = time.time()
    Path(args.store).mkdir(parents=True, exist_ok=True)
    with Store(Path(args.store) / "store") as store:
        result = (regions if args.mode == "regions" else variants)(store, args)
    result["wall_s"] = round(time.time() - started)
    print(json.dumps(result, indent=1))
    (Path(args.store) / f"{args.mode}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
