"""LeaseElector: the seed's master-election state machine over one lease row, with the holes closed (see
docs/design/lease-election.md): database time only, conditional single-statement writes, a fencing epoch, a local
deadline on the monotonic clock, and the sync_members rule for safe take-over in two-node groups.

States: START (first look at the row), HEARTBEAT (holder: renew every renew interval; others: watch the row),
CHALLENGE_REGISTER (no row: insert it), CHALLENGE_MASTER (the row expired: conditional take-over),
CHALLENGE_COMPLETE (confirm the grant; status challenge -> active; only then master), OFFLINE (max_db_errors
consecutive database errors: a holder demotes itself at once, nobody challenges until the database answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from orbitmq.base.clock import monotonic_ms
from orbitmq.lease.config import LeaseConfig
from orbitmq.lease.errors import LeaseStoreError
from orbitmq.lease.store import ACTIVE, Candidate, LeaseRow, LeaseStore

log = logging.getLogger("orbitmq.lease")


class LeaseState(enum.Enum):
    START = "START"
    HEARTBEAT = "HEARTBEAT"
    CHALLENGE_MASTER = "CHALLENGE_MASTER"
    CHALLENGE_REGISTER = "CHALLENGE_REGISTER"
    CHALLENGE_COMPLETE = "CHALLENGE_COMPLETE"
    OFFLINE = "OFFLINE"


@dataclass(frozen=True)
class LeaseView:
    state: LeaseState
    epoch: int  # holder: the epoch it holds; others: the epoch of the row last read (0: no row)
    is_master: bool
    master_addr: str | None  # the active holder (None while the row is being challenged or absent)
    master_ha_addr: str | None
    master_nonce: str | None
    lease_remaining_ms: int | None  # holder: local deadline - monotonic now (may be <= 0); others None
    db_ok: bool
    sync_members: tuple[str, ...]  # addresses allowed to take over (holder included); () = anyone


Subscriber = Callable[[LeaseView], Awaitable[None]]


class LeaseElector:
    def __init__(self, store: LeaseStore, cfg: LeaseConfig, me: Candidate, *,
                 clock: Callable[[], int] = monotonic_ms, rng: random.Random | None = None) -> None:
        self.store = store
        self.cfg = cfg
        self.me = me
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._state = LeaseState.START
        self._row: LeaseRow | None = None
        self._is_master = False
        self._epoch = 0  # held epoch (master) or the pending grant (CHALLENGE_COMPLETE)
        self._held_epoch = 0  # the last epoch this node was master at
        self._blocked_epoch = 0  # the last term whose expired lease this node was not eligible to take over
        # monotonic ms from which the holder acknowledges nothing unless it renewed; None: acknowledge nothing
        # (a sentinel number would not do: an injected or foreign monotonic clock may be at any value)
        self._deadline: int | None = None
        self._sync: tuple[str, ...] = ()
        self._errors = 0
        self._fails = 0
        self._db_ok = True
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._subs: list[Subscriber] = []
        self._queue: asyncio.Queue[LeaseView] = asyncio.Queue()
        self._last_key: tuple[object, ...] | None = None
        self.transitions: deque[tuple[LeaseState, LeaseState]] = deque(maxlen=256)  # recent, for tests and logs

    # ---- public ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, create the table if missing and take the first look at the row; LeaseStoreError if the
        database cannot be used. The election then runs in a background task."""
        await self.store.open()
        try:
            row = await self.store.read(self.cfg.name)
        except LeaseStoreError:
            await self.store.close()
            raise
        delay = self._after_read(row)
        self._notify()
        self._dispatcher = asyncio.ensure_future(self._dispatch())
        self._task = asyncio.ensure_future(self._loop(delay))

    async def stop(self, resign: bool = True) -> None:
        """Stop electing. A holder stops acknowledging at once and, with `resign`, lets its lease expire now in
        the database so another member takes over without waiting for the TTL. No callback runs afterwards."""
        if self._stopping:
            return
        self._stopping = True
        was_master, epoch = self._is_master, self._epoch
        self._is_master = False
        self._wake.set()
        for task in (self._task, self._dispatcher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if was_master and resign:
            try:
                await self.store.resign(self.cfg.name, self.me.nonce, epoch)
            except LeaseStoreError as e:
                log.warning("lease %s: resign failed, the lease ends by its TTL: %s", self.cfg.name, e)
        await self.store.close()

    def view(self) -> LeaseView:
        now = self._clock()
        if self._is_master:
            return LeaseView(self._state, self._epoch, True, self.me.addr, self.me.ha_addr, self.me.nonce,
                             None if self._deadline is None else self._deadline - now, self._db_ok, self._sync)
        row = self._row
        if row is None:
            return LeaseView(self._state, 0, False, None, None, None, None, self._db_ok, ())
        active = row.status == ACTIVE and row.holder_nonce != self.me.nonce
        return LeaseView(self._state, row.epoch, False, row.holder_addr if active else None,
                         row.holder_ha_addr if active else None, row.holder_nonce if active else None, None,
                         self._db_ok, row.sync_members)

    def subscribe(self, cb: Subscriber) -> None:
        """`cb(view)` is awaited, in order, after every change of is_master, epoch or master; it runs in its own
        task so a slow callback never delays a renewal."""
        self._subs.append(cb)

    def may_acknowledge(self) -> bool:
        """True only while this node holds the lease and its local deadline (monotonic time before the last
        successful renewal was sent + TTL - margin) has not passed."""
        deadline = self._deadline
        return self._is_master and not self._stopping and deadline is not None and self._clock() < deadline

    async def publish_sync_members(self, members: Sequence[str]) -> bool:
        """Record in the row that `members` (replicas; this node is added) hold everything this holder has
        acknowledged. Call it BEFORE acknowledging with a smaller replica set. False when not the holder, when the
        database cannot be reached, or when the row was taken over (then this node steps down at once)."""
        if not self._is_master or self._stopping:
            return False
        epoch = self._epoch
        full = tuple(dict.fromkeys([self.me.addr, *members]))
        try:
            ok = await self.store.publish(self.cfg.name, self.me.nonce, epoch, full)
        except LeaseStoreError as e:
            log.warning("lease %s: publishing sync members %s failed: %s", self.cfg.name, list(full), e)
            return False
        except ValueError as e:
            raise ValueError(f"lease {self.cfg.name}: {e}") from None
        if ok and self._is_master and self._epoch == epoch:
            self._sync = full
            return True
        if not ok and self._is_master and self._epoch == epoch:
            self._step_down("the row was taken over (seen while publishing sync members)")
            self._state = LeaseState.HEARTBEAT
            self._wake.set()
            self._notify()
        return False

    @property
    def state(self) -> LeaseState:
        return self._state

    # ---- loop ------------------------------------------------------------------------------------------------
    async def _loop(self, delay: int) -> None:
        while not self._stopping:
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay / 1000)
            if self._stopping:
                return
            try:
                delay = await self._step()
            except LeaseStoreError as e:
                delay = self._db_error(e)
            except Exception:  # noqa: BLE001 - a bug must not leave a master acknowledging without renewals
                log.exception("lease %s: elector step failed", self.cfg.name)
                if self._is_master:
                    self._step_down("internal error")
                self._set(LeaseState.START)
                delay = self.cfg.renew_interval_ms
            self._notify()

    async def _step(self) -> int:
        """One action of the state machine; returns the ms to wait before the next."""
        cfg, name = self.cfg, self.cfg.name
        st = self._state
        if st is LeaseState.HEARTBEAT and self._is_master:
            return await self._renew()
        if st in (LeaseState.START, LeaseState.HEARTBEAT, LeaseState.OFFLINE):
            row = await self.store.read(name)
            self._db_success()
            return self._after_read(row)
        if st is LeaseState.CHALLENGE_REGISTER:
            won = await self.store.insert(name, self.me, cfg.ttl_ms)
            self._db_success()
            if won:
                self._epoch = 1
                self._set(LeaseState.CHALLENGE_COMPLETE)
                return 0
            self._set(LeaseState.HEARTBEAT)  # someone else registered first: look at their row now
            return 0
        if st is LeaseState.CHALLENGE_MASTER:
            row = self._row
            if row is None:
                self._set(LeaseState.START)
                return 0
            won = await self.store.take_over(name, self.me, row.epoch, cfg.ttl_ms)
            self._db_success()
            if won:
                self._epoch = row.epoch + 1
                self._set(LeaseState.CHALLENGE_COMPLETE)
                return 0
            return self._challenge_failed("take-over refused")
        if st is LeaseState.CHALLENGE_COMPLETE:
            sent = self._clock()
            ok = await self.store.renew(name, self.me.nonce, self._epoch, cfg.ttl_ms)
            self._db_success()
            if not ok:
                return self._challenge_failed("grant lost before it was confirmed")
            self._deadline = sent + cfg.ttl_ms - cfg.margin_ms
            self._is_master = True
            self._held_epoch = self._epoch
            self._fails = 0
            self._sync = (self.me.addr,)
            self._set(LeaseState.HEARTBEAT)
            log.warning("lease %s: %s is master at epoch %d", name, self.me.addr, self._epoch)
            return max(0, sent + cfg.renew_interval_ms - self._clock())
        raise AssertionError(f"unhandled state {st}")

    async def _renew(self) -> int:
        cfg = self.cfg
        sent = self._clock()
        if self._deadline is None or sent >= self._deadline:
            self._step_down("lease lapsed (no renewal in time)")
            self._set(LeaseState.START)
            return 0
        ok = await self.store.renew(cfg.name, self.me.nonce, self._epoch, cfg.ttl_ms)
        self._db_success()
        if not ok:
            self._deadline = None  # acknowledge nothing more; learn the new holder before telling subscribers
            try:
                row = await self.store.read(cfg.name)
            finally:
                self._step_down("another node holds the lease")
                self._set(LeaseState.HEARTBEAT)
            return self._after_read(row)
        self._deadline = sent + cfg.ttl_ms - cfg.margin_ms
        return max(0, sent + cfg.renew_interval_ms - self._clock())

    def _after_read(self, row: LeaseRow | None) -> int:
        """Decide from a fresh read (START, HEARTBEAT as non-holder, OFFLINE)."""
        cfg = self.cfg
        self._row = row
        if row is None:
            self._set(LeaseState.CHALLENGE_REGISTER)
            return 0
        if row.holder_nonce == self.me.nonce:
            # A grant of mine whose answer was lost: confirm it. A lease I held and lost locally (or one that
            # expired meanwhile): take it over again, which bumps the epoch, so every term of mastership has its own.
            self._epoch = row.epoch
            again = row.expired or row.epoch == self._held_epoch
            self._set(LeaseState.CHALLENGE_MASTER if again else LeaseState.CHALLENGE_COMPLETE)
            return 0
        self._set(LeaseState.HEARTBEAT)
        if not row.expired:
            if row.status == ACTIVE:
                self._fails = 0
            return max(1, min(cfg.renew_interval_ms, row.remaining_ms + self._jitter()))
        if not row.may_take_over(self.me.addr):
            if self._blocked_epoch != row.epoch:  # once per term, not every poll
                self._blocked_epoch = row.epoch
                log.warning("lease %s: expired, but %s is not in sync_members %s: it may lack acknowledged "
                            "writes, so it waits for a member", cfg.name, self.me.addr, list(row.sync_members))
            return cfg.renew_interval_ms
        self._set(LeaseState.CHALLENGE_MASTER)
        return 0

    def _challenge_failed(self, why: str) -> int:
        cfg = self.cfg
        self._fails += 1
        cap = min(cfg.backoff_max_ms, cfg.backoff_min_ms << min(self._fails - 1, 20))
        delay = self._rng.randint(cfg.backoff_min_ms, max(cfg.backoff_min_ms, cap))
        log.info("lease %s: challenge failed (%s), attempt %d, backing off %d ms", cfg.name, why, self._fails,
                 delay)
        self._set(LeaseState.HEARTBEAT)
        return delay

    def _db_error(self, e: LeaseStoreError) -> int:
        cfg = self.cfg
        self._errors += 1
        self._db_ok = False
        log.warning("lease %s: database error %d/%d: %s", cfg.name, self._errors, cfg.max_db_errors, e)
        if self._state is LeaseState.OFFLINE:
            return cfg.renew_interval_ms
        if self._errors >= cfg.max_db_errors:
            if self._is_master:
                self._step_down(f"{self._errors} consecutive database errors")
            self._set(LeaseState.OFFLINE)
            self._errors = 0
            return cfg.renew_interval_ms
        if self._is_master:  # keep trying within the lease; may_acknowledge() ends at the deadline anyway
            return max(1, cfg.renew_interval_ms // 2)
        if self._state in (LeaseState.CHALLENGE_MASTER, LeaseState.CHALLENGE_REGISTER,
                           LeaseState.CHALLENGE_COMPLETE):
            self._set(LeaseState.START)  # the outcome of the write is unknown: read the row again
        return cfg.renew_interval_ms

    def _db_success(self) -> None:
        self._errors = 0
        self._db_ok = True

    def _step_down(self, why: str) -> None:
        if self._is_master:
            log.warning("lease %s: %s steps down from epoch %d: %s", self.cfg.name, self.me.addr, self._epoch, why)
        self._is_master = False
        self._deadline = None

    def _set(self, state: LeaseState) -> None:
        if state is not self._state:
            self.transitions.append((self._state, state))
            self._state = state

    def _jitter(self) -> int:
        return self._rng.randint(1, max(1, self.cfg.renew_interval_ms // 10))

    # ---- callbacks -------------------------------------------------------------------------------------------
    def _notify(self) -> None:
        v = self.view()
        key = (v.is_master, v.epoch, v.master_addr, v.master_nonce)
        if key != self._last_key:
            self._last_key = key
            if self._subs and not self._stopping:
                self._queue.put_nowait(v)

    async def _dispatch(self) -> None:
        while True:
            v = await self._queue.get()
            for cb in list(self._subs):
                try:
                    await cb(v)
                except Exception:  # noqa: BLE001 - a subscriber's bug must not stop the election
                    log.exception("lease %s: subscriber failed", self.cfg.name)
