"""Three RaftDrivers in one process on 127.0.0.1, each behind a real RemotingServer that routes
ORBIT_RAFT_MESSAGE to its RaftTransport, with RaftStorage on real files and a small KV state machine:
election, replication, follower refusal with a leader hint, ReadIndex, leader failover, catch-up after a
restart (from the log, and through a snapshot install), and a storage failure stopping the node."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.raft import (
    NotLeaderError,
    RaftConfig,
    RaftDriver,
    RaftStoppedError,
    RaftStorage,
    RaftTransport,
    Ready,
    Role,
)
from orbitmq.remoting import Connection, RemotingServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GROUP = "ctl-group"
IDS = ("n0", "n1", "n2")
TICK_MS = 50


class KV:
    """apply(b"k=v") sets k and returns "ok:k"; no-op entries (b"") return None. With `seen` (shared by the
    members of a cluster) it records the data applied at each index by any member (a test then checks that
    every index carried one value only)."""

    def __init__(self, seen: dict[int, set[bytes]] | None = None) -> None:
        self.data: dict[str, str] = {}
        self.restores = 0
        self.seen = seen

    def apply(self, index: int, data: bytes) -> object:
        if self.seen is not None:
            self.seen.setdefault(index, set()).add(data)
        if not data:
            return None
        k, _, v = data.decode().partition("=")
        self.data[k] = v
        return f"ok:{k}"

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        self.data = json.loads(data)
        self.restores += 1


class Member:
    """One controller-like process: a listening RemotingServer, and a RaftDriver when started."""

    def __init__(self, node_id: str, root: Path, snapshot_every: int,
                 seen: dict[int, set[bytes]] | None = None) -> None:
        self.node_id = node_id
        self.seen = seen
        self.dir = str(root / node_id)
        self.snapshot_every = snapshot_every
        self.server = RemotingServer(self._handle, "127.0.0.1", 0, name=f"srv-{node_id}")
        self.transport: RaftTransport | None = None
        self.driver: RaftDriver | None = None
        self.kv = KV()
        self.roles: list[tuple[Role, int, str]] = []
        self.listening = False

    async def listen(self) -> None:
        """Start the server (port 0 the first time, then the same port again after a stop)."""
        if not self.listening:
            await self.server.start()
            self.listening = True

    def _handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.ORBIT_RAFT_MESSAGE and self.transport is not None:
            return self.transport.handle(conn, cmd)
        return None if cmd.is_oneway else cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no raft")

    async def start(self, addrs: dict[str, str], storage: RaftStorage | None = None) -> None:
        await self.listen()
        self.kv = KV(self.seen)
        self.transport = RaftTransport(GROUP, self.node_id, addrs)
        cfg = RaftConfig(self.node_id, IDS, election_ticks=10, tick_ms=TICK_MS)
        self.driver = RaftDriver(cfg, storage or RaftStorage(self.dir, segment_size=64 * 1024), self.transport,
                                 self.kv, snapshot_every=self.snapshot_every)
        self.driver.add_role_listener(lambda r, t, lid: self.roles.append((r, t, lid)))
        await self.driver.start()

    async def stop(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
        await self.server.stop()
        self.listening = False


async def wait_for(cond: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def leader_of(members: list[Member]) -> Member | None:
    leaders = [m for m in members if m.driver is not None and m.driver.is_leader]
    return leaders[0] if len(leaders) == 1 else None


async def cluster(root: Path, snapshot_every: int = 10_000,
                  seen: dict[int, set[bytes]] | None = None) -> tuple[list[Member], dict[str, str]]:
    members = [Member(i, root, snapshot_every, seen) for i in IDS]
    for m in members:
        await m.listen()
    addrs = {m.node_id: f"127.0.0.1:{m.server.port}" for m in members}
    for m in members:
        await m.start(addrs)
    return members, addrs


async def propose_many(leader: Member, keys: range, prefix: str = "k") -> None:
    assert leader.driver is not None
    results = await asyncio.gather(*(leader.driver.propose(f"{prefix}{i}={i}".encode(), 10_000) for i in keys))
    assert results == [f"ok:{prefix}{i}" for i in keys]


def has_keys(m: Member, keys: range, prefix: str = "k") -> bool:
    return all(m.kv.data.get(f"{prefix}{i}") == str(i) for i in keys)


def test_election_replication_failover_and_catch_up(tmp_path: Path) -> None:
    async def go() -> None:
        members, addrs = await cluster(tmp_path)
        try:
            leader = await wait_for(lambda: leader_of(members), 15, "a leader")
            assert isinstance(leader, Member) and leader.driver is not None
            await propose_many(leader, range(20))
            await wait_for(lambda: all(has_keys(m, range(20)) for m in members), 10, "all three applied 20 keys")

            follower = next(m for m in members if m is not leader)
            assert follower.driver is not None
            await wait_for(lambda: follower.driver.leader_id == leader.node_id, 5, "follower knows the leader")
            with pytest.raises(NotLeaderError) as ei:
                await follower.driver.propose(b"x=1")
            assert ei.value.leader_id == leader.node_id
            with pytest.raises(NotLeaderError):
                await follower.driver.read_barrier()
            await leader.driver.read_barrier(5000)
            assert has_keys(leader, range(20))
            assert follower.driver.peer_addr(leader.node_id) == addrs[leader.node_id]
            assert any(r[0] == Role.LEADER for r in leader.roles)

            old_term = leader.driver.term
            await leader.stop()  # the leader goes away
            rest = [m for m in members if m is not leader]
            new = await wait_for(lambda: leader_of(rest), 20, "a new leader among the other two")
            assert isinstance(new, Member) and new.driver is not None and new.driver.term > old_term
            await propose_many(new, range(20, 40))
            await wait_for(lambda: all(has_keys(m, range(40)) for m in rest), 10, "both live members at 40 keys")

            await leader.start(addrs)  # back with its files: replays its log, then catches up from the leader
            await wait_for(lambda: has_keys(leader, range(40)), 20, "the restarted node caught up")
            assert leader.driver is not None and not leader.driver.is_leader
            await propose_many(new, range(40, 45))
            await wait_for(lambda: all(has_keys(m, range(45)) for m in members), 10, "all three at 45 keys")
        finally:
            for m in members:
                await m.stop()
        orphans = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert orphans == [], f"tasks left after stop: {orphans}"

    asyncio.run(go())


def test_lagging_node_catches_up_through_a_snapshot(tmp_path: Path) -> None:
    async def go() -> None:
        members, addrs = await cluster(tmp_path, snapshot_every=5)
        try:
            leader = await wait_for(lambda: leader_of(members), 15, "a leader")
            assert isinstance(leader, Member) and leader.driver is not None
            await propose_many(leader, range(3))
            lagging = next(m for m in members if m is not leader)
            await wait_for(lambda: has_keys(lagging, range(3)), 10, "the follower applied 3 keys")
            await lagging.stop()
            await propose_many(leader, range(3, 40))  # the leader compacts every 5 entries meanwhile
            snap_index = leader.driver.status()["snapshot_index"]
            assert isinstance(snap_index, int) and snap_index > 10

            await lagging.start(addrs)
            assert lagging.driver is not None
            lagging.kv.restores = 0  # count only the snapshot installed from the leader from here on
            await wait_for(lambda: has_keys(lagging, range(40)), 20, "the lagging node caught up")
            assert lagging.kv.restores >= 1, "caught up without a snapshot install"
            await propose_many(leader, range(40, 42))
            await wait_for(lambda: all(has_keys(m, range(42)) for m in members), 10, "all three at 42 keys")
        finally:
            for m in members:
                await m.stop()

    asyncio.run(go())


class SlowStorage(RaftStorage):
    """Each save takes 10 ms longer (a slow disk) and records how many ran at once."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, segment_size=64 * 1024)
        self.active = 0
        self.max_active = 0
        self.saves = 0

    def save(self, ready: Ready) -> None:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(0.01)  # in the driver's worker thread: blocks nothing but this save
            super().save(ready)
            self.saves += 1
        finally:
            self.active -= 1


