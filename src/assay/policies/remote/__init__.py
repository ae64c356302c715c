"""Remote policies over openpi's protocol: the wire codec, the server with its dynamic batcher, the client."""

from assay.policies.remote.client import PolicyUnavailableError, RemotePolicy, RemotePolicyError, fetch_metadata
from assay.policies.remote.server import PolicyServer, ProtocolError, ServerConfig, ServerStartError, ServerThread
from assay.policies.remote.wire import MAX_MESSAGE_BYTES, WireError, packb, unpackb

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PolicyServer",
    "PolicyUnavailableError",
    "ProtocolError",
    "RemotePolicy",
    "RemotePolicyError",
    "ServerConfig",
    "ServerStartError",
    "ServerThread",
    "WireError",
    "fetch_metadata",
    "packb",
    "unpackb",
]
