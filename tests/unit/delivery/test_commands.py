"""Delivery commands: every kind round-trips; malformed input is refused with a clear CommandError."""

from __future__ import annotations

import orjson
import pytest

from orbitmq.delivery import commands as dc

ALL = [
    dc.Enqueue(5, 1, 42, 1000),
    dc.Attach(6, "c1", "n1", 4, 30_000),
    dc.Attach(6, "c2", "n2", 1, 1, "single_active"),
    dc.Settle(7, "c1", (1, 2, 3)),
    dc.Return(8, "c1", (4,)),
    dc.ChangeInvisible(9, "c1", 4, 60_000),
    dc.Expire(10),
    dc.ConsumerDown(11, "c1"),
    dc.NodeDown(12, "n1"),
]


@pytest.mark.parametrize("cmd", ALL, ids=lambda c: type(c).__name__)
def test_round_trip(cmd: dc.Command) -> None:
    data = dc.encode(cmd)
    assert b"\n" not in data and len(data) < 120
    assert dc.decode(data) == cmd


@pytest.mark.parametrize("raw, why", [
    (b"not json", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"k":"zzz","t":1}', "unknown command kind"),
    (b'{"k":"exp"}', "missing keys"),
    (b'{"k":"exp","t":1,"x":2}', "unexpected keys"),
    (b'{"k":"exp","t":-1}', "exp.ts"),
    (b'{"k":"exp","t":true}', "exp.ts"),
    (b'{"k":"exp","t":1.5}', "exp.ts"),
    (b'{"k":"cdn","t":1,"c":""}', "cdn.consumer"),
    (b'{"k":"att","t":1,"c":"a","n":"n","p":0,"i":5,"m":"competing"}', "att.prefetch"),
    (b'{"k":"att","t":1,"c":"a","n":"n","p":1,"i":5,"m":"fanout"}', "att.mode"),
    (b'{"k":"ack","t":1,"c":"a","d":[]}', "ack.dids"),
    (b'{"k":"ack","t":1,"c":"a","d":"12"}', "ack.dids"),
])
def test_malformed_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(dc.CommandError, match=why):
        dc.decode(raw)


def test_bounds() -> None:
    with pytest.raises(dc.CommandError, match="over"):
        dc.decode(b" " * (dc.MAX_COMMAND_BYTES + 1))
    with pytest.raises(dc.CommandError, match="consumer"):
        dc.decode(orjson.dumps({"k": "cdn", "t": 1, "c": "x" * (dc.MAX_ID_LEN + 1)}))
    with pytest.raises(dc.CommandError, match="delivery ids"):
        dc.decode(orjson.dumps({"k": "ack", "t": 1, "c": "a", "d": list(range(dc.MAX_LIST + 1))}))
    with pytest.raises(dc.CommandError, match="integer"):
        dc.decode(orjson.dumps({"k": "exp", "t": 1 << 63}))


def test_encode_refuses_what_a_replica_would_refuse() -> None:
    with pytest.raises(dc.CommandError, match="prefetch"):
        dc.encode(dc.Attach(1, "c", "n", 0, 10))
    with pytest.raises(dc.CommandError, match="mode"):
        dc.encode(dc.Attach(1, "c", "n", 1, 10, "broadcast"))
