"""Timer and delay re-puts respect SYNC_FLUSH before their progress moves (issue 12 item 4): the delay offsets and
the timer checkpoint are persisted only after a flush covers the re-puts they count; a failed flush keeps them."""

from __future__ import annotations

import asyncio
import errno
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services.delay import ScheduleService
from orbitmq.broker.services.timer import TimerService
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.store.schedule import SCHEDULE_TOPIC
from orbitmq.testing.sim_disk import SimBacking, SimDisk


class StepClock:
    def __init__(self, t: int = 1_700_000_000_000) -> None:
        self.t = t

    def now_ms(self) -> int:
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


def _setup(tmp_path: Any) -> tuple[MessageStore, SimDisk, ScheduleService, StepClock]:
    clock = StepClock()
    disk = SimDisk()
    cfg = StoreConfig("/s", mapped_file_size_commitlog=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                      max_message_size=4096, max_hash_slot_num=64, max_index_num=512, message_delay_level="1s 5s",
                      flush_disk_type="SYNC_FLUSH")
    s = MessageStore(cfg, disk=disk, clock=clock)
    s.load()
    ctx = SimpleNamespace(config=SimpleNamespace(message_delay_level="1s 5s", is_slave=False), store=s)
    env = SimpleNamespace(clock=clock, config_dir=str(tmp_path), writes=BackgroundWrites())
    return s, disk, ScheduleService(ctx, env), clock  # type: ignore[arg-type]


def _scheduled() -> MessageInner:
    props = {"DELAY": "1", "REAL_TOPIC": "Real", "REAL_QID": "0"}
    return MessageInner(SCHEDULE_TOPIC, 0, b"body", props)


def test_delay_offsets_persist_only_after_the_re_puts_are_flushed(tmp_path: Any) -> None:
    s, disk, svc, clock = _setup(tmp_path)

    async def go() -> None:
        await svc.start()
        put = await s.put_message(_scheduled())
        clock.t = put.store_timestamp + 1000
        assert await svc.deliver_due(1) is None and svc.offsets[1] == 1
        assert disk.pending_writes("/s/commitlog") > 0  # the re-put (WAIT=false) is written, not flushed
        await svc.stop()
        assert disk.pending_writes("/s/commitlog") == 0  # flushed before the offsets were written
        assert (tmp_path / "delayOffset.json").exists()

    asyncio.run(go())


def test_delay_offsets_stay_when_the_flush_fails(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _disk, svc, clock = _setup(tmp_path)
    real = SimBacking.flush

    async def go() -> None:
        await svc.start()
        put = await s.put_message(_scheduled())
        clock.t = put.store_timestamp + 1000

        def flush(self: SimBacking, start: int, end: int) -> None:
            if "/commitlog/" in self.path:
                raise OSError(errno.EIO, "injected")
            real(self, start, end)

        monkeypatch.setattr(SimBacking, "flush", flush)
        assert await svc.deliver_due(1) is None and svc.offsets[1] == 1
        await svc.stop()
        assert not (tmp_path / "delayOffset.json").exists()  # re-delivered after a restart, never lost
        assert s.read_only_reason

    asyncio.run(go())


def test_timer_checkpoint_waits_for_the_barrier() -> None:
    order: list[str] = []

    class Store:
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        async def durable_barrier(self) -> None:
            order.append("barrier")
            if self.fail:
                raise OSError(errno.EIO, "injected")

    class Wheel:
        def prepare_commit(self, sec: int, off: int) -> object:
            order.append("prepare")
            return object()

        def write_checkpoint(self, _c: object) -> None:
            order.append("write")

        def finish_commit(self, _c: object) -> None:
            order.append("finish")

    for fail in (False, True):
        order.clear()
        svc = TimerService.__new__(TimerService)
        svc.ctx = SimpleNamespace(store=Store(fail))  # type: ignore[assignment]
        svc.store = Wheel()  # type: ignore[assignment]
        svc.cursor_sec, svc.enqueue_offset, svc._inflight = 5, 0, None
        if fail:
            with pytest.raises(OSError):
                asyncio.run(svc._commit(0))
            assert order == ["barrier"]
        else:
            asyncio.run(svc._commit(0))
            assert order == ["barrier", "prepare", "write", "finish"]