def test_slow_disk_one_save_at_a_time_and_input_keeps_flowing(tmp_path: Path) -> None:
    async def go() -> None:
        members = [Member(i, tmp_path, 10_000) for i in IDS]
        for m in members:
            await m.listen()
        addrs = {m.node_id: f"127.0.0.1:{m.server.port}" for m in members}
        storages = {m.node_id: SlowStorage(m.dir) for m in members}
        for m in members:
            await m.start(addrs, storages[m.node_id])
        try:
            leader = await wait_for(lambda: leader_of(members), 15, "a leader")
            assert isinstance(leader, Member)
            await propose_many(leader, range(100))  # 100 concurrent proposals over 10 ms saves
            await wait_for(lambda: all(has_keys(m, range(100)) for m in members), 10, "all three at 100 keys")
            leader_saves = storages[leader.node_id].saves
            assert leader_saves < 60, f"{leader_saves} saves for 100 proposals: input was not batched"
            assert all(s.max_active == 1 for s in storages.values())
        finally:
            for m in members:
                await m.stop()

    asyncio.run(go())


class FailingStorage(RaftStorage):
    fail = False

    def save(self, ready: Ready) -> None:
        if self.fail and ready.entries:
            raise OSError(5, "Input/output error (injected fsync failure)")
        super().save(ready)


