"""Restart (issue 16.1): while a broker process recovers its store, its port answers GET_BROKER_RUNTIME_INFO with
SERVICE_NOT_AVAILABLE ("starting", retryable) and the recovery progress as a KVTable body; once it accepts, the
normal runtime info carries the finished recovery's figures."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RECORDS = 120_000  # ~25 MB of small records: a full validation and re-dispatch of a few seconds


def _build(store_dir: Path) -> int:
    """A store written through the API (as the standalone's settings), then its checkpoint and ConsumeQueues
    removed: the restart validates the whole CommitLog and re-dispatches every record."""

    async def go() -> int:
        s = MessageStore(StoreConfig(str(store_dir), mapped_file_size_commitlog=64 << 20,
                                     mapped_file_size_consume_queue=300_000 * 20 // 10, max_hash_slot_num=50_000,
                                     max_index_num=200_000, message_index_enable=False))
        s.load()
        await s.start()
        body = b"x" * 64
        for i in range(0, RECORDS, 128):
            r = await s.put_messages([MessageInner("Progress", (i + k) % 4, body, {}) for k in range(128)])
            assert r.ok
        end = s.max_phys_offset
        await s.shutdown()
        return end

    end = asyncio.run(go())
    for name in ("checkpoint", "checkpoint.bak"):
        if (store_dir / name).exists():
            os.remove(store_dir / name)
    for root, dirs, files in os.walk(store_dir / "consumequeue", topdown=False):
        for f in files:
            os.remove(os.path.join(root, f))
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    return end


def test_runtime_info_reports_recovery_progress_while_starting(tmp_path: Path) -> None:
    sa = Standalone(tmp_path, messageIndexEnable=False)
    end = _build(sa.store_dir)
    sa.proc.start(wait=False)
    starting: list[dict[str, str]] = []
    remarks: list[str] = []
    final: dict[str, str] | None = None
    deadline = time.monotonic() + 90
    try:
        while final is None:
            assert time.monotonic() < deadline, f"never ready\n{sa.proc.log_tail()}"
            assert sa.proc.running, sa.proc.log_tail()
            try:
                resp = blocking_request(sa.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                        2.0)
            except OSError:  # not listening yet (interpreter start-up)
                time.sleep(0.02)
                continue
            if resp.code == ResponseCode.SUCCESS:
                final = KVTable.from_json(resp.body).table
                break
            assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "starting" in (resp.remark or "")
            if resp.body:
                starting.append(KVTable.from_json(resp.body).table)
                remarks.append(resp.remark or "")
            time.sleep(0.02)
    finally:
        if final is None:
            sa.close()
    try:
        in_store = [t for t in starting if t["startupPhase"] == "store"]
        assert in_store, starting
        ranged = [t for t in in_store if t["recoveryPhase"] in ("validate", "redispatch")]
        assert ranged, in_store  # seen while the CommitLog was being validated or re-dispatched
        for t in ranged:
            scanned, total = int(t["recoveryScannedBytes"]), int(t["recoveryTotalBytes"])
            assert 0 <= scanned <= total
        assert any(t["recoveryPhase"] == "validate" and 0 < int(t["recoveryScannedBytes"]) for t in ranged) or any(
            t["recoveryPhase"] == "redispatch" for t in ranged), ranged
        phases = [t["recoveryPhase"] for t in in_store]
        order = ["open", "consumequeue", "index", "validate", "redispatch", "done"]
        assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases), phases
        assert any("MiB" in r for r in remarks), remarks  # the progress is in the remark too
        assert final["recoveryPhase"] == "done" and int(final["recoveryElapsedMs"]) > 0
        # no checkpoint: the whole CommitLog validated, and re-dispatched (no ConsumeQueue)
        assert int(final["recoveryValidatedBytes"]) == int(final["recoveryRedispatchedBytes"]) == end
        assert final["recovery"].startswith("recover clean exit missing")
        log = sa.log_path.read_text(errors="replace")
        assert "store recovery: done in" in log
    finally:
        sa.close()
