"""Simulators as services: a backend served by ``assay serve-sim`` in its own process (and Python environment),
a campaign's environments stepped over the policy side's websocket + msgpack wire.

May import ``assay.spec``, ``assay.sim`` and ``assay.policies`` (for the wire codec); ``assay.run`` imports it.
"""

from assay.errors import SimulatorLostError, SimulatorRefused
from assay.served.backends import (
    ServedBackend,
    backend_of,
    checkout,
    environment_path,
    environment_python,
    lock_path,
    served_backends,
)
from assay.served.client import ServedEnv, close_links
from assay.served.preflight import check_served_backends, check_simulators, make_served_env
from assay.served.protocol import PROTOCOL
from assay.served.server import SimServer, SimServerConfig

__all__ = [
    "PROTOCOL",
    "ServedBackend",
    "ServedEnv",
    "SimServer",
    "SimServerConfig",
    "SimulatorLostError",
    "SimulatorRefused",
    "backend_of",
    "check_served_backends",
    "checkout",
    "check_simulators",
    "close_links",
    "environment_path",
    "environment_python",
    "lock_path",
    "served_backends",
    "make_served_env",
]
