"""Remote policies over openpi's protocol: the wire codec, the server with its dynamic batcher, the client."""

from assay.errors import (
    CapacityWarning,
    PolicyUnavailableError,
    ProtocolError,
    RemotePolicyError,
    ServerStartError,
    WireError,
)
from assay.policies.remote.client import RemotePolicy
from assay.policies.remote.connecting import capacity_warning, fetch_metadata, warn_capacity
from assay.policies.remote.server import PolicyServer, PolicyServerConfig, ServerThread
from assay.policies.remote.wire import MAX_MESSAGE_BYTES, packb, unpackb

__all__ = [
    "MAX_MESSAGE_BYTES",
    "CapacityWarning",
    "PolicyServer",
    "PolicyUnavailableError",
    "ProtocolError",
    "RemotePolicy",
    "RemotePolicyError",
    "PolicyServerConfig",
    "ServerStartError",
    "ServerThread",
    "WireError",
    "capacity_warning",
    "fetch_metadata",
    "packb",
    "unpackb",
    "warn_capacity",
]
