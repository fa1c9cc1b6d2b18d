"""MemoryLeaseStore: the lease table's semantics in memory, for the elector's unit tests and the simulation. The
database clock is injected (`db_now_ms`); each statement is applied atomically at the instant it runs, exactly as
the SQL statements of store_sql.py decide. Not reachable through open_store: production uses a real database."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orbitmq.lease.errors import LeaseStoreError
from orbitmq.lease.store import ACTIVE, CHALLENGE, Candidate, LeaseRow, decode_members, encode_members


@dataclass
class _Row:
    holder_addr: str
    holder_nonce: str
    holder_ha_addr: str
    epoch: int
    expires_at: int
    status: str
    sync_members: str


class LeaseTable:
    """The shared table (one per simulated database); stores are the candidates' connections to it."""

    def __init__(self, db_now_ms: Callable[[], int]) -> None:
        self.now = db_now_ms
        self.rows: dict[str, _Row] = {}
        self.down = False  # every statement fails while True
        self.statements = 0

    def _check(self, what: str) -> None:
        self.statements += 1
        if self.down:
            raise LeaseStoreError(f"memory: {what} failed: database unreachable")

    def read(self, name: str) -> LeaseRow | None:
        self._check("read")
        r = self.rows.get(name)
        if r is None:
            return None
        return LeaseRow(name=name, holder_addr=r.holder_addr, holder_nonce=r.holder_nonce,
                        holder_ha_addr=r.holder_ha_addr, epoch=r.epoch, status=r.status,
                        sync_members=decode_members(r.sync_members), remaining_ms=r.expires_at - self.now())

    def insert(self, name: str, me: Candidate, ttl_ms: int) -> bool:
        self._check("insert")
        if name in self.rows:
            return False
        self.rows[name] = _Row(me.addr, me.nonce, me.ha_addr, 1, self.now() + ttl_ms, CHALLENGE,
                               encode_members([me.addr]))
        return True

    def take_over(self, name: str, me: Candidate, seen_epoch: int, ttl_ms: int) -> bool:
        self._check("take-over")
        r = self.rows.get(name)
        now = self.now()
        if r is None or r.epoch != seen_epoch or not (r.expires_at <= now or r.holder_nonce == me.nonce):
            return False
        if r.sync_members and me.addr not in decode_members(r.sync_members):
            return False
        self.rows[name] = _Row(me.addr, me.nonce, me.ha_addr, r.epoch + 1, now + ttl_ms, CHALLENGE,
                               encode_members([me.addr]))
        return True

    def _mine(self, name: str, nonce: str, epoch: int) -> _Row | None:
        r = self.rows.get(name)
        return r if r is not None and r.holder_nonce == nonce and r.epoch == epoch else None

    def renew(self, name: str, nonce: str, epoch: int, ttl_ms: int) -> bool:
        self._check("renew")
        r = self._mine(name, nonce, epoch)
        if r is None:
            return False
        r.expires_at, r.status = self.now() + ttl_ms, ACTIVE
        return True

    def publish(self, name: str, nonce: str, epoch: int, members: Sequence[str]) -> bool:
        self._check("publish")
        text = encode_members(members)
        r = self._mine(name, nonce, epoch)
        if r is None:
            return False
        r.sync_members = text
        return True

    def resign(self, name: str, nonce: str, epoch: int) -> bool:
        self._check("resign")
        r = self._mine(name, nonce, epoch)
        if r is None:
            return False
        r.expires_at = self.now()
        return True


class MemoryLeaseStore:
    """A connection to a LeaseTable. Statements take effect at once; the simulation wraps them to add latency."""

    def __init__(self, table: LeaseTable, description: str = "memory") -> None:
        self.table = table
        self.description = description
        self.opened = False

    async def open(self) -> None:
        self.table._check("create table")
        self.opened = True

    async def close(self) -> None:
        self.opened = False

    async def read(self, name: str) -> LeaseRow | None:
        return self.table.read(name)

    async def insert(self, name: str, me: Candidate, ttl_ms: int) -> bool:
        return self.table.insert(name, me, ttl_ms)

    async def take_over(self, name: str, me: Candidate, seen_epoch: int, ttl_ms: int) -> bool:
        return self.table.take_over(name, me, seen_epoch, ttl_ms)

    async def renew(self, name: str, nonce: str, epoch: int, ttl_ms: int) -> bool:
        return self.table.renew(name, nonce, epoch, ttl_ms)

    async def publish(self, name: str, nonce: str, epoch: int, members: Sequence[str]) -> bool:
        return self.table.publish(name, nonce, epoch, members)

    async def resign(self, name: str, nonce: str, epoch: int) -> bool:
        return self.table.resign(name, nonce, epoch)
