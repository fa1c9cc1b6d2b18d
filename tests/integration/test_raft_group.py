"""Raft broker groups (issue 14, DLedger CommitLog mode): a name server and three brokers with
enableDLegerCommitLog, real processes on free ports (orbitmq/testing/raft_group.py).

- our SDK's producer sends through pushed routes; the leader is kill -9'd mid-run: a new leader within a few seconds,
  the producer's acknowledgements resume through the route, nothing acknowledged is lost; the killed member restarts
  and catches up (same CommitLog end on every member); every acknowledged message is readable from every member at
  the queue offset it was acknowledged at (followers serve reads);
- our SDK's push consumer gets every acknowledged message after the fail-over; a consumer offset committed on the
  leader is on every member (replicated as an OFFSETS entry) and on the new leader after the kill;
- followers refuse sends; the name server routes brokerId 0 to the leader;
- `orbitmq cluster init --mode raft` + `cluster -d`: clusterList shows the Raft columns.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from orbitmq.client import Admin, ConsumeResult, MessageExt, MessageQueue, PushConsumer, broker_api
from orbitmq.client.errors import TopicNotExistError
from orbitmq.protocol import ResponseCode
from orbitmq.remoting import RemotingClient
from orbitmq.testing.controller_cluster import wait_until
from orbitmq.testing.failover_load import SendLoad, check_acked_readable, probe_send, read_topic_at
from orbitmq.testing.procs import free_port_block
from orbitmq.testing.raft_group import RaftGroup

pytestmark = [pytest.mark.integration]

TOPIC = "RaftTopic"
QUEUES = 4
NEW_LEADER_BOUND_S = 5.0  # election timeout 0.5-1 s, plus a busy 2-core machine


def run(g: RaftGroup, coro: Any, timeout_s: float) -> Any:
    try:
        return asyncio.run(asyncio.wait_for(coro, timeout_s))
    except BaseException:
        print(g.logs(40))
        raise


async def route_master(ns_addr: str) -> str:
    """brokerId 0's address in the topic's route ("" while the name server has no route)."""
    async with Admin(ns_addr) as admin:
        try:
            route = await admin.topic_route(TOPIC)
        except TopicNotExistError:
            return ""
    return next(bd.broker_addrs.get(0, "") for bd in route.broker_datas)


def test_leader_kill9_no_acknowledged_loss_and_catch_up(tmp_path: Path) -> None:
    with RaftGroup(tmp_path / "group") as g:
        g.start()
        leader = g.leader()
        run(g, _create_topic(g, leader), 30)
        load, new, took, resumed, t_kill = run(g, _kill_leader_under_load(g, leader), 90)
        print(f"leader n{leader} killed; n{new} leader after {took:.2f}s; first ack of a send begun after the kill "
              f"{resumed - t_kill:.2f}s after it; {len(load.acked)} acks, {len(load.not_ok)} not ok, "
              f"{load.errors} errors")
        assert took < NEW_LEADER_BOUND_S, took
        assert run(g, route_master(g.ns_addr), 10) == g.addr(new)
        g.restart(leader)
        g.wait_same_log(60.0)
        info = g.runtime(leader)
        assert info["dLegerRole"] == "FOLLOWER" and info["dLegerLeaderId"] == f"n{new}", info
        for i in range(g.size):  # the leader, the surviving follower and the restarted member (slave read)
            stored = run(g, read_topic_at(g.addr(i), TOPIC, QUEUES), 60)
            problems = check_acked_readable(load.acked, stored)
            assert not problems, f"member n{i}: " + "\n".join(problems)
        # our SDK's push consumer, through the route after the fail-over, gets every acknowledged message
        got = run(g, _consume_all(g.ns_addr, set(load.acked)), 90)
        assert set(load.acked) <= got
        # a follower refuses writes: the client goes to the leader through the route
        follower = next(i for i in range(g.size) if i != new)
        answers: list[int] = []
        run(g, _probe(g.addr(follower), answers), 10)
        assert answers == [ResponseCode.SERVICE_NOT_AVAILABLE], answers


async def _kill_leader_under_load(g: RaftGroup, leader: int) -> tuple[SendLoad, int, float, float, float]:
    load = await SendLoad(g.ns_addr, TOPIC, senders=2, run="raft").start()
    client = RemotingClient(name="offsets")
    mq = MessageQueue(TOPIC, g.broker_name, 0)
    try:
        await _wait_acks(load, 50)
        # a consumer offset committed on the leader reaches the followers through the log
        await broker_api.update_consumer_offset(client, g.addr(leader), "CG_offsets", mq, 7, oneway=False)
        for i in range(g.size):
            while await broker_api.query_consumer_offset(client, g.addr(i), "CG_offsets", mq) != 7:
                await asyncio.sleep(0.1)
        t_kill = await asyncio.to_thread(g.kill9, leader)
        new = await asyncio.to_thread(g.leader, 15.0, leader)
        took = time.monotonic() - t_kill
        assert await broker_api.query_consumer_offset(client, g.addr(new), "CG_offsets", mq) == 7
        await _wait_acks_after(load, t_kill, 30)
        resumed = load.first_ack_after(t_kill) or 0.0
    finally:
        await load.stop()
        await client.close()
    return load, new, took, resumed, t_kill


async def _create_topic(g: RaftGroup, leader: int) -> None:
    async with Admin(g.ns_addr) as admin:
        await admin.update_topic(TOPIC, broker_addr=g.addr(leader), read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    while not (await route_master(g.ns_addr)):
        await asyncio.sleep(0.1)


async def _wait_acks(load: SendLoad, n: int) -> None:
    while len(load.acked) < n:
        await asyncio.sleep(0.05)


async def _wait_acks_after(load: SendLoad, t: float, n: int) -> None:
    while sum(1 for a in load.acked.values() if a.t_sent >= t) < n:
        await asyncio.sleep(0.05)


async def _probe(addr: str, answers: list[int]) -> None:
    client = RemotingClient(name="probe")
    try:
        await probe_send(client, addr, TOPIC, "to-a-follower", 0, 2000, answers)
    finally:
        await client.close()


def test_cluster_init_raft_and_cluster_list_columns(tmp_path: Path) -> None:
    """`orbitmq cluster init --mode raft DIR` + `orbitmq cluster -d DIR`: a 3-node Raft group and a name server;
    clusterList shows one leader (brokerId 0) and two followers with the Raft role, leader, term, commit index and
    per-node lag; SIGTERM stops all 4 members."""
    d = tmp_path / "c"
    ns_port, broker_port = free_port_block(1, 1), free_port_block(3, 10)
    main = [sys.executable, "-m", "orbitmq.cli.main"]
    res = subprocess.run([*main, "cluster", "init", "--mode", "raft", str(d), "--namesrv-port", str(ns_port),
                          "--broker-port", str(broker_port), "--commitlog-size", str(16 * 1024 * 1024)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    ns = f"127.0.0.1:{ns_port}"
    proc = subprocess.Popen([*main, "cluster", "-d", str(d)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def group_listed() -> list[dict[str, Any]] | None:
            out = subprocess.run([*main, "clusterList", "-n", ns, "--json"], capture_output=True, timeout=30)
            rows = orjson.loads(out.stdout) if out.returncode == 0 else None
            if not isinstance(rows, list) or len(rows) != 3:
                return None
            leaders = [r for r in rows if r.get("raftRole") == "LEADER"]
            ok = (len(leaders) == 1 and leaders[0]["BID"] == 0 and sorted(r["BID"] for r in rows)[1:] != [0, 0]
                  and all(r.get("raftLag") not in (None, "-") and r.get("term") == leaders[0]["term"]
                          and str(r.get("commitIndex", "0")).isdigit() and int(r["commitIndex"]) >= 1
                          and r.get("raftLeader") == leaders[0]["raftLeader"] for r in rows))
            return rows if ok else None

        # (a follower learns the commit index of the leader's first entry with the next heartbeat: waited for too)
        rows = wait_until("clusterList: one Raft leader as brokerId 0, two followers, lag and commit known",
                          group_listed, 60.0, 0.5)
        assert {r["raftRole"] for r in rows} == {"LEADER", "FOLLOWER"}, rows
        assert all(int(r["commitIndex"]) >= 1 for r in rows), rows
    finally:
        proc.send_signal(signal.SIGTERM)
        out_b, _ = proc.communicate(timeout=90)
    text = out_b.decode()
    assert proc.returncode == 0, text
    assert text.count("stopped ") == 4, text


async def _consume_all(ns_addr: str, want: set[str]) -> set[str]:
    got: set[str] = set()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        got.update(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS

    c = PushConsumer("CG_raft", namesrv=ns_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(TOPIC, "*", listener)
    await c.start()
    try:
        while not want <= got:
            await asyncio.sleep(0.1)
    finally:
        await c.shutdown()
    return got


def test_member_behind_the_leaders_compaction_catches_up_by_commitlog_transfer(tmp_path: Path) -> None:
    """raftSnapshotEvery=40: a follower down while ~300 entries commit comes back behind the leader's compaction. It
    gets an InstallSnapshot (only the CommitLog end offset), fetches the missing CommitLog bytes from the leader
    (ORBIT_RAFT_GROUP_READ_LOG), then stores the entries held meanwhile: same CommitLog end as the others, every
    acknowledged message readable from it."""
    with RaftGroup(tmp_path / "group", raftSnapshotEvery=40) as g:
        g.start()
        leader = g.leader()
        run(g, _create_topic(g, leader), 30)
        down = next(i for i in range(g.size) if i != leader)
        g.kill9(down)
        load: SendLoad = run(g, _load_until(g, 300), 120)
        g.restart(down)
        g.wait_same_log(60.0)
        info = g.runtime(down)
        assert int(info["dLegerFetchedBytes"]) > 0 and "dLegerBehind" not in info, info
        stored = run(g, _read_when_adopted(g.addr(down)), 60)
        problems = check_acked_readable(load.acked, stored)
        assert not problems, "\n".join(problems)
        print(f"{len(load.acked)} acks while n{down} was down; it fetched {info['dLegerFetchedBytes']} CommitLog bytes")


async def _load_until(g: RaftGroup, n: int) -> SendLoad:
    load = await SendLoad(g.ns_addr, TOPIC, senders=4, run="behind").start()
    try:
        await _wait_acks(load, n)
    finally:
        await load.stop()
    return load


async def _read_when_adopted(addr: str) -> Any:
    """read_topic_at once the member has adopted the topic (it never saw the config: only data)."""
    while True:
        try:
            return await read_topic_at(addr, TOPIC, QUEUES)
        except TopicNotExistError:
            await asyncio.sleep(0.1)
