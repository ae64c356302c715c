"""A policy server in its own process, for resident-memory measurements (tests and benchmarks).

``python -m tests.serve_for_memory [--budget-mb N] [--stateful]`` prints its port on the first line of stdout
and serves until killed: a policy answering zeros (stateless) or a counter per session (``--stateful``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from assay.policies.remote import PolicyServer, ServerConfig, ServerThread
from tests.remote_support import state_task


class Zeros:
    stateless = True

    def reset(self, context) -> None:
        pass

    def act(self, observations):
        return np.zeros((len(observations["state"]), 4))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-mb", type=float, default=256.0)
    parser.add_argument("--max-connections", type=int, default=64)
    arguments = parser.parse_args()
    config = ServerConfig(port=0, max_buffer_bytes=int(arguments.budget_mb * 2**20),
                          max_connections=arguments.max_connections)
    server = PolicyServer(Zeros(), state_task(), config, {"policy": "zeros", "version": "1"})
    with ServerThread(server):
        sys.stdout.write(f"{server.port}\n")
        sys.stdout.flush()
        for line in sys.stdin:  # until the parent closes our stdin (or kills us)
            if line.strip() == "stats":
                budget = server.budget
                sys.stdout.write(f"tickets {budget.tickets} peak {budget.peak_tickets} held {len(budget.held)} "
                                 f"waiting {len(budget.waiting)} charged {sum(budget.charged.values())}\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
