"""A policy server in its own process, for resident-memory measurements (tests and benchmarks).

``python -m tests.serve_for_memory [--budget-mb N] [--max-connections N] [--stateful]`` prints its port on the
first line of stdout and serves until its stdin closes (or it is killed): a policy answering zeros, one shared
instance (stateless), or with ``--stateful`` a counter per session (an instance each, made by the server's
factory). A line ``stats`` on stdin prints the byte budget's state and the live sessions.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from assay.policies.remote import PolicyServer, PolicyServerConfig, ServerThread
from tests.remote_support import state_task


class Zeros:
    stateless = True

    def reset(self, context) -> None:
        pass

    def act(self, observations):
        return np.zeros((len(observations["state"]), 4))


class Counter:
    """Stateful: per slot, how many times it was asked in this episode (first column), zeros after."""

    def reset(self, context) -> None:
        self.calls = [0] * context.batch_size

    def act(self, observations):
        out = np.zeros((len(observations["state"]), 4))
        for row, slot in enumerate(observations["env_ids"]):
            self.calls[slot] += 1
            out[row, 0] = self.calls[slot]
        return out


def build(arguments: argparse.Namespace) -> PolicyServer:
    """The server the command line asks for."""
    config = PolicyServerConfig(port=0, max_buffer_bytes=int(arguments.budget_mb * 2**20),
                          max_connections=arguments.max_connections)
    if arguments.stateful:
        return PolicyServer(Counter(), state_task(), config, {"policy": "counter", "version": "1"}, factory=Counter)
    return PolicyServer(Zeros(), state_task(), config, {"policy": "zeros", "version": "1"})


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.serve_for_memory")
    parser.add_argument("--budget-mb", type=float, default=256.0)
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--stateful", action="store_true", help="an instance per session (a counter each)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    server = build(parse(argv))
    with ServerThread(server):
        sys.stdout.write(f"{server.port}\n")
        sys.stdout.flush()
        for line in sys.stdin:  # until the parent closes our stdin (or kills us)
            if line.strip() == "stats":
                budget = server.budget
                sessions = len(server.sessions) if server.sessions is not None else "shared"
                sys.stdout.write(f"tickets {budget.tickets} peak {budget.peak_tickets} held {len(budget.held)} "
                                 f"waiting {len(budget.waiting)} charged {sum(budget.charged.values())} "
                                 f"sessions {sessions}\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
