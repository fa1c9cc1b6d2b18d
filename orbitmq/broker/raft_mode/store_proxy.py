"""RaftStore: the MessageStore as the broker sees it in a Raft group. A write puts the records into the CommitLog
(invisible until committed) and proposes them as a RECORDS entry; everything else is the real store's. A put returns
at once with its result and a wait (end offset 0); the send handler's wait_put_flushed then awaits the commit and
the leader's own apply, and gets the final PutResult."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from orbitmq.store.results import MessageInner, PutResult, PutStatus

if TYPE_CHECKING:
    from orbitmq.broker.raft_mode.service import RaftGroupService

FORGET_AFTER_S = 60.0  # a placeholder nobody waited for is dropped this long after its proposal finished


class RaftStore:
    def __init__(self, store: Any, group: RaftGroupService) -> None:
        self._store = store
        self._group = group
        self._inflight: dict[int, tuple[PutResult, asyncio.Future[PutResult]]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def real(self) -> Any:
        return self._store

    def put_messages_nowait(self, msgs: list[MessageInner]) -> tuple[PutResult, int]:
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL), -1
        if not self._group.accepting_writes():
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE), -1
        group = self._group
        data, result = group.raft_log.put_local(msgs, group.driver.term)
        if data is None:
            return result, -1
        fut = asyncio.ensure_future(group.finish_put(group.driver.propose_nowait(data), len(msgs)))
        key = id(result)
        self._inflight[key] = (result, fut)
        fut.add_done_callback(lambda _f: asyncio.get_running_loop().call_later(
            FORGET_AFTER_S, self._inflight.pop, key, None))
        return result, 0

    async def wait_put_flushed(self, result: PutResult, end_offset: int) -> PutResult:
        pending = self._inflight.pop(id(result), None)
        if pending is None or pending[0] is not result:
            return await self._store.wait_put_flushed(result, end_offset)
        real = await pending[1]
        for f in dataclasses.fields(PutResult):
            setattr(result, f.name, getattr(real, f.name))
        return result

    def when_put_flushed(self, result: PutResult, end_offset: int, callback: Any) -> bool:
        pending = self._inflight.get(id(result))
        if pending is not None and pending[0] is result:
            return False  # the caller awaits wait_put_flushed
        return bool(self._store.when_put_flushed(result, end_offset, callback))

    async def put_messages(self, msgs: list[MessageInner]) -> PutResult:
        result, wait_end = self.put_messages_nowait(msgs)
        if wait_end >= 0:
            return await self.wait_put_flushed(result, wait_end)
        return result

    async def put_message(self, msg: MessageInner) -> PutResult:
        return await self.put_messages([msg])

    def runtime_info(self) -> dict[str, str]:
        out = dict(self._store.runtime_info())
        out.update(self._group.runtime())
        return out
