"""Build a campaign in Python, run it with any executor, read the results as a table.

    python examples/python_api.py --store runs/python-api --executor local --workers 2

See docs/PYTHON_API.md. The ``if __name__ == "__main__":`` guard is required with the local executor:
its worker processes start with 'spawn' and import this file again.
"""

from __future__ import annotations

import argparse

import assay


def build_campaign(episodes: int = 4) -> assay.CampaignSpec:
    """The same data a campaign YAML holds, validated the same way (bad input raises assay.SpecError)."""
    return assay.campaign_from_data({
        "name": "python-api",
        "seed": 7,
        "episodes": episodes,
        "horizon": 80,
        "tasks": ["metaworld/reach@1"],
        "policies": [
            "expert",
            {"name": "shaky", "builtin": "degraded-expert", "params": {"action_noise": 0.5, "action_delay": 2}},
        ],
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="runs/python-api")
    parser.add_argument("--executor", default="local", choices=["inline", "local", "ray"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()

    plan = assay.prepare_campaign(build_campaign(args.episodes))  # every spec error surfaces here
    with assay.Store(args.store) as store:
        executor = assay.make_executor(args.executor, store.data_root, workers=args.workers)
        summary = assay.run_campaign(plan, store, executor)
        rates = assay.results_table(store, campaign="python-api", by=("policy", "task"))
        episodes = assay.results_table(store, campaign="python-api")
    print(f"{summary.ran} episodes run, {summary.skipped} already in the store")
    for row in rates.to_pylist():
        print(f"{row['policy']:<8} {row['task']}: {row['successes']}/{row['scored']} "
              f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]")
    try:
        frame = episodes.to_pandas()
    except ImportError:  # pandas is optional
        return
    print(frame.groupby("policy")["steps"].mean().round(1).to_string())


if __name__ == "__main__":
    main()