def test_storage_failure_stops_the_node_without_acknowledging(tmp_path: Path) -> None:
    async def go() -> None:
        m = Member("n0", tmp_path, 10_000)
        await m.listen()
        storage = FailingStorage(m.dir)
        transport = RaftTransport(GROUP, "n0", {"n0": f"127.0.0.1:{m.server.port}"})
        m.transport = transport
        drv = RaftDriver(RaftConfig("n0", ("n0",), election_ticks=10, tick_ms=TICK_MS), storage, transport, m.kv)
        roles: list[Role] = []
        drv.add_role_listener(lambda r, t, lid: roles.append(r))
        await drv.start()
        try:
            await wait_for(lambda: drv.is_leader, 10, "the single node leads")
            assert await drv.propose(b"a=1") == "ok:a"
            storage.fail = True
            with pytest.raises(RaftStoppedError, match="fatal"):
                await drv.propose(b"b=2")
            assert not drv.running and not drv.is_leader and m.kv.data == {"a": "1"}
            assert roles[-1] == Role.FOLLOWER
            with pytest.raises(RaftStoppedError):
                await drv.propose(b"c=3")
        finally:
            await drv.stop()
            await m.server.stop()
        reopened = RaftStorage(m.dir)  # the lock was released and nothing of the failed save is there
        _, _, entries = reopened.load()
        assert [e.data for e in entries if e.data] == [b"a=1"]
        reopened.close()

    asyncio.run(go())


def test_pending_proposal_fails_when_the_leader_loses_its_quorum(tmp_path: Path) -> None:
    async def go() -> None:
        members, _ = await cluster(tmp_path)
        try:
            leader = await wait_for(lambda: leader_of(members), 15, "a leader")
            assert isinstance(leader, Member) and leader.driver is not None
            await propose_many(leader, range(2))
            for m in members:
                if m is not leader:
                    await m.stop()
            # ReadIndex needs a quorum's heartbeat acks: no answer now (a timeout, or the step-down below)
            with pytest.raises((TimeoutError, NotLeaderError)):
                await leader.driver.read_barrier(timeout_ms=300)
            # nothing can commit now; check-quorum makes the leader step down within ~2 election timeouts
            with pytest.raises(NotLeaderError, match="leadership lost"):
                await leader.driver.propose(b"lost=1", timeout_ms=30_000)
            assert not leader.driver.is_leader and "lost" not in leader.kv.data
            assert leader.roles[-1][0] != Role.LEADER
        finally:
            for m in members:
                await m.stop()

    asyncio.run(go())


def closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_transport_bounds_queues_and_rejects_foreign_traffic(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from orbitmq.raft import Message, MsgType, encode_batch
    from orbitmq.remoting import RemotingClient

    async def go() -> None:
        got: list[Message] = []
        holder: dict[str, RaftTransport] = {}
        server = RemotingServer(lambda conn, cmd: holder["t"].handle(conn, cmd), "127.0.0.1", 0)
        await server.start()
        me = f"127.0.0.1:{server.port}"
        tr = RaftTransport(GROUP, "n0", {"n0": me, "n1": f"127.0.0.1:{closed_port()}", "n2": "127.0.0.1:1"},
                           queue_limit=8)
        holder["t"] = tr
        tr.set_receiver(got.extend)
        await tr.start()
        client = RemotingClient()
        try:
            start = time.monotonic()
            for i in range(2000):  # an unreachable peer: never blocks, never holds more than 8
                tr.send([Message(MsgType.HEARTBEAT, "n0", "n1", 1, context=i)])
                assert tr.status()["peers"]["n1"]["queued"] <= 8  # type: ignore[index]
            assert time.monotonic() - start < 2.0
            await wait_for(lambda: tr.status()["peers"]["n1"]["down"], 10, "n1 marked down")  # type: ignore[index]
            assert tr.status()["peers"]["n1"]["dropped"] >= 1992  # type: ignore[index]

            def req(ext: dict[str, str], body: bytes) -> RemotingCommand:
                return RemotingCommand.request(RequestCode.ORBIT_RAFT_MESSAGE, ext, body)

            good = encode_batch([Message(MsgType.VOTE, "n1", "n0", 3), Message(MsgType.VOTE, "n1", "n9", 3),
                                 Message(MsgType.VOTE, "n2", "n0", 3)])
            for _ in range(2):
                r = await client.invoke(me, req({"group": "other", "from": "n1"}, good))
                assert r.code == ResponseCode.SYSTEM_ERROR and "other" in (r.remark or "")
            assert sum("group 'other'" in rec.getMessage() for rec in caplog.records) == 1  # logged once
            r = await client.invoke(me, req({"group": GROUP, "from": "n7"}, good))
            assert r.code == ResponseCode.SYSTEM_ERROR and "n7" in (r.remark or "")
            r = await client.invoke(me, req({"group": GROUP, "from": "n1"}, good[:-3]))
            assert r.code == ResponseCode.SYSTEM_ERROR and "raft codec" in (r.remark or "")
            assert got == []
            r = await client.invoke(me, req({"group": GROUP, "from": "n1"}, good))
            assert r.code == ResponseCode.SUCCESS
            assert got == [Message(MsgType.VOTE, "n1", "n0", 3)]  # wrong dst / forged src filtered out
        finally:
            await client.close()
            await tr.stop()
            await server.stop()
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("raft-send")]

    asyncio.run(go())


@pytest.mark.parametrize("seed", [1, 2])
def test_restarts_under_load_keep_every_acknowledged_write(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    seen: dict[int, set[bytes]] = {}

    async def propose_until_acked(members: list[Member], key: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            leader = leader_of(members)
            if leader is not None and leader.driver is not None:
                try:
                    assert await leader.driver.propose(f"{key}=1".encode(), 2000) == f"ok:{key}"
                    return
                except (NotLeaderError, TimeoutError):
                    pass
            await asyncio.sleep(0.02)
        raise AssertionError(f"seed {seed}: {key} never acknowledged")

    async def go() -> None:
        members, addrs = await cluster(tmp_path, snapshot_every=7, seen=seen)
        acked: list[str] = []
        try:
            for rnd in range(6):
                victim = rng.choice(members)  # stopped while this round's proposals are in flight
                keys = [f"r{rnd}k{i}" for i in range(8)]
                deadline = time.monotonic() + 30
                batch = asyncio.gather(*(propose_until_acked(members, k, deadline) for k in keys))
                await victim.stop()
                await batch
                acked.extend(keys)
                await victim.start(addrs)
            await wait_for(lambda: all(all(m.kv.data.get(k) == "1" for k in acked) for m in members), 20,
                           f"seed {seed}: every acknowledged key on all three")
            await wait_for(lambda: len({json.dumps(m.kv.data, sort_keys=True) for m in members}) == 1, 10,
                           f"seed {seed}: identical state machines")
            assert len(seen) > len(acked), "the applied-log check saw nothing"
            split = {i: v for i, v in seen.items() if len(v) > 1}
            assert not split, f"seed {seed}: members applied different data at the same index: {split}"
        finally:
            for m in members:
                await m.stop()

    asyncio.run(go())
