"""sqlite lease store (one host: every candidate opens the same file). The stdlib sqlite3 module runs in a worker
thread (asyncio.to_thread) so the event loop never blocks on the file lock. Database time is
`julianday('now')`, the time the statement runs."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orbitmq.lease.errors import one_line
from orbitmq.lease.store_sql import Dialect, SqlLeaseStore
from orbitmq.lease.url import LeaseUrl


class SqliteDialect(Dialect):
    now_ms = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
    bigint = "INTEGER"

    def p(self, i: int) -> str:
        return "?"


class SqliteLeaseStore(SqlLeaseStore):
    dialect = SqliteDialect()

    def __init__(self, url: LeaseUrl, *, table: str = "orbitmq_lease", timeout_ms: int = 2000) -> None:
        super().__init__(url, table=table, timeout_ms=timeout_ms)
        self.path = url.path

    async def _connect(self) -> None:
        parent = Path(self.path).parent
        if not parent.is_dir():
            raise FileNotFoundError(f"directory {parent} does not exist")

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=False)
        self._conn = await asyncio.to_thread(connect)

    async def _execute(self, sql: str, args: Sequence[Any]) -> int:
        conn = self._conn
        assert conn is not None
        return await asyncio.to_thread(lambda: conn.execute(sql, tuple(args)).rowcount)

    async def _fetchone(self, sql: str, args: Sequence[Any]) -> Sequence[Any] | None:
        conn = self._conn
        assert conn is not None
        row = await asyncio.to_thread(lambda: conn.execute(sql, tuple(args)).fetchone())
        return None if row is None else tuple(row)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _is_duplicate(self, e: BaseException) -> bool:
        return isinstance(e, sqlite3.IntegrityError)

    def _explain(self, e: BaseException) -> str:
        return one_line(e)
