"""Commands of the local-delivery state machine: what goes through the Raft log (issue 14).

Every command carries `ts`, the proposing leader's wall clock in ms: the machine's only notion of time (it keeps
the maximum seen, so a new leader whose clock is behind cannot move time back). Replicas never read a clock.

Wire form: one orjson object per command, short keys, at most MAX_COMMAND_BYTES; `decode` checks every field's
type and bounds and raises CommandError (a malformed entry must stop the caller, not half-apply).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from orbitmq.base.errors import ProtocolError

MAX_COMMAND_BYTES = 16 * 1024
MAX_ID_LEN = 255
MAX_LIST = 1024
MAX_INT = (1 << 63) - 1
MODES = ("competing", "single_active")


class CommandError(ProtocolError):
    """A command could not be decoded (too big, wrong kind, missing or out-of-range field)."""


@dataclass(frozen=True, slots=True)
class Enqueue:
    """A committed message becomes deliverable: its reference (queue id, queue offset) and payload size."""
    ts: int
    queue: int
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Attach:
    """A consumer subscribes from `node` with a prefetch (max unacknowledged checkouts) and an invisible time.
    The first attach on an empty machine fixes the mode; an attach with another mode is refused."""
    ts: int
    consumer: str
    node: str
    prefetch: int
    invisible_ms: int
    mode: str = "competing"


@dataclass(frozen=True, slots=True)
class Settle:
    """Ack: the consumer is done with these deliveries (delivery ids)."""
    ts: int
    consumer: str
    dids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Return:
    """Nack: the deliveries go back to the queue for redelivery."""
    ts: int
    consumer: str
    dids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChangeInvisible:
    """The delivery's deadline becomes ts + invisible_ms."""
    ts: int
    consumer: str
    did: int
    invisible_ms: int


@dataclass(frozen=True, slots=True)
class Expire:
    """The leader's timer: every checkout whose deadline is <= ts is returned."""
    ts: int


@dataclass(frozen=True, slots=True)
class ConsumerDown:
    """The node the consumer was on lost it (connection closed, cancel): its checkouts are returned."""
    ts: int
    consumer: str


@dataclass(frozen=True, slots=True)
class NodeDown:
    """A whole node is gone: every consumer attached to it is down."""
    ts: int
    node: str


Command = Enqueue | Attach | Settle | Return | ChangeInvisible | Expire | ConsumerDown | NodeDown

_KIND = {Enqueue: "enq", Attach: "att", Settle: "ack", Return: "ret", ChangeInvisible: "inv", Expire: "exp",
         ConsumerDown: "cdn", NodeDown: "ndn"}
# field name -> (wire key, type); order = constructor order
_FIELDS: dict[str, tuple[type, tuple[tuple[str, str, str], ...]]] = {
    "enq": (Enqueue, (("ts", "t", "int"), ("queue", "q", "int"), ("offset", "o", "int"), ("size", "s", "int"))),
    "att": (Attach, (("ts", "t", "int"), ("consumer", "c", "id"), ("node", "n", "id"), ("prefetch", "p", "pos"),
                     ("invisible_ms", "i", "pos"), ("mode", "m", "mode"))),
    "ack": (Settle, (("ts", "t", "int"), ("consumer", "c", "id"), ("dids", "d", "ints"))),
    "ret": (Return, (("ts", "t", "int"), ("consumer", "c", "id"), ("dids", "d", "ints"))),
    "inv": (ChangeInvisible, (("ts", "t", "int"), ("consumer", "c", "id"), ("did", "d", "int"),
                              ("invisible_ms", "i", "pos"))),
    "exp": (Expire, (("ts", "t", "int"),)),
    "cdn": (ConsumerDown, (("ts", "t", "int"), ("consumer", "c", "id"))),
    "ndn": (NodeDown, (("ts", "t", "int"), ("node", "n", "id"))),
}


def encode(cmd: Command) -> bytes:
    kind = _KIND[type(cmd)]
    out: dict[str, Any] = {"k": kind}
    for name, key, _ in _FIELDS[kind][1]:
        v = getattr(cmd, name)
        out[key] = list(v) if isinstance(v, tuple) else v
    data = orjson.dumps(out)
    if len(data) > MAX_COMMAND_BYTES:
        raise CommandError(f"command {kind} is {len(data)} bytes, over {MAX_COMMAND_BYTES}")
    _ = decode(data)        # never put into the log what a replica would refuse
    return data


def _int(v: object, what: str, lo: int) -> int:
    if type(v) is not int or not lo <= v <= MAX_INT:
        raise CommandError(f"{what}: expected an integer >= {lo}, got {v!r}")
    return v


def _field(v: object, what: str, typ: str) -> object:
    if typ == "int":
        return _int(v, what, 0)
    if typ == "pos":
        return _int(v, what, 1)
    if typ == "id":
        if not isinstance(v, str) or not 0 < len(v) <= MAX_ID_LEN:
            raise CommandError(f"{what}: expected a string of 1..{MAX_ID_LEN} characters, got {v!r}")
        return v
    if typ == "mode":
        if v not in MODES:
            raise CommandError(f"{what}: expected one of {', '.join(MODES)}, got {v!r}")
        return v
    # "ints"
    if not isinstance(v, list) or not 0 < len(v) <= MAX_LIST:
        raise CommandError(f"{what}: expected a list of 1..{MAX_LIST} delivery ids")
    return tuple(_int(x, what, 0) for x in v)


def decode(data: bytes) -> Command:
    if len(data) > MAX_COMMAND_BYTES:
        raise CommandError(f"command of {len(data)} bytes, over {MAX_COMMAND_BYTES}")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise CommandError(f"command is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise CommandError("command is not a JSON object")
    kind = obj.get("k")
    spec = _FIELDS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise CommandError(f"unknown command kind {kind!r}")
    cls, fields = spec
    if len(obj) != len(fields) + 1:
        extra = sorted(set(obj) - {"k"} - {k for _, k, _ in fields})
        missing = sorted({k for _, k, _ in fields} - set(obj))
        raise CommandError(f"command {kind}: unexpected keys {extra}, missing keys {missing}")
    args = []
    for name, key, typ in fields:
        if key not in obj:
            raise CommandError(f"command {kind}: missing {key!r} ({name})")
        args.append(_field(obj[key], f"{kind}.{name}", typ))
    return cls(*args)  # type: ignore[no-any-return]
