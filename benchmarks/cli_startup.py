"""How long the listings take to answer, for docs/PERFORMANCE.md: ``assay --version``, ``--help``,
``tasks``, ``policies`` and ``factors``, each in a fresh process, against one or more source trees; with
``--store DIR``, also the reading commands ``results``, ``leaderboard`` and ``episodes ls`` on that store, and the
floor under them: a fresh process that only imports the libraries every reading command needs.

    python benchmarks/cli_startup.py [--src src] [--src /tmp/old/src] [--repeat 7] [--store DIR]

Each tree is put first on ``PYTHONPATH`` and each listing runs ``--repeat`` times as
``python -m assay.cli.app ARGS`` (the entry point every version has), interleaved across trees so that a
change in the machine's load falls on all of them alike; the median wall time is printed, the median CPU
time (user + system of the child process: what the command costs, much less sensitive than wall time to
other processes sharing the cores), and the cumulative ``-X importtime`` of ``import assay.cli.app`` (what
every command pays before it starts).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

LISTINGS = (("--version",), ("--help",), ("tasks",), ("tasks", "--family", "pick-place"), ("policies",), ("factors",))
READING = (("results",), ("leaderboard",), ("episodes", "ls"))
# What a reading command cannot do without: the catalog's SQLAlchemy, NumPy, the CLI's Typer and Rich, pydantic
FLOOR = "import sqlalchemy, numpy, typer, rich.console, rich.table, pydantic, yaml"


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src.resolve()), "COLUMNS": "120"}


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wall(src: Path, args: tuple[str, ...]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh ``python -m assay.cli.app ARGS`` (``("-c", CODE)``: of that)."""
    cpu = _cpu_of_children()
    started = time.perf_counter()
    command = list(args) if args[0] == "-c" else ["-m", "assay.cli.app", *args]
    subprocess.run([sys.executable, *command], env=_env(src), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, _cpu_of_children() - cpu


def _import_ms(src: Path) -> float:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import assay.cli.app"], env=_env(src),
                          check=True, capture_output=True, text=True)
    line = next(x for x in reversed(done.stderr.splitlines()) if x.rstrip().endswith("| assay.cli.app"))
    return int(line.split("|")[1]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", type=Path, action="append", help="A source tree (repeatable; default: src).")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--store", type=Path, help="Also time the reading commands on this store.")
    args = parser.parse_args()
    trees: list[Path] = args.src or [Path("src")]
    commands = LISTINGS
    if args.store is not None:
        commands += tuple((*c, "--store", str(args.store)) for c in READING) + (("-c", FLOOR),)
    times: dict[tuple[Path, tuple[str, ...]], list[tuple[float, float]]] = {(t, a): [] for t in trees
                                                                             for a in commands}
    imports: dict[Path, list[float]] = {t: [] for t in trees}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for tree in trees:
            imports[tree].append(_import_ms(tree))
            for listing in commands:
                times[tree, listing].append(_wall(tree, listing))
    print(f"median of {args.repeat} fresh processes each, seconds wall / CPU (python -m assay.cli.app ARGS; "
          f"1-minute load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on "
          f"{os.cpu_count()} cores)")
    print(f"{'command':<26}" + "".join(f"{str(t):>28}" for t in trees))
    for listing in commands:
        cells = "".join(f"{statistics.median(w for w, _ in times[t, listing]):>19.2f} / "
                        f"{statistics.median(c for _, c in times[t, listing]):.2f}" for t in trees)
        shown = listing[:listing.index("--store")] if "--store" in listing else listing
        name = "floor: " + FLOOR.removeprefix("import ")[:19] if listing[0] == "-c" else " ".join(shown)
        print(f"{name:<26}{cells}")
    print(f"{'import ms':<12}" + "".join(f"{statistics.median(imports[t]):>28.0f}" for t in trees)
          + "   (cumulative -X importtime of assay.cli.app, median)")


if __name__ == "__main__":
    main()
