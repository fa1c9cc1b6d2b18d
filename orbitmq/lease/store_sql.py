"""SqlLeaseStore: the statements of the lease table, written once for PostgreSQL, MySQL/MariaDB and sqlite.

A backend supplies the dialect (placeholder style, the database's clock in milliseconds, string concatenation)
and four primitives: connect, execute (-> affected rows), fetch one row, and drop the connection. This class
serialises calls, bounds each by a timeout, drops the connection after any failure (a statement cut short by a
timeout leaves a driver's connection in an unknown state) and turns every failure into one LeaseStoreError line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orbitmq.lease.errors import LeaseStoreError, one_line
from orbitmq.lease.store import ACTIVE, CHALLENGE, Candidate, LeaseRow, decode_members, encode_members
from orbitmq.lease.url import LeaseUrl

COLUMNS = ("holder_addr", "holder_nonce", "holder_ha_addr", "epoch", "status", "sync_members")


class Dialect:
    """SQL differences. `now_ms` is an expression for the database server's time in ms since the Unix epoch,
    taken when the statement executes (never a transaction-start time)."""
    now_ms = ""
    bigint = "BIGINT"

    def p(self, i: int) -> str:  # placeholder of the i-th (1-based) parameter
        raise NotImplementedError

    def concat(self, *parts: str) -> str:
        return "(" + " || ".join(parts) + ")"

    def is_member(self, list_col: str, value: str) -> str:
        """SQL: `value` is an element of the comma-separated list column."""
        return f"INSTR({self.concat(repr(','), list_col, repr(','))}, {self.concat(repr(','), value, repr(','))}) > 0"


class SqlLeaseStore:
    dialect: Dialect = Dialect()

    def __init__(self, url: LeaseUrl, *, table: str = "orbitmq_lease", timeout_ms: int = 2000) -> None:
        self.url = url
        self.description = url.redacted()  # for messages: never the password
        self.table = table
        self._conn: Any = None  # the backend's connection, None while disconnected
        self.timeout_s = timeout_ms / 1000
        self._lock = asyncio.Lock()
        self._connected = False
        self._sql = self._statements()

    # ---- backend primitives ----------------------------------------------------------------------------------
    async def _connect(self) -> None:
        raise NotImplementedError

    async def _execute(self, sql: str, args: Sequence[Any]) -> int:
        raise NotImplementedError

    async def _fetchone(self, sql: str, args: Sequence[Any]) -> Sequence[Any] | None:
        raise NotImplementedError

    def _drop(self) -> None:
        """Close the connection without waiting for the server (it may be unreachable); synchronous, so it also
        runs while a statement is being cancelled."""
        raise NotImplementedError

    async def _create_table(self, ddl: str) -> None:
        await self._execute(ddl, ())

    def _explain(self, e: BaseException) -> str:
        """A one-line reason for a driver error (backends override to name auth / missing database)."""
        return one_line(e) if str(e).strip() else type(e).__name__

    def _is_duplicate(self, e: BaseException) -> bool:
        return False

    # ---- statements ------------------------------------------------------------------------------------------
    def _statements(self) -> dict[str, str]:
        d, t = self.dialect, self.table
        now, p = d.now_ms, d.p
        return {
            "ddl": (f"CREATE TABLE IF NOT EXISTS {t} ("
                    "name VARCHAR(255) NOT NULL PRIMARY KEY, "
                    "holder_addr VARCHAR(255) NOT NULL, holder_nonce VARCHAR(64) NOT NULL, "
                    f"holder_ha_addr VARCHAR(255) NOT NULL, epoch {d.bigint} NOT NULL, "
                    f"expires_at {d.bigint} NOT NULL, status VARCHAR(16) NOT NULL, "
                    f"sync_members VARCHAR(4096) NOT NULL, updated_at {d.bigint} NOT NULL)"),
            "read": (f"SELECT {', '.join(COLUMNS)}, expires_at - {now} AS remaining_ms FROM {t} WHERE name = {p(1)}"),
            "insert": (f"INSERT INTO {t} (name, holder_addr, holder_nonce, holder_ha_addr, epoch, expires_at, status, "
                       f"sync_members, updated_at) VALUES ({p(1)}, {p(2)}, {p(3)}, {p(4)}, 1, {now} + {p(5)}, "
                       f"'{CHALLENGE}', {p(6)}, {now})"),
            "take_over": (f"UPDATE {t} SET holder_addr = {p(1)}, holder_nonce = {p(2)}, holder_ha_addr = {p(3)}, "
                          f"epoch = epoch + 1, expires_at = {now} + {p(4)}, status = '{CHALLENGE}', "
                          f"sync_members = {p(5)}, updated_at = {now} "
                          f"WHERE name = {p(6)} AND epoch = {p(7)} AND (expires_at <= {now} OR holder_nonce = {p(8)}) "
                          f"AND (sync_members = '' OR {d.is_member('sync_members', p(9))})"),
            "renew": (f"UPDATE {t} SET expires_at = {now} + {p(1)}, status = '{ACTIVE}', updated_at = {now} "
                      f"WHERE name = {p(2)} AND holder_nonce = {p(3)} AND epoch = {p(4)}"),
            "publish": (f"UPDATE {t} SET sync_members = {p(1)}, updated_at = {now} "
                        f"WHERE name = {p(2)} AND holder_nonce = {p(3)} AND epoch = {p(4)}"),
            "resign": (f"UPDATE {t} SET expires_at = {now}, updated_at = {now} "
                       f"WHERE name = {p(1)} AND holder_nonce = {p(2)} AND epoch = {p(3)}"),
        }

    # ---- plumbing --------------------------------------------------------------------------------------------
    async def _run(self, what: str, op: Any) -> Any:
        async with self._lock:
            try:
                async with asyncio.timeout(self.timeout_s):
                    if not self._connected:
                        await self._connect()
                        self._connected = True
                    return await op()
            except asyncio.CancelledError:  # e.g. stop() during a statement: its answer may still be in flight
                self._reset()
                raise
            except LeaseStoreError:
                self._reset()
                raise
            except TimeoutError:
                self._reset()
                raise LeaseStoreError(f"{self.description}: {what} timed out after {self.timeout_s * 1000:.0f} ms")\
                    from None
            except Exception as e:  # driver errors of every kind, OSError included
                self._reset()
                raise LeaseStoreError(f"{self.description}: {what} failed: {self._explain(e)}") from None

    def _reset(self) -> None:
        self._connected = False
        try:
            self._drop()
        except Exception:  # noqa: BLE001 - the connection is being thrown away
            pass

    # ---- LeaseStore ------------------------------------------------------------------------------------------
    async def open(self) -> None:
        await self._run("create table", lambda: self._create_table(self._sql["ddl"]))

    async def close(self) -> None:
        async with self._lock:
            self._reset()

    async def read(self, name: str) -> LeaseRow | None:
        row = await self._run("read", lambda: self._fetchone(self._sql["read"], (name,)))
        if row is None:
            return None
        addr, nonce, ha, epoch, status, members, remaining = row
        return LeaseRow(name=name, holder_addr=str(addr), holder_nonce=str(nonce), holder_ha_addr=str(ha),
                        epoch=int(epoch), status=str(status), sync_members=decode_members(members),
                        remaining_ms=int(remaining))

    async def insert(self, name: str, me: Candidate, ttl_ms: int) -> bool:
        args = (name, me.addr, me.nonce, me.ha_addr, int(ttl_ms), encode_members([me.addr]))

        async def op() -> int:
            try:
                return await self._execute(self._sql["insert"], args)
            except Exception as e:
                if self._is_duplicate(e):
                    return 0
                raise
        return await self._run("insert", op) == 1

    async def take_over(self, name: str, me: Candidate, seen_epoch: int, ttl_ms: int) -> bool:
        args = (me.addr, me.nonce, me.ha_addr, int(ttl_ms), encode_members([me.addr]), name, int(seen_epoch),
                me.nonce, me.addr)
        return await self._run("take-over", lambda: self._execute(self._sql["take_over"], args)) == 1

    async def renew(self, name: str, nonce: str, epoch: int, ttl_ms: int) -> bool:
        args = (int(ttl_ms), name, nonce, int(epoch))
        return await self._run("renew", lambda: self._execute(self._sql["renew"], args)) == 1

    async def publish(self, name: str, nonce: str, epoch: int, members: Sequence[str]) -> bool:
        args = (encode_members(members), name, nonce, int(epoch))
        return await self._run("publish", lambda: self._execute(self._sql["publish"], args)) == 1

    async def resign(self, name: str, nonce: str, epoch: int) -> bool:
        args = (name, nonce, int(epoch))
        return await self._run("resign", lambda: self._execute(self._sql["resign"], args)) == 1
