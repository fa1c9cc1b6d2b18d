"""Command batching of a Raft group (batcher.py): the BATCH codecs (round trip, hostile input) and the group
commit: commands submitted while a batch is in flight go together in the next one, each keeps its own result or
error, a batch-level failure reaches every command of that batch only."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.base.errors import OrbitMQError, ProtocolError
from orbitmq.broker.raft_mode.batcher import (
    BATCH,
    CommandBatcher,
    decode_batch,
    decode_results,
    encode_batch,
    encode_results,
)
from orbitmq.raft import NotLeaderError

_cmds = st.lists(st.tuples(st.integers(0x10, 0x7F), st.binary(max_size=64)), max_size=20)


@given(_cmds)
def test_batch_round_trip(cmds: list[tuple[int, bytes]]) -> None:
    data = encode_batch(cmds)
    assert data[0] == BATCH
    assert decode_batch(data[1:]) == cmds
    results = [(i % 2 == 0, p) for i, (_, p) in enumerate(cmds)]
    assert decode_results(encode_results(results)) == results


@given(_cmds, st.integers(0, 200))
def test_truncated_or_padded_batches_are_refused(cmds: list[tuple[int, bytes]], cut: int) -> None:
    body = encode_batch(cmds)[1:]
    if cut < len(body):
        with pytest.raises(ProtocolError):
            decode_batch(body[:cut])
    with pytest.raises(ProtocolError):
        decode_batch(body + b"\x00")


def test_a_hostile_count_costs_nothing() -> None:
    with pytest.raises(ProtocolError, match="claims"):
        decode_batch(b"\xff\xff\xff\xff")


def test_commands_queued_during_a_batch_go_together_and_keep_their_results() -> None:
    async def main() -> None:
        sent: list[list[tuple[int, bytes]]] = []
        gate = asyncio.Event()

        async def send(data: bytes) -> bytes:
            cmds = decode_batch(data[1:])
            sent.append(cmds)
            if len(sent) == 1:
                await gate.wait()  # the first batch is in flight while the others queue
            return encode_results([(p != b"bad", p[::-1] if p != b"bad" else b"refused: bad") for _, p in cmds])

        b = CommandBatcher(send)
        first = asyncio.ensure_future(b.submit(0x10, b"one", 5000))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(b.submit(0x10, p, 5000)) for p in (b"two", b"bad", b"three")]
        await asyncio.sleep(0)
        gate.set()
        assert await first == b"eno"
        done = await asyncio.gather(*rest, return_exceptions=True)
        assert done[0] == b"owt" and done[2] == b"eerht"
        assert isinstance(done[1], OrbitMQError) and "refused: bad" in str(done[1])
        assert [len(x) for x in sent] == [1, 3]  # one entry for the three queued meanwhile
        assert (b.batches, b.commands) == (2, 4)

    asyncio.run(main())


def test_a_failed_batch_fails_its_commands_only() -> None:
    async def main() -> None:
        calls = 0

        async def send(data: bytes) -> bytes:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise NotLeaderError("n2", "leadership lost")
            return encode_results([(True, b"ok") for _ in decode_batch(data[1:])])

        b = CommandBatcher(send)
        with pytest.raises(NotLeaderError):
            await b.submit(0x10, b"a", 5000)
        assert await b.submit(0x10, b"b", 5000) == b"ok"

    asyncio.run(main())
