"""MySQL / MariaDB lease store on asyncmy (a maintained asyncio driver with compiled protocol code, released
for current Pythons). Database time is `UTC_TIMESTAMP(6)`, independent of the session time zone. The connection
sets CLIENT_FOUND_ROWS so an UPDATE reports the rows it matched, like PostgreSQL and sqlite do (otherwise a
renewal that writes identical values would report 0)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orbitmq.lease.errors import one_line
from orbitmq.lease.store_sql import Dialect, SqlLeaseStore

ER_DUP_ENTRY = 1062
ER_ACCESS_DENIED = (1044, 1045, 1698)
ER_BAD_DB = 1049


class MysqlDialect(Dialect):
    now_ms = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

    def p(self, i: int) -> str:
        return "%s"

    def concat(self, *parts: str) -> str:
        return "CONCAT(" + ", ".join(parts) + ")"


def _code(e: BaseException) -> int | None:
    args = getattr(e, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class MysqlLeaseStore(SqlLeaseStore):
    dialect = MysqlDialect()

    async def _connect(self) -> None:
        import asyncmy  # lazily: a broker without lease election never loads the driver
        from asyncmy.constants import CLIENT

        u = self.url
        self._conn = await asyncmy.connect(host=u.host, port=u.port, user=u.user, password=u.password,
                                           database=u.database, autocommit=True, client_flag=CLIENT.FOUND_ROWS,
                                           connect_timeout=max(1, round(self.timeout_s)), charset="utf8mb4")

    async def _execute(self, sql: str, args: Sequence[Any]) -> int:
        async with self._conn.cursor() as cur:
            return int(await cur.execute(sql, tuple(args)))

    async def _fetchone(self, sql: str, args: Sequence[Any]) -> Sequence[Any] | None:
        async with self._conn.cursor() as cur:
            await cur.execute(sql, tuple(args))
            row = await cur.fetchone()
            return None if row is None else tuple(row)

    async def _create_table(self, ddl: str) -> None:
        exists = await self._fetchone("SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() "
                                      "AND table_name = %s", (self.table,))
        if exists is None:  # (CREATE ... IF NOT EXISTS on an existing table logs a warning through the driver)
            await self._execute(ddl, ())

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # closes the socket without a QUIT round trip

    def _is_duplicate(self, e: BaseException) -> bool:
        return _code(e) == ER_DUP_ENTRY

    def _explain(self, e: BaseException) -> str:
        code = _code(e)
        if code in ER_ACCESS_DENIED:
            return f"access denied for user {self.url.user!r} (wrong password or no grant on {self.url.database!r})"
        if code == ER_BAD_DB:
            return f"database {self.url.database!r} does not exist"
        if code == 2003 or isinstance(e, ConnectionRefusedError):
            return f"cannot connect to {self.url.host}:{self.url.port}"
        return one_line(e)
