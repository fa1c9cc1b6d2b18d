"""The lease row and the LeaseStore protocol that every backend (PostgreSQL, MySQL/MariaDB, sqlite, the in-memory
one of the tests) implements with the same semantics:

- every time is the database's: `remaining_ms` is computed by the database in the statement that reads the row;
- `insert`, `take_over`, `renew`, `publish` and `resign` are each ONE conditional statement and return whether it
  changed the row (the affected-row count decides, never a read before the write);
- any failure to reach the database or run a statement raises LeaseStoreError with one line.

Column semantics (docs/design/lease-election.md, "Table"): `sync_members` is the set of broker addresses that hold
every write the holder acknowledged, the holder included; only a member may take an expired lease over. An empty
list (set only by an operator) lets anyone take over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from orbitmq.base.errors import ConfigError

ACTIVE = "active"
CHALLENGE = "challenge"
MAX_MEMBERS_TEXT = 4096


@dataclass(frozen=True)
class Candidate:
    """One elector: its broker address, its HA address (slaves connect there) and a nonce unique to this start."""
    addr: str
    ha_addr: str
    nonce: str

    def __post_init__(self) -> None:
        for key in ("addr", "ha_addr", "nonce"):
            value = getattr(self, key)
            if not value or len(value) > 255 or "," in value or not value.isprintable() or value != value.strip():
                raise ConfigError(f"lease candidate {key} {value!r}: 1..255 printable characters, no comma or "
                                  "surrounding blanks")
        if len(self.nonce) > 64:
            raise ConfigError(f"lease candidate nonce {self.nonce!r} is longer than 64 characters")


@dataclass(frozen=True)
class LeaseRow:
    name: str
    holder_addr: str
    holder_nonce: str
    holder_ha_addr: str
    epoch: int
    status: str  # ACTIVE | CHALLENGE
    sync_members: tuple[str, ...]
    remaining_ms: int  # expires_at - the database's now, computed by the database (<= 0: expired)

    @property
    def expired(self) -> bool:
        return self.remaining_ms <= 0

    def may_take_over(self, addr: str) -> bool:
        """The eligibility rule the take-over statement enforces (checked locally too, to skip hopeless writes)."""
        return not self.sync_members or addr in self.sync_members


def encode_members(members: Sequence[str]) -> str:
    seen: list[str] = []
    for m in members:
        if not m or "," in m or m != m.strip() or not m.isprintable():
            raise ValueError(f"sync member {m!r}: an address without comma or blanks")
        if m not in seen:
            seen.append(m)
    text = ",".join(seen)
    if len(text) > MAX_MEMBERS_TEXT:
        raise ValueError(f"sync member list longer than {MAX_MEMBERS_TEXT} characters")
    return text


def decode_members(text: str | None) -> tuple[str, ...]:
    return tuple(m for m in (text or "").split(",") if m)


class LeaseStore(Protocol):
    """One lease table in one database. Methods may be called one at a time per store (the elector serialises)."""

    description: str  # e.g. "postgresql://lease@127.0.0.1:5432/orbit" (no password), for messages

    async def open(self) -> None:
        """Connect and create the table if missing. LeaseStoreError if it cannot."""

    async def close(self) -> None: ...

    async def read(self, name: str) -> LeaseRow | None:
        """The row, or None when there is none yet."""

    async def insert(self, name: str, me: Candidate, ttl_ms: int) -> bool:
        """First grant: a new row held by me at epoch 1, status challenge, sync_members [me]. False if it exists."""

    async def take_over(self, name: str, me: Candidate, seen_epoch: int, ttl_ms: int) -> bool:
        """Grant epoch seen_epoch + 1 to me, status challenge, sync_members [me], if the row is still at
        seen_epoch, has expired (or names my nonce) and lists me in sync_members (or lists nobody)."""

    async def renew(self, name: str, nonce: str, epoch: int, ttl_ms: int) -> bool:
        """Extend my lease to db now + ttl, status active, if the row still names my nonce at my epoch."""

    async def publish(self, name: str, nonce: str, epoch: int, members: Sequence[str]) -> bool:
        """Set sync_members (the holder is part of `members`) if the row still names my nonce at my epoch."""

    async def resign(self, name: str, nonce: str, epoch: int) -> bool:
        """Let the lease expire now if the row still names my nonce at my epoch."""
