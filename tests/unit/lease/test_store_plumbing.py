"""SqlLeaseStore's plumbing on sqlite (no server needed): a statement that cannot finish in time is one
LeaseStoreError line, the connection is thrown away and the next statement reconnects; a cancelled statement
(stop() during a renewal) also drops the connection."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from orbitmq.lease import Candidate, LeaseStoreError, open_store
from orbitmq.lease.store_sql import SqlLeaseStore

ME = Candidate("127.0.0.1:10911", "127.0.0.1:10912", "n1")


def test_timeout_is_one_line_and_the_next_statement_reconnects(tmp_path: Path) -> None:
    async def main() -> None:
        url = f"sqlite:///{tmp_path}/lease.db"
        store = open_store(url, timeout_ms=300)
        assert isinstance(store, SqlLeaseStore)
        await store.open()
        assert await store.insert("g/b", ME, 5000)
        locker = sqlite3.connect(f"{tmp_path}/lease.db", isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")  # another process holds the database: writes wait, then time out
        try:
            with pytest.raises(LeaseStoreError) as e:
                await store.renew("g/b", ME.nonce, 1, 5000)
            msg = str(e.value)
            assert "renew" in msg and "\n" not in msg and msg.startswith(f"sqlite://{tmp_path}/lease.db: ")
            assert store._conn is None and not store._connected
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert await store.renew("g/b", ME.nonce, 1, 5000)  # reconnected
        row = await store.read("g/b")
        assert row is not None and row.status == "active" and 0 < row.remaining_ms <= 5000
        await store.close()
    asyncio.run(main())


def test_cancelled_statement_drops_the_connection(tmp_path: Path) -> None:
    async def main() -> None:
        store = open_store(f"sqlite:///{tmp_path}/lease.db", timeout_ms=2000)
        assert isinstance(store, SqlLeaseStore)
        await store.open()
        locker = sqlite3.connect(f"{tmp_path}/lease.db", isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        task = asyncio.ensure_future(store.insert("g/b", ME, 5000))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store._conn is None and not store._connected
        locker.execute("ROLLBACK")
        locker.close()
        row = await store.read("g/b")  # usable again; the cancelled insert may or may not have run
        assert row is None or row.holder_nonce == ME.nonce
        await store.close()
    asyncio.run(main())
