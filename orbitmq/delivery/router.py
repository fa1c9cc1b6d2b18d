"""DeliveryRouter: one DeliveryMachine per consumption queue ("<topic>@<group>") behind a single Raft entry
type, with one snapshot for all of them (what a Raft broker group stores as its delivery snapshot part).

Entry payload: u16 key length (big endian), the key (UTF-8, 1..MAX_KEY_BYTES), then one command
(commands.encode). A machine comes into being with the first command for its key, in log order, so every replica
creates the same machines at the same index.
"""

from __future__ import annotations

import struct

import orjson

from orbitmq.base.invariant import check
from orbitmq.delivery import commands as dc
from orbitmq.delivery.effects import Effect
from orbitmq.delivery.machine import DEFAULT_MAX_DELIVERIES, DeliveryMachine

MAX_KEY_BYTES = 512
ROUTER_SNAPSHOT_VERSION = 1
_LEN = struct.Struct(">H")


def queue_key(topic: str, group: str) -> str:
    return f"{topic}@{group}"


def encode_entry(key: str, cmd: dc.Command) -> bytes:
    k = key.encode()
    if not 0 < len(k) <= MAX_KEY_BYTES:
        raise dc.CommandError(f"queue key of {len(k)} bytes (1..{MAX_KEY_BYTES})")
    return _LEN.pack(len(k)) + k + dc.encode(cmd)


def decode_entry(payload: bytes) -> tuple[str, dc.Command]:
    if len(payload) < _LEN.size:
        raise dc.CommandError("delivery entry shorter than its key length")
    (n,) = _LEN.unpack_from(payload)
    if not 0 < n <= MAX_KEY_BYTES or len(payload) < _LEN.size + n:
        raise dc.CommandError(f"delivery entry: bad queue key length {n}")
    try:
        key = payload[_LEN.size:_LEN.size + n].decode()
    except UnicodeDecodeError as e:
        raise dc.CommandError("delivery entry: queue key is not UTF-8") from e
    return key, dc.decode(payload[_LEN.size + n:])


class DeliveryRouter:
    def __init__(self, max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> None:
        self.max_deliveries = max_deliveries
        self.machines: dict[str, DeliveryMachine] = {}

    def apply(self, payload: bytes) -> tuple[str, list[Effect]]:
        """Apply one committed entry; raises CommandError (before any change) if it is malformed."""
        key, cmd = decode_entry(payload)
        m = self.machines.get(key)
        if m is None:
            m = self.machines[key] = DeliveryMachine(self.max_deliveries)
        return key, m.apply(cmd)

    def enqueue(self, topic: str, queue: int, offset: int, size: int) -> list[tuple[str, list[Effect]]]:
        """A committed message of `topic` joins every existing machine of that topic (key "<topic>@<group>"), in
        key creation order: what a Raft broker group does for each message of a MESSAGES entry, so enqueueing
        needs no entry of its own. ts 0: an enqueue does not move the machine's time."""
        prefix = topic + "@"
        cmd = dc.Enqueue(0, queue, offset, size)
        return [(k, m.apply(cmd)) for k, m in self.machines.items() if k.startswith(prefix)]

    def topics(self) -> set[str]:
        return {k.rpartition("@")[0] for k in self.machines}

    def snapshot(self) -> bytes:
        return orjson.dumps({"v": ROUTER_SNAPSHOT_VERSION, "maxd": self.max_deliveries,
                             "queues": [[k, m.state()] for k, m in self.machines.items()]})

    @classmethod
    def restore(cls, data: bytes) -> DeliveryRouter:
        st = orjson.loads(data)
        check(isinstance(st, dict) and st.get("v") == ROUTER_SNAPSHOT_VERSION, "unknown delivery router snapshot")
        r = cls(st["maxd"])
        r.machines = {k: DeliveryMachine.from_state(s) for k, s in st["queues"]}
        return r
