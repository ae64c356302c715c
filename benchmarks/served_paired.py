"""Assay's served cost beside the floor's, in the same rounds: how much of the split is Assay's own.

    MUJOCO_GL=osmesa PYTHONPATH=src python benchmarks/served_paired.py [--episodes 160] [--rounds 4]

Issue 52's target is "served ≤ 10% slower than in process on Meta-World with 2 workers". Run alone, each of
``served_cost.py`` (Assay) and ``served_floor.py`` (two hand-written loops with no Assay in them) read from 0.75 to
0.95 on this 2-core machine from one run to the next, so two separate runs cannot say whether Assay's split costs
more than the split itself. Here every round runs the four loops back to back, each 160 (``--episodes``) expert
pick-place episodes (Assay's seeds are its campaign's, the floor's 1000 onwards), 2 client processes of ``--envs``
environments each, lockstep:

* **Assay, in process** and **Assay, served**: ``served_cost.py``'s campaign (2 local workers; against 2
  ``assay serve-sim metaworld`` server processes started once, before the first round);
* **floor, in process** and **floor, served**: ``served_floor.py``'s loops (a pickled, length-prefixed request and
  answer per lockstep step over localhost TCP; 2 server processes started once, before the first round).

Both sets of servers stay up across rounds, as a deployed server does: from round 2 on, the served loops skip the
first environment build's model compile (0.66-0.69 s of CPU a process here) that the in-process loops' new processes
pay in every round. At 160 episodes (~5 s a campaign) that credits the served side several points; for a per-step
figure in the steady state use ``--episodes 640`` (docs/PERFORMANCE.md, "The channel's own framing and
``assay-sim/2``'s columns").

Every other round runs the four in reverse order, so no loop always runs first or last. Each round gives two
ratios, served / in process for Assay and for the floor, and their quotient: Assay's served ratio over the floor's
in the same round (1.0: Assay's split costs what any split costs here; below 1.0: Assay's own share). Prints each
round and the medians as Markdown; writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import time
from typing import Any

from served_cost import _campaign, _server
from served_floor import run as floor_run
from served_floor import start_servers

LOOPS = ("Assay, in process", "Assay, served", "floor, in process", "floor, served")


def _rounds(args: argparse.Namespace, campaign: dict[str, Any], assay_server: Any, url: str,
            ports: list[int]) -> tuple[list[dict[str, float]], float]:
    """Each round's steps per second of the four loops, and the load average before the first."""
    seeds = list(range(1000, 1000 + args.episodes))

    def assay(served: bool) -> float:
        data = {**campaign, "simulators": {"metaworld": url}} if served else campaign
        steps, seconds, *_ = _campaign(data, "local", 2, assay_server.pid if served else None)
        return steps / seconds

    def floor(served: bool) -> float:
        steps, seconds = floor_run(ports if served else None, seeds, args.envs)
        return steps / seconds

    loops = {name: fn for name, fn in zip(LOOPS, (lambda: assay(False), lambda: assay(True), lambda: floor(False),
                                                  lambda: floor(True)), strict=True)}
    rounds: list[dict[str, float]] = []
    time.sleep(2.0)  # the servers' imports done, as a running server has
    load = os.getloadavg()[0]
    for index in range(args.rounds):
        order = list(loops) if index % 2 == 0 else list(reversed(loops))
        rates = {name: loops[name]() for name in order}
        rounds.append(rates)
        print(f"round {index + 1} ({'forward' if index % 2 == 0 else 'reversed'}): "
              + ", ".join(f"{name} {rates[name]:.0f}" for name in loops) + " steps/s", flush=True)
    return rounds, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--envs", type=int, default=2, help="environments a worker (client) steps in lockstep")
    args = parser.parse_args()
    if args.rounds < 2 or args.episodes < 20:
        parser.error(f"--rounds {args.rounds} --episodes {args.episodes}: a paired comparison needs at least 2 "
                     "rounds (one in each order) and 20 episodes (a shorter round is mostly start-up)")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    campaign = {"name": "served-paired", "seed": 0, "episodes": args.episodes, "envs_per_worker": args.envs,
                "tasks": ["metaworld/pick-place@1"], "policies": ["expert"]}
    assay_server, url = _server("metaworld", 2)
    floor_servers: list[Any] = []
    try:
        floor_servers, ports = start_servers(2, args.envs)
        rounds, load = _rounds(args, campaign, assay_server, url, ports)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(assay_server.pid, signal.SIGKILL)  # its own process group: it and its server processes
        assay_server.wait()
        for server in floor_servers:
            server.terminate()
            server.join(10)
    rows = []
    for rates in rounds:
        mine = rates["Assay, served"] / rates["Assay, in process"]
        floor_ratio = rates["floor, served"] / rates["floor, in process"]
        rows.append((mine, floor_ratio, mine / floor_ratio))
    print(f"\n`python benchmarks/served_paired.py --episodes {args.episodes} --rounds {args.rounds} --envs {args.envs}`"
          f" (2 workers of {args.envs} environments each; load average {load:.1f} before the first round, "
          f"{os.getloadavg()[0]:.1f} after the last)\n")
    print("| round | Assay in process | Assay served | floor in process | floor served | Assay served / in process "
          "| floor served / in process | Assay's ratio / the floor's |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
    for index, (rates, (mine, floor_ratio, quotient)) in enumerate(zip(rounds, rows, strict=True)):
        print(f"| {index + 1} | " + " | ".join(f"{rates[name]:.0f}" for name in LOOPS)
              + f" | {mine:.3f} | {floor_ratio:.3f} | {quotient:.3f} |")
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(f"| median | | | | | {medians[0]:.3f} | {medians[1]:.3f} | {medians[2]:.3f} |")
    ahead = sum(quotient >= 1.0 for *_, quotient in rows)
    print(f"\nsteps/s per loop; medians over {args.rounds} rounds of each round's own ratios. Assay's served ratio "
          f"was at or above the floor's in {ahead} of {args.rounds} rounds; the floor's own split was within 10% "
          f"(>= 0.90) in {sum(floor_ratio >= 0.9 for _, floor_ratio, _ in rows)} of {args.rounds}", flush=True)


if __name__ == "__main__":
    main()
