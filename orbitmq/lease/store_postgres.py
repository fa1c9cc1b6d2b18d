"""PostgreSQL lease store on asyncpg (non-blocking, the asyncio driver with the widest use). Database time is
`clock_timestamp()`: the time the statement runs, not the start of its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orbitmq.lease.errors import one_line
from orbitmq.lease.store_sql import Dialect, SqlLeaseStore


class PostgresDialect(Dialect):
    now_ms = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"

    def p(self, i: int) -> str:
        return f"${i}"

    def is_member(self, list_col: str, value: str) -> str:
        return (f"strpos({self.concat(repr(','), list_col, repr(','))}, "
                f"{self.concat(repr(','), f'{value}::text', repr(','))}) > 0")


class PostgresLeaseStore(SqlLeaseStore):
    dialect = PostgresDialect()

    async def _connect(self) -> None:
        import asyncpg  # lazily: a broker without lease election never loads the driver

        u = self.url
        self._conn = await asyncpg.connect(host=u.host, port=u.port, user=u.user, password=u.password or None,
                                           database=u.database, timeout=self.timeout_s,
                                           statement_cache_size=0,
                                           server_settings={"application_name": "orbitmq-lease"})

    async def _execute(self, sql: str, args: Sequence[Any]) -> int:
        status = await self._conn.execute(sql, *args)  # "UPDATE 1" / "INSERT 0 1"
        return int(status.rsplit(" ", 1)[-1])

    async def _fetchone(self, sql: str, args: Sequence[Any]) -> Sequence[Any] | None:
        row = await self._conn.fetchrow(sql, *args)
        return None if row is None else tuple(row)

    async def _create_table(self, ddl: str) -> None:
        # Two sessions racing on CREATE TABLE IF NOT EXISTS can fail on the catalog's unique index: serialise them.
        async with self._conn.transaction():
            await self._conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"orbitmq:{self.table}")
            await self._conn.execute(ddl)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    def _is_duplicate(self, e: BaseException) -> bool:
        return getattr(e, "sqlstate", None) == "23505"

    def _explain(self, e: BaseException) -> str:
        state = getattr(e, "sqlstate", None)
        if state == "28P01" or state == "28000":
            return f"authentication failed for user {self.url.user!r} (wrong password?)"
        if state == "3D000":
            return f"database {self.url.database!r} does not exist"
        if isinstance(e, ConnectionRefusedError) or "Connect call failed" in str(e):
            return f"connection refused by {self.url.host}:{self.url.port}"
        return one_line(e)
