"""The periodic ConsumeQueue/index flush with its fdatasyncs in a worker thread: same marks and checkpoint as the
synchronous flush."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from orbitmq.store import MessageInner, MessageStore, StoreConfig


def _msg(i: int) -> MessageInner:
    return MessageInner("T", i % 2, b"body", {"UNIQ_KEY": f"K{i:08d}", "KEYS": f"k{i}"}, born_timestamp=1,
                        store_host="127.0.0.1:10911")


@contextlib.asynccontextmanager
async def _started_store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    store = MessageStore(StoreConfig(str(tmp_path / "s"), mapped_file_size_commitlog=1 << 20, max_message_size=64 * 1024))
    store.load()
    await store.start()
    try:
        yield store
    finally:
        await store.shutdown()


def test_off_loop_flush_marks_everything_flushed_and_saves_the_checkpoint(tmp_path: Path) -> None:
    async def run() -> None:
        async with _started_store(tmp_path) as store:
            for i in range(50):
                assert (await store.put_message(_msg(i))).ok
            cq_ranges, cq_done = store.cq_table.flush_plan()
            assert store.index is not None
            idx_ranges, idx_done, index_ts = store.index.flush_plan()
            assert cq_ranges and len(cq_done) == 2 and idx_ranges and index_ts > 0
            logics_ts = store.cq_table.last_dispatch_timestamp
            await store._flush_derived_off_loop()
            assert store.cq_table.flush_plan() == ([], [])  # nothing left to sync
            assert store.index.flush_plan()[0] == []
            st = store.checkpoint.state
            assert st.logics_msg_timestamp == logics_ts and st.index_msg_timestamp == index_ts
            assert (await store.put_message(_msg(50))).ok  # a later put is dirty again
            assert len(store.cq_table.flush_plan()[1]) == 1

    asyncio.run(run())


def test_a_put_during_the_sync_stays_dirty(tmp_path: Path) -> None:
    async def run() -> None:
        async with _started_store(tmp_path) as store:
            assert (await store.put_message(_msg(0))).ok
            flush = asyncio.ensure_future(store._flush_derived_off_loop())
            await asyncio.sleep(0)  # the plan is taken, the sync runs in the thread
            assert (await store.put_message(_msg(2))).ok  # same queue, written after the plan
            await flush
            (_cq, hi), = store.cq_table.flush_plan()[1]
            assert hi == 2 * 20  # the second entry is still to be synced

    asyncio.run(run())
