"""Lease election on real databases (issue 13): PostgreSQL and MariaDB on this machine (started if down, a
throw-away database and user per session; a database that cannot be had FAILS these tests) and sqlite.

The table is created if missing; take-over and renewal are single conditional statements whose row count
decides; time is the database's (a node clock skewed by minutes changes nothing); three candidates starting at
once elect exactly one per epoch; with the database unreachable (a fault-injecting proxy) the holder stops
acknowledging before its local deadline and the election resumes when the database is back; bad credentials, a
missing database or a bad URL give one clear line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orbitmq.base.clock import monotonic_ms
from orbitmq.base.errors import ConfigError
from orbitmq.lease import Candidate, LeaseConfig, LeaseElector, LeaseStoreError, LeaseView, open_config_store
from orbitmq.testing.sql_dbs import SqlDb, SqlDbUnavailable, create_db, db_proxy, drop_db
from orbitmq.testing.tcp_proxy import TcpProxy

TTL = 1500
KINDS = ("postgresql", "mysql", "sqlite")


@pytest.fixture(scope="module")
def dbs() -> Iterator[dict[str, SqlDb]]:
    made: dict[str, SqlDb] = {}
    try:
        for kind in ("postgresql", "mysql"):
            try:
                made[kind] = create_db(kind)
            except SqlDbUnavailable as e:
                pytest.fail(f"lease tests need {kind}: {e}")
        yield made
    finally:
        for db in made.values():
            drop_db(db)


@pytest.fixture
def url_of(dbs: dict[str, SqlDb], tmp_path: Path) -> Callable[[str], str]:
    return lambda kind: f"sqlite:///{tmp_path}/lease.db" if kind == "sqlite" else dbs[kind].url


_names = iter(range(10**6))


def cfg_for(url: str, **kw: int) -> LeaseConfig:
    return LeaseConfig(url=url, name=f"test/lease-{next(_names)}-{time.monotonic_ns()}", ttl_ms=TTL, **kw)


def cand(i: int) -> Candidate:
    return Candidate(f"127.0.0.1:{30911 + i}", f"127.0.0.1:{30912 + i}", f"nonce-{i}-{time.monotonic_ns()}")


async def wait_for(pred: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.01)
    return pred()


class Recorder:
    """Samples may_acknowledge() of every elector every few ms for the whole test; records violations."""

    def __init__(self, electors: list[LeaseElector]) -> None:
        self.electors = electors
        self.violations: list[str] = []
        self.masters: dict[int, set[str]] = {}
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            acking = [e for e in self.electors if e.may_acknowledge()]
            if len(acking) > 1:
                self.violations.append(f"{[e.me.addr for e in acking]} acknowledge at once")
            for e in acking:
                self.masters.setdefault(e.view().epoch, set()).add(e.me.nonce)
            await asyncio.sleep(0.002)

    def masters_now(self) -> list[LeaseElector]:
        return [e for e in self.electors if e.may_acknowledge()]

    async def stop(self) -> None:
        self.task.cancel()
        for e in self.electors:
            await e.stop(resign=False)
        assert self.violations == []
        assert all(len(n) == 1 for n in self.masters.values()), self.masters


@pytest.mark.parametrize("kind", KINDS)
def test_statements_are_conditional_and_row_counts_decide(kind: str, url_of: Callable[[str], str]) -> None:
    async def main() -> None:
        cfg = cfg_for(url_of(kind))
        cands = [cand(0), cand(1), cand(2)]
        stores = [open_config_store(cfg) for _ in range(3)]
        await asyncio.gather(*(s.open() for s in stores))  # CREATE TABLE IF NOT EXISTS, three at once
        try:
            assert await stores[0].read(cfg.name) is None
            won = await asyncio.gather(*(s.insert(cfg.name, c, TTL) for s, c in zip(stores, cands, strict=True)))
            assert won.count(True) == 1
            w = won.index(True)
            (sa, a), (sb, b), (sc, c) = [(stores[i], cands[i]) for i in (w, (w + 1) % 3, (w + 2) % 3)]
            row = await sb.read(cfg.name)
            assert row is not None and (row.holder_nonce, row.epoch, row.status) == (a.nonce, 1, "challenge")
            assert 0 < row.remaining_ms <= TTL and row.sync_members == (a.addr,)
            assert await sa.renew(cfg.name, a.nonce, 1, TTL) and not await sb.renew(cfg.name, b.nonce, 1, TTL)
            assert not await sa.renew(cfg.name, a.nonce, 2, TTL)  # wrong epoch
            assert not await sb.take_over(cfg.name, b, 1, TTL)  # not expired
            assert await sa.publish(cfg.name, a.nonce, 1, [a.addr, b.addr])
            assert await sa.publish(cfg.name, a.nonce, 1, [a.addr, b.addr])  # same values: still matched
            assert not await sb.publish(cfg.name, b.nonce, 1, [b.addr])
            assert await sa.resign(cfg.name, a.nonce, 1)
            row = await sc.read(cfg.name)
            assert row is not None and row.expired and row.status == "active"
            assert not await sc.take_over(cfg.name, c, 1, TTL)  # expired, but c is not in sync_members
            assert not await sb.take_over(cfg.name, b, 0, TTL)  # stale epoch
            takes = await asyncio.gather(sb.take_over(cfg.name, b, 1, TTL), sa.take_over(cfg.name, a, 1, TTL))
            assert takes.count(True) == 1
            row = await sc.read(cfg.name)
            assert row is not None and row.epoch == 2 and row.status == "challenge"
            assert row.sync_members == (row.holder_addr,)
        finally:
            for s in stores:
                await s.close()
    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_node_clocks_skewed_by_minutes_change_nothing(kind: str, url_of: Callable[[str], str]) -> None:
    async def main() -> None:
        cfg = cfg_for(url_of(kind))
        ahead = LeaseElector(open_config_store(cfg), cfg, cand(0), clock=lambda: monotonic_ms() + 600_000)
        behind = LeaseElector(open_config_store(cfg), cfg, cand(1), clock=lambda: monotonic_ms() - 900_000)
        rec = Recorder([ahead, behind])
        await ahead.start()
        assert await wait_for(ahead.may_acknowledge, 5)
        await behind.start()
        await asyncio.sleep(TTL * 2 / 1000)  # renewals go on; the other never sees the lease expired
        assert ahead.may_acknowledge() and not behind.may_acknowledge()
        assert behind.view().master_addr == ahead.me.addr and behind.view().epoch == 1
        remaining = ahead.view().lease_remaining_ms
        assert remaining is not None and 0 < remaining <= TTL
        row = await behind.store.read(cfg.name)
        assert row is not None and 0 < row.remaining_ms <= TTL  # computed by the database, not by either node
        assert await ahead.publish_sync_members([behind.me.addr])
        await ahead.stop(resign=True)
        assert await wait_for(behind.may_acknowledge, TTL / 1000 + 2)
        assert behind.view().epoch == 2
        await rec.stop()
    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_three_candidates_at_once_exactly_one_wins_each_epoch(kind: str, url_of: Callable[[str], str]) -> None:
    async def main() -> None:
        cfg = cfg_for(url_of(kind))
        electors = [LeaseElector(open_config_store(cfg), cfg, cand(i)) for i in range(3)]
        changes: list[LeaseView] = []

        async def seen(v: LeaseView) -> None:
            changes.append(v)
        for e in electors:
            e.subscribe(seen)
        rec = Recorder(electors)
        await asyncio.gather(*(e.start() for e in electors))
        alive = list(electors)
        epochs: list[int] = []
        for _ in range(2):
            assert await wait_for(lambda: len(rec.masters_now()) == 1, TTL * 3 / 1000 + 3)
            (m,) = rec.masters_now()
            epochs.append(m.view().epoch)
            assert await m.publish_sync_members([e.me.addr for e in alive if e is not m])
            t = time.monotonic()
            await m.stop(resign=False)  # like a crash: the lease ends by its TTL
            alive.remove(m)
            assert await wait_for(lambda: len(rec.masters_now()) == 1, TTL * 3 / 1000 + 3)
            took = time.monotonic() - t
            assert took <= (TTL + cfg.renew_interval_ms + 3000) / 1000, took  # (the exact bound: unit tests)
        epochs.append(rec.masters_now()[0].view().epoch)
        assert epochs[0] >= 1 and epochs[0] < epochs[1] < epochs[2], epochs  # (a busy machine may add terms)
        await rec.stop()
    asyncio.run(main())


@pytest.mark.parametrize("fault", ("refused", "blackhole"))
@pytest.mark.parametrize("kind", ("postgresql", "mysql"))
def test_unreachable_database_stops_acknowledgements_then_election_resumes(kind: str, fault: str,
                                                                          dbs: dict[str, SqlDb]) -> None:
    """refused: connections cut and new ones refused; blackhole: bytes held back, so statements time out on
    live connections (the drivers' cancellation path)."""
    async def cut(proxy: TcpProxy) -> None:
        if fault == "refused":
            await proxy.block()
        else:
            proxy.delay_ms = 3_600_000

    async def heal(proxy: TcpProxy) -> None:
        if fault == "refused":
            await proxy.unblock()
        else:
            proxy.delay_ms = 0
            proxy.cut()  # what is held back would arrive an hour late: reconnect

    async def main() -> None:
        proxy, url = await db_proxy(dbs[kind])
        cfg = cfg_for(url)
        electors = [LeaseElector(open_config_store(cfg), cfg, cand(i)) for i in range(2)]
        rec = Recorder(electors)
        try:
            await asyncio.gather(*(e.start() for e in electors))
            assert await wait_for(lambda: len(rec.masters_now()) == 1, 5)
            (m,) = rec.masters_now()
            other = electors[1 - electors.index(m)]
            assert await m.publish_sync_members([other.me.addr])
            await cut(proxy)
            t_cut = monotonic_ms()
            assert await wait_for(lambda: not m.may_acknowledge(), TTL / 1000 + 1)
            # every renewal that can still succeed was sent before the cut: its deadline is < cut + TTL - margin
            assert monotonic_ms() - t_cut <= TTL - cfg.margin_ms + 500  # (+ polling slack on a busy machine)
            assert await wait_for(lambda: not m.view().is_master and not m.view().db_ok, TTL * 3 / 1000)
            await asyncio.sleep(TTL / 1000)
            assert rec.masters_now() == []
            await heal(proxy)
            assert await wait_for(lambda: len(rec.masters_now()) == 1, TTL * 4 / 1000)
            (m2,) = rec.masters_now()
            assert m2.view().epoch == 2 and m2.view().db_ok
        finally:
            await rec.stop()
            await proxy.close()
    asyncio.run(main())


@pytest.mark.parametrize("kind", ("postgresql", "mysql"))
def test_wrong_password_missing_database_or_no_server_is_one_clear_line(kind: str,
                                                                       dbs: dict[str, SqlDb]) -> None:
    db = dbs[kind]

    async def start_error(url: str) -> str:
        cfg = cfg_for(url)
        e = LeaseElector(open_config_store(cfg), cfg, cand(0))
        with pytest.raises(LeaseStoreError) as err:
            await e.start()
        msg = str(err.value)
        assert "\n" not in msg and db.password not in msg and "wrongpw" not in msg
        return msg

    async def main() -> None:
        msg = await start_error(db.url_with(password="wrongpw"))
        assert ("authentication failed" if kind == "postgresql" else "access denied") in msg, msg
        msg = await start_error(db.url_with(database="orbitmq_no_such_db"))
        assert "orbitmq_no_such_db" in msg and ("does not exist" in msg or "access denied" in msg), msg
        msg = await start_error(db.url_with(port=1))
        assert "127.0.0.1:1" in msg, msg
    asyncio.run(main())
    with pytest.raises(ConfigError, match="unknown scheme"):
        cfg_for("postgre://u:p@127.0.0.1/db")


def test_sqlite_missing_directory_is_one_clear_line(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = cfg_for(f"sqlite:///{tmp_path}/nope/lease.db")
        with pytest.raises(LeaseStoreError, match="does not exist"):
            await LeaseElector(open_config_store(cfg), cfg, cand(0)).start()
    asyncio.run(main())
