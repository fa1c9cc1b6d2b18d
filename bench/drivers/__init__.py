"""Driver: what a benchmarked system must offer the load shapes (one destination at a time).

Implementations: orbitmq (starts its own broker process), rabbitmq (quorum queue), nats (JetStream file stream).
Imports of client libraries happen inside each driver module, so a missing library only disables that system.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.metrics import Meter


class Driver:
    """Base class; subclasses override every method that raises NotImplementedError."""

    system = "?"          # "orbitmq" | "rabbitmq" | "nats"
    mode = "default"      # flush mode for orbitmq; "default" for the others
    durability = ""       # one line for the report: when is a send acknowledged

    @property
    def label(self) -> str:
        return self.system if self.mode == "default" else f"{self.system}/{self.mode}"

    async def start(self) -> None:
        """Connect (and start the server process when the driver owns one)."""

    async def prepare(self, destination: str) -> None:
        """Create the queue / stream / topic that every following call uses."""
        raise NotImplementedError

    async def send(self, body: bytes) -> None:
        """Send one message and wait until the system acknowledges it as stored."""
        raise NotImplementedError

    async def send_with_id(self, body: bytes) -> None:
        """As send(), with a unique message id the server de-duplicates retries by (the default: send(), for a
        client that always gives one, as RocketMQ's UNIQ_KEY)."""
        await self.send(body)

    async def send_batch(self, bodies: list[bytes]) -> None:
        """Send several messages in one go and wait until all are acknowledged."""
        raise NotImplementedError

    supports_auto_batch = False  # True: send_auto() exists

    async def send_auto(self, body: bytes) -> None:
        """As send(), through a client that coalesces concurrent sends into batches (no added linger)."""
        raise NotImplementedError

    async def consume(self, count: int, meter: Meter) -> None:
        """Receive `count` messages from the start of the destination, acking them; bump meter per message."""
        raise NotImplementedError

    def server_pid(self) -> int | None:
        """Pid of the server process whose CPU and memory we report."""
        return None

    async def cleanup(self) -> None:
        """Delete the destination."""

    async def stop(self) -> None:
        """Disconnect (and stop the server process when the driver owns one)."""


def make_driver(system: str, mode: str, options: object) -> Driver:
    if system == "rabbitmq":
        from bench.drivers.rabbitmq import RabbitDriver

        return RabbitDriver(options)
    if system == "nats":
        from bench.drivers.nats import NatsDriver

        return NatsDriver(options)
    if system == "orbitmq":
        from bench.drivers.orbitmq import OrbitDriver

        return OrbitDriver(mode, options)
    raise ValueError(f"unknown system {system!r}")
