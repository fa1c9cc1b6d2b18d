"""Group commit for a Raft group's commands (forward_command): commands that arrive while a batch is being committed
go together in the next one, as ONE Raft entry of type BATCH (and, from a follower, one forward to the leader).

Why: local delivery turns every ack into a command; one entry per ack costs the leader a proposal, an fsync round,
two AppendEntries and an apply each. With a batch in flight, the next batch takes everything queued meanwhile, so a
busy member needs one entry per commit round instead of one per ack, and an idle one adds no delay (a lone command
goes at once). Results stay per command: the BATCH apply calls each command's apply in order and records its bytes
or its error.

BATCH entry payload (after the type byte): u32 count, then per command: type u8, length u32, payload.
Results: u32 count, then per command: status u8 (0 ok, 1 the apply raised), length u32, bytes (result / error text).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Awaitable, Callable

from orbitmq.base.errors import OrbitMQError, ProtocolError
from orbitmq.broker.raft_mode.codec import decode_items

BATCH = 0x0E  # internal entry type: several commands in one entry
MAX_COUNT = 512  # commands per batch
MAX_BYTES = 1024 * 1024  # payload bytes per batch (one more command may exceed it)
_COUNT = struct.Struct(">I")
_ITEM = struct.Struct(">BI")

Send = Callable[[bytes], Awaitable[bytes]]  # a BATCH entry (type byte included) -> its encoded results


def encode_batch(cmds: list[tuple[int, bytes]]) -> bytes:
    out = [bytes((BATCH,)), _COUNT.pack(len(cmds))]
    for kind, payload in cmds:
        out.append(_ITEM.pack(kind, len(payload)))
        out.append(payload)
    return b"".join(out)


def _items(data: bytes | memoryview, what: str) -> list[tuple[int, bytes]]:
    if len(data) < _COUNT.size:
        raise ProtocolError(f"{what} of {len(data)} bytes")
    (count,) = _COUNT.unpack_from(data)
    return decode_items(data, _COUNT.size, count, what)


def decode_batch(payload: bytes | memoryview) -> list[tuple[int, bytes]]:
    """The (type, payload) commands of a BATCH entry's payload (type byte excluded); ProtocolError if malformed."""
    return _items(payload, "command batch")


def encode_results(results: list[tuple[bool, bytes]]) -> bytes:
    return encode_batch([(0 if ok else 1, data) for ok, data in results])[1:]


def decode_results(data: bytes | memoryview) -> list[tuple[bool, bytes]]:
    return [(status == 0, out) for status, out in _items(data, "command batch results")]


class CommandBatcher:
    """submit() queues a command; one batch is in flight at a time and takes everything queued when it starts."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queue: deque[tuple[int, bytes, asyncio.Future[bytes]]] = deque()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.commands = 0

    async def submit(self, entry_type: int, payload: bytes, timeout_ms: int) -> bytes:
        """The command's apply result; OrbitMQError when its apply raised; the batch's error (NotLeaderError,
        TimeoutError, ...) when the batch failed as a whole; TimeoutError after timeout_ms."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._queue.append((entry_type, payload, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="raft-group commands")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await asyncio.shield(fut)
        except TimeoutError:
            fut.add_done_callback(_consume)  # its outcome arrives later, unread
            raise TimeoutError(f"command not committed within {timeout_ms} ms (it may still be applied)") from None

    async def _run(self) -> None:
        while self._queue:
            batch: list[tuple[int, bytes, asyncio.Future[bytes]]] = []
            size = 0
            while self._queue and len(batch) < MAX_COUNT and size < MAX_BYTES:
                item = self._queue.popleft()
                batch.append(item)
                size += len(item[1])
            try:
                out = decode_results(await self._send(encode_batch([(k, p) for k, p, _ in batch])))
                if len(out) != len(batch):
                    raise ProtocolError(f"{len(out)} results for a batch of {len(batch)} commands")
            except Exception as e:  # noqa: BLE001 - every command of the batch gets the batch's error
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches += 1
            self.commands += len(batch)
            for (_, _, fut), (ok, data) in zip(batch, out, strict=True):
                if fut.done():
                    continue
                if ok:
                    fut.set_result(data)
                else:
                    fut.set_exception(OrbitMQError(data.decode("utf-8", "replace")))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for _, _, fut in self._queue:
            if not fut.done():
                fut.set_exception(OrbitMQError("the Raft group service stopped"))
        self._queue.clear()


def _consume(fut: asyncio.Future[bytes]) -> None:
    if not fut.cancelled():
        fut.exception()
