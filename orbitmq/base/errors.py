"""Root of OrbitMQ's exception tree.

OrbitMQError
├── ConfigError          bad configuration value or file (CLI prints it and exits non-zero)
├── ProtocolError        malformed frame or header on the wire (connection is closed)
├── RemotingError        transport failure
│   ├── RemotingTimeoutError
│   └── RemotingConnectError
├── StoreError           storage failures
│   └── CorruptionError(file, position, reason)
├── InvariantError       a broken internal invariant: the node stops, recovery takes over
└── ClientError          SDK errors (orbitmq.client.errors: one class per ResponseCode)
"""

from __future__ import annotations


class OrbitMQError(Exception):
    """Base class of every OrbitMQ error."""


class ConfigError(OrbitMQError):
    """A configuration value or file is invalid."""


class ProtocolError(OrbitMQError):
    """A frame or header could not be decoded."""


class RemotingError(OrbitMQError):
    """A request could not be delivered or answered."""


class RemotingTimeoutError(RemotingError):
    """No response within the timeout."""


class RemotingConnectError(RemotingError):
    """The peer could not be reached."""


class StoreError(OrbitMQError):
    """A storage operation failed."""


class CorruptionError(StoreError):
    """A file holds bytes that cannot be valid."""

    def __init__(self, file: str, position: int, reason: str) -> None:
        super().__init__(f"{file} @ {position}: {reason}")
        self.file = file
        self.position = position
        self.reason = reason


class InvariantError(OrbitMQError):
    """An internal invariant does not hold."""


class ClientError(OrbitMQError):
    """Base of SDK errors."""
