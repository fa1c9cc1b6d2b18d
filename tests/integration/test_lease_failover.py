"""Acceptance of lease election, broker side (issue 13): a name server and a two-broker group with
enableLeaseElection on the local PostgreSQL and MariaDB (orbitmq/testing/sql_dbs.py makes a throw-away database and
user; a database that cannot be prepared fails the test, never skips it), each broker reaching the database through
its own fault proxy (orbitmq/testing/lease_cluster.py). TTL 2000 ms, renewal every 666 ms.

- kill -9 of the master under the official C++ client's sends (PostgreSQL and MariaDB): the other broker is master
  within TTL + one renewal interval (+ slack for a busy machine), every acknowledged message is readable afterwards,
  the killed broker rejoins as a slave of the new epoch;
- SIGSTOP of the master for longer than its TTL, then SIGCONT: nothing it acknowledges after its lease ended, it steps
  down and follows the new epoch, the name servers keep routing to the new master (registrations carry the epoch);
- the database unreachable (black-holed for the master, then for everybody): the master stops acknowledging before
  its local deadline, no two brokers acknowledge at the same time (a recorder probes both brokers every 20 ms over the
  whole run), a master acknowledges again once the database is back;
- bad leaseStoreUrl / wrong password / missing database: `orbitmq broker` exits 2 with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Admin, MessageQueue
from orbitmq.remoting import RemotingClient
from orbitmq.testing.controller_cluster import wait_until
from orbitmq.testing.failover_load import Ack, check_acked_readable, probe_send, read_topic_at
from orbitmq.testing.lease_cluster import LeaseCluster, LeaseMember
from orbitmq.testing.procs import broker_conf_keys, free_broker_port, write_conf
from orbitmq.testing.sql_dbs import SqlDb, SqlDbUnavailable, create_db, drop_db

pytestmark = [pytest.mark.integration]

TOPIC = "LeaseTopic"
QUEUES = 4
TTL_MS = 2000
RENEW_MS = TTL_MS // 3
MARGIN_MS = TTL_MS // 10  # LeaseConfig's default margin: the holder's deadline is renewal send + TTL - margin
SLACK_MS = 1500  # a busy 2-core machine: process scheduling on top of the lease timing
CPP_DRIVER = Path(__file__).resolve().parents[1] / "compat" / "cpp_failover_driver.py"


@pytest.fixture(params=["postgresql", "mysql"])
def db(request: pytest.FixtureRequest) -> Iterator[SqlDb]:
    yield from _db(request.param)


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> Iterator[SqlDb]:
    yield from _db("postgresql")


@pytest.fixture
def maria(request: pytest.FixtureRequest) -> Iterator[SqlDb]:
    yield from _db("mysql")


def _db(kind: str) -> Iterator[SqlDb]:
    try:
        made = create_db(kind)
    except SqlDbUnavailable as e:  # a failure, never a skip (tests/unit/test_no_silent_skips.py)
        pytest.fail(f"{kind} for the lease tests: {e}", pytrace=False)
    try:
        yield made
    finally:
        with contextlib.suppress(SqlDbUnavailable):
            drop_db(made)


def run(c: LeaseCluster, coro: Any, timeout_s: float) -> Any:
    try:
        return asyncio.run(asyncio.wait_for(coro, timeout_s))
    except BaseException:
        print(c.logs(40))
        raise


async def create_topic(c: LeaseCluster) -> LeaseMember:
    master = await asyncio.to_thread(c.wait_master)
    async with Admin(c.ns_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=master.addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await asyncio.to_thread(lambda: c.wait_master(topic=TOPIC))
    await asyncio.to_thread(wait_until, "the topic on every member",
                            lambda: all(c.has_topic(m, TOPIC) for m in c.members), 30.0, 0.2)
    return master


def role(c: LeaseCluster, m: LeaseMember) -> tuple[str, int, bool]:
    """(controllerRole, masterEpoch, acknowledges writes) from the broker's runtime info."""
    info = c.runtime_info(m)
    return info.get("controllerRole", ""), int(info.get("masterEpoch", "-1")), info.get("fenced") == "false"


