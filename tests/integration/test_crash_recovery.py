"""kill -9 of a real broker process: acknowledged messages survive, derived files agree with the CommitLog,
a torn last record is truncated; and the same data survives a clean ASYNC_FLUSH shutdown."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from orbitmq.client import Admin, Producer, SendStatus
from orbitmq.model import Message
from orbitmq.model.record import BLANK_MAGIC, MAGIC_V1, read_size_magic
from orbitmq.testing.procs import Standalone
from orbitmq.testing.readback import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SEGMENT = 1024 * 1024  # small CommitLog files: the load crosses several segment boundaries


def _standalone(tmp_path: Path, flush: str) -> Standalone:
    return Standalone(tmp_path / "sa", flushDiskType=flush, mappedFileSizeCommitLog=SEGMENT,
                      maxMessageSize=64 * 1024).start()


async def _load_until_killed(sa: Standalone, topic: str, senders: int, kill_after_acks: int) -> dict[str, int]:
    """Send from `senders` tasks; kill -9 the broker once `kill_after_acks` sends are acknowledged.
    Returns key -> queue offset of every acknowledged message."""
    acked: dict[str, int] = {}
    p = Producer("crash_pg", namesrv=sa.namesrv_addr, send_timeout_ms=2000, retry_times=0)
    await p.start()
    stop = asyncio.Event()

    async def sender(n: int) -> None:
        i = 0
        while not stop.is_set():
            key = f"s{n}-{i}"
            i += 1
            m = Message(topic, (key + ":").encode() + os.urandom(700), {"seq": str(i)})
            m.keys = key
            m.tags = f"T{n % 3}"
            try:
                r = await p.send(m)
            except Exception:
                if not sa.proc.running:
                    return
                await asyncio.sleep(0.05)
                continue
            if r.status == SendStatus.SEND_OK:
                acked[key] = r.queue_offset
                if len(acked) >= kill_after_acks and sa.proc.running:
                    sa.kill9()  # in the middle of the load: other senders have requests in flight
                    stop.set()

    await asyncio.wait_for(asyncio.gather(*(sender(n) for n in range(senders))), 120)
    await p.shutdown()
    return acked


def _commitlog_end(store_dir: Path) -> tuple[Path, int]:
    """(last segment file, position after its last well-formed record) by walking the record headers."""
    files = sorted((store_dir / "commitlog").iterdir())
    for f in reversed(files):
        data = f.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = read_size_magic(data, pos)
            if magic == BLANK_MAGIC:
                break
            if magic != MAGIC_V1 or size <= 0:
                break
            pos += size
        if pos > 0:
            return f, pos
    raise AssertionError("no records in the commitlog")


async def _check_all_readable(sa: Standalone, topic: str, acked: dict[str, int]) -> dict[str, int]:
    per_queue = await read_topic(sa.namesrv_addr, topic)
    seen: dict[str, int] = {}
    for mq, msgs in per_queue.items():
        offsets = [m.queue_offset for m in msgs]
        # the ConsumeQueue agrees with the CommitLog: entry n points at the record stored with queue offset n
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, mq
        for m in msgs:
            assert m.body.startswith(m.keys[0].encode() + b":")
            seen[m.keys[0]] = m.queue_offset
    missing = set(acked) - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    # the index agrees too: a sample of acknowledged keys is found by QUERY_MESSAGE
    async with Admin(sa.namesrv_addr) as admin:
        for key in sorted(acked)[:: max(1, len(acked) // 40)]:
            found = await admin.query_msg_by_key(topic, key)
            assert any(key in m.keys for m in found), f"index lost {key}"
    return seen


def test_sync_flush_kill9_under_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    sa = _standalone(tmp_path, "SYNC_FLUSH")
    try:
        acked = asyncio.run(_load_until_killed(sa, "CrashSync", senders=16, kill_after_acks=4000))
        assert len(acked) >= 4000 and not sa.proc.running
        # tear the tail: a partial copy of the last record written after it, as a crash mid-write leaves it
        seg, end = _commitlog_end(sa.store_dir)
        data = seg.read_bytes()
        prev = end
        size = None
        pos = 0
        while pos < end:  # find the last record's start
            size, _ = read_size_magic(data, pos)
            prev, pos = pos, pos + size
        assert size is not None
        torn = data[prev : prev + size // 2]
        with open(seg, "r+b") as f:
            f.seek(end)
            f.write(torn)
        sa.start()
        seen = asyncio.run(_check_all_readable(sa, "CrashSync", acked))
        assert len(seen) >= len(acked)

        async def after() -> None:  # the broker writes over the truncated tail and serves it
            async with Producer("after_pg", namesrv=sa.namesrv_addr) as p:
                m = Message("CrashSync", b"after:" + b"z" * 10, {})
                m.keys = "after"
                r = await p.send(m)
                assert r.status == SendStatus.SEND_OK
            per_queue = await read_topic(sa.namesrv_addr, "CrashSync", group="readback2")
            assert sum(1 for ms in per_queue.values() for m in ms if m.keys == ["after"]) == 1

        asyncio.run(after())
        log = sa.log_path.read_text(errors="replace")
        assert "CommitLog tail torn -> truncate" in log, "recovery did not report the torn record"
    finally:
        sa.close()


def test_async_flush_clean_shutdown_keeps_everything(tmp_path: Path) -> None:
    sa = _standalone(tmp_path, "ASYNC_FLUSH")
    try:
        async def load() -> dict[str, int]:
            acked: dict[str, int] = {}
            async with Producer("clean_pg", namesrv=sa.namesrv_addr) as p:
                async def sender(n: int) -> None:
                    for i in range(300):
                        key = f"c{n}-{i}"
                        m = Message("CleanAsync", (key + ":").encode() + os.urandom(500), {})
                        m.keys = key
                        r = await p.send(m)
                        assert r.status == SendStatus.SEND_OK
                        acked[key] = r.queue_offset
                await asyncio.gather(*(sender(n) for n in range(8)))
            return acked

        acked = asyncio.run(load())
        assert sa.terminate() == 0  # SIGTERM: clean shutdown, exit code 0
        assert not (sa.store_dir / "abort").exists()
        sa.start()
        seen = asyncio.run(_check_all_readable(sa, "CleanAsync", acked))
        assert seen == acked
    finally:
        sa.close()