# ---- the invariant recorder: both brokers probed all the time ------------------------------------------------
@dataclass
class AckRecorder:
    """Sends a probe write straight to every member every `every_s` and records each SUCCESS answer with its send
    and receive times (time.monotonic()). `overlaps()` names every pair of acknowledgements by different brokers
    whose [sent, received] intervals overlap or interleave: with both brokers probed continuously, an empty list
    means there was never a moment at which both acknowledged."""

    c: LeaseCluster
    every_s: float = 0.02
    acks: list[tuple[str, Ack]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _seq: int = 0

    def start(self) -> AckRecorder:
        self._tasks = [asyncio.ensure_future(self._probe(m)) for m in self.c.members]
        return self

    async def _probe(self, m: LeaseMember) -> None:
        client = RemotingClient(name=f"recorder-{m.index}")
        try:
            while True:
                self._seq += 1
                body = f"rec-{m.index}-{self._seq}"
                if not m.stopped:
                    ack = await probe_send(client, m.addr, TOPIC, body, self._seq % QUEUES, timeout_ms=500)
                    if ack is not None:
                        ack.queue = MessageQueue(TOPIC, "", ack.queue.queue_id)
                        self.acks.append((m.addr, ack))
                await asyncio.sleep(self.every_s)
        finally:
            await client.close()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def by(self, addr: str) -> list[Ack]:
        return [a for who, a in self.acks if who == addr]

    def overlaps(self) -> list[str]:
        acks = sorted(self.acks, key=lambda wa: wa[1].t_sent)
        problems = []
        last: dict[str, Ack] = {}
        for who, a in acks:
            for other, b in last.items():
                if other != who and b.t >= a.t_sent:  # b's answer came after a was sent: could be simultaneous
                    problems.append(f"{other} acked {b.body} (sent {b.t_sent:.3f}, answered {b.t:.3f}) while {who} "
                                    f"acked {a.body} (sent {a.t_sent:.3f})")
            last[who] = a
        switches = sum(1 for (w1, _), (w2, _) in zip(acks, acks[1:], strict=False) if w1 != w2)
        print(f"recorder: {len(acks)} acknowledgements, {switches} changes of acknowledging broker")
        return problems


def acked_readable(stored: dict[MessageQueue, list[Any]], acked: dict[str, Ack]) -> list[str]:
    return check_acked_readable(acked, {MessageQueue(mq.topic, "", mq.queue_id): msgs for mq, msgs in stored.items()})


# ---- kill -9 under the C++ client ------------------------------------------------------------------------------
def test_master_kill9_under_the_cpp_client(db: SqlDb, tmp_path: Path) -> None:
    try:
        import rocketmq.client  # noqa: F401
    except Exception as e:  # a failure, never a skip: the C++ client is a test extra
        pytest.fail(f"the official C++ client (pip rocketmq==0.4.4) does not import: {e}", pytrace=False)
    with LeaseCluster(tmp_path / "cluster", db.url, ttl_ms=TTL_MS) as c:
        c.start()
        run(c, create_topic(c), 60)
        stop = tmp_path / "stop-cpp"
        args = {"namesrv": c.ns_addr, "group": "PG_lease_cpp", "topic": TOPIC, "run": "cpp", "stop_file": str(stop)}
        with open(tmp_path / "cpp.out", "w") as out:
            proc = subprocess.Popen([sys.executable, str(CPP_DRIVER), json.dumps(args)], stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(os.environ, HOME=str(tmp_path)))
            try:
                took, new, old = run(c, _kill_master(c), 120)
            finally:
                stop.touch()
                proc.wait(60)
        acked: dict[str, Ack] = {}
        for line in (tmp_path / "cpp.out").read_text().splitlines():
            obj = json.loads(line) if line.startswith("{") else {}
            if "ack" in obj:
                a = obj["ack"]
                acked[a["body"]] = Ack(a["body"], MessageQueue(TOPIC, "", -1), -1, a["t"])
        print(f"{db.kind}: {old.name} -> {new.name} in {took * 1000:.0f} ms (bound {TTL_MS + RENEW_MS} ms + "
              f"{SLACK_MS} ms slack); the C++ client got {len(acked)} acks")
        assert len(acked) >= 20, f"the C++ client got only {len(acked)} acks"
        assert took * 1000 < TTL_MS + RENEW_MS + SLACK_MS
        stored = run(c, read_topic_at(new.addr, TOPIC, QUEUES), 60)
        problems = acked_readable(stored, acked)
        assert not problems, "\n".join(problems)
        # the killed broker came back as a slave of the new epoch and holds the same log (a diverged tail cut)
        r, epoch, _ = role(c, old)
        assert r == "SLAVE" and epoch == role(c, new)[1], (r, epoch)
        wait_until("the same CommitLog on both brokers", lambda: len({c.runtime_info(m)["commitLogMaxOffset"]
                                                                      for m in (old, new)}) == 1, 30.0, 0.2)


async def _kill_master(c: LeaseCluster) -> tuple[float, LeaseMember, LeaseMember]:
    old = await asyncio.to_thread(c.wait_master, None, topic=TOPIC)
    other = next(m for m in c.members if m is not old)
    _, epoch, _ = await asyncio.to_thread(role, c, old)
    await asyncio.sleep(1.5)  # the C++ producer writes to this master
    t_kill = await asyncio.to_thread(c.kill9, old)

    def promoted() -> bool:
        r, e, acks = role(c, other)
        return r == "MASTER" and e > epoch and acks

    await asyncio.to_thread(wait_until, "the other broker acknowledging as master", promoted, 20.0, 0.02)
    took = time.monotonic() - t_kill
    await asyncio.sleep(1.0)  # the C++ client writes to the new master too
    await asyncio.to_thread(c.restart, old)
    await asyncio.to_thread(c.wait_group_ready, None, 2, 60.0)
    return took, other, old


# ---- SIGSTOP past the TTL ----------------------------------------------------------------------------------------
def test_sigstopped_master_acknowledges_nothing_after_its_lease_and_steps_down(pg: SqlDb, tmp_path: Path) -> None:
    with LeaseCluster(tmp_path / "cluster", pg.url, ttl_ms=TTL_MS) as c:
        c.start()
        run(c, _sigstop(c), 120)


async def _sigstop(c: LeaseCluster) -> None:
    old = await create_topic(c)
    other = next(m for m in c.members if m is not old)
    _, epoch, _ = await asyncio.to_thread(role, c, old)
    rec = AckRecorder(c).start()
    try:
        await asyncio.to_thread(wait_until, "the recorder's first ack", lambda: rec.by(old.addr), 10.0)
        t_stop = await asyncio.to_thread(c.sigstop, old)
        await asyncio.to_thread(wait_until, "the other broker master of a newer epoch",
                                lambda: role(c, other)[:2] == ("MASTER", epoch + 1), 20.0, 0.05)
        await asyncio.sleep(max(0.0, t_stop + (TTL_MS + 1500) / 1000 - time.monotonic()))
        t_cont = await asyncio.to_thread(c.sigcont, old)
        await asyncio.to_thread(wait_until, "the woken master following the new epoch",
                                lambda: role(c, old)[:2] == ("SLAVE", epoch + 1), 20.0, 0.05)
        await asyncio.sleep(1.0)
    finally:
        await rec.stop()
    late = [a for a in rec.by(old.addr) if a.t > t_stop + TTL_MS / 1000]
    assert not late, f"the stopped master acknowledged after its lease ended: {late[:3]}"
    assert rec.by(other.addr), "the new master acknowledged nothing"
    problems = rec.overlaps()
    assert not problems, "\n".join(problems[:5])
    print(f"stopped {t_cont - t_stop:.1f}s; old master's last ack answered {max(a.t for a in rec.by(old.addr)) - t_stop:.3f}"
          f"s after SIGSTOP; new master's first ack {min(a.t for a in rec.by(other.addr)) - t_stop:.3f}s after")
    # the name servers never route back to the deposed master (its registrations carry the older epoch)
    assert await asyncio.to_thread(c.route_master_addr, TOPIC) == other.addr
    info = await asyncio.to_thread(c.runtime_info, old)
    assert info["leaseEpoch"] == str(epoch + 1) and info["leaseMaster"] == other.addr, info
    stored = await read_topic_at(other.addr, TOPIC, QUEUES)
    problems = acked_readable(stored, {a.body: a for _, a in rec.acks})
    assert not problems, "\n".join(problems)


# ---- the database unreachable ------------------------------------------------------------------------------------
def test_database_unreachable_no_two_acknowledging_masters(maria: SqlDb, tmp_path: Path) -> None:
    with LeaseCluster(tmp_path / "cluster", maria.url, ttl_ms=TTL_MS) as c:
        c.start()
        run(c, _db_faults(c), 150)


async def _db_faults(c: LeaseCluster) -> None:
    m1 = await create_topic(c)
    m2 = next(m for m in c.members if m is not m1)
    rec = AckRecorder(c).start()
    try:
        await asyncio.to_thread(wait_until, "the recorder's first ack", lambda: rec.by(m1.addr), 10.0)
        # 1. only the master loses the database: it stops acknowledging before its local deadline; the other takes over
        await asyncio.to_thread(c.cut_db, m1)
        t_cut = time.monotonic()  # no renewal answer gets through from here on
        await asyncio.to_thread(wait_until, "the other broker acknowledging as master",
                                lambda: role(c, m2)[0] == "MASTER" and role(c, m2)[2], 30.0, 0.05)
        last = max(a.t_sent for a in rec.by(m1.addr))
        assert last < t_cut + (TTL_MS - MARGIN_MS) / 1000, (
            f"the cut-off master acknowledged a write sent {last - t_cut:.3f}s after the cut")
        await asyncio.to_thread(c.heal_db, m1)
        await asyncio.to_thread(c.wait_group_ready, None, 2, 60.0)
        n_before = len(rec.by(m2.addr))
        await asyncio.to_thread(wait_until, "acks from the new master", lambda: len(rec.by(m2.addr)) > n_before, 10.0)
        # 2. everybody loses the database: the master stops acknowledging, nobody is elected
        for m in c.members:
            await asyncio.to_thread(c.cut_db, m)
        t_cut = time.monotonic()
        await asyncio.sleep((TTL_MS + 2 * RENEW_MS) / 1000)
        during = [a for _, a in rec.acks if a.t_sent > t_cut + (TTL_MS - MARGIN_MS) / 1000]
        assert not during, f"acknowledged with the database unreachable: {during[:3]}"
        # 3. the database is back: election resumes, a master acknowledges again
        t_heal = time.monotonic()
        for m in c.members:
            await asyncio.to_thread(c.heal_db, m)
        await asyncio.to_thread(wait_until, "a master acknowledging after the database returned",
                                lambda: any(a.t_sent > t_heal for _, a in rec.acks), 30.0, 0.05)
        print(f"election resumed {min(a.t for _, a in rec.acks if a.t_sent > t_heal) - t_heal:.3f}s after the "
              f"database returned")
        await asyncio.to_thread(c.wait_group_ready, None, 2, 60.0)
    finally:
        await rec.stop()
    problems = rec.overlaps()
    assert not problems, "\n".join(problems[:5])
    master = await asyncio.to_thread(c.wait_master)
    stored = await read_topic_at(master.addr, TOPIC, QUEUES)
    problems = acked_readable(stored, {a.body: a for _, a in rec.acks})
    assert not problems, "\n".join(problems)


# ---- settings that can never work: exit 2 with one line ------------------------------------------------------
def test_bad_lease_store_settings_stop_start_up_with_exit_2(pg: SqlDb, tmp_path: Path) -> None:
    cases = {
        "bad url": ("postgresql://127.0.0.1:5432/x", "no user"),
        "wrong password": (pg.url_with(password="not-the-password"), "password"),
        "missing database": (pg.url_with(database=pg.database + "_missing"), pg.database + "_missing"),
    }
    for name, (url, expect) in cases.items():
        d = tmp_path / name.replace(" ", "-")
        keys = broker_conf_keys(d / "store", free_broker_port(), "", enableLeaseElection=True, leaseStoreUrl=url)
        conf = write_conf(d / "broker.conf", keys)
        p = subprocess.run([sys.executable, "-m", "orbitmq.cli.main", "broker", "-c", str(conf)], capture_output=True,
                           text=True, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("orbitmq: error")]
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        assert len(lines) == 1 and expect.lower() in lines[0].lower(), (name, p.stderr[-2000:])
        assert p.stderr.rstrip().splitlines()[-1] == lines[0]  # the last word, nothing after it
        assert pg.password not in p.stderr
        print(f"{name}: {lines[0]}")
