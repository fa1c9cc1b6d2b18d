"""Three `orbitmq controller` processes on 127.0.0.1 and three fake brokers speaking raw RIP-44 requests: the 5.1.1
broker-id flow, heartbeats, the first election, SyncStateSet changes, kill -9 of the controller leader (the new
leader answers with the same metadata) and a failover when the master's connection closes (the new master comes
from the SyncStateSet only, and NOTIFY_BROKER_ROLE_CHANGED reaches the fake brokers), then a restart of every
controller (state recovered from the Raft logs). Plus the controller embedded
in `orbitmq namesrv`. Every wait is for a condition, bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from orbitmq.base.errors import RemotingError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from orbitmq.protocol.bodies.controller import broker_names_body
from orbitmq.remoting import Connection, RemotingClient, RemotingServer
from orbitmq.testing.procs import LOCALHOST, ServerProcess, free_port, write_conf

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

CLUSTER, NAME, GROUP = "DefaultCluster", "broker-a", "group1"
HEARTBEAT_TIMEOUT_MS = 4000


async def wait_for(what: str, check: Callable[[], Awaitable[object]], timeout_s: float = 20.0) -> object:
    """Poll `check` until it returns something truthy; AssertionError naming `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except (RemotingError, OSError) as e:
            last = e
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


class FakeBroker:
    """What a controller sees of a broker: requests and heartbeats from its client, and a server that receives
    NOTIFY_BROKER_ROLE_CHANGED."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.server = RemotingServer(self._handle, LOCALHOST, 0, name=f"fake-broker-{index}")
        self.client = RemotingClient(name=f"fake-broker-{index}")
        self.notices: list[NotifyBrokerRoleChangedRequestHeader] = []
        self.notice_bodies: list[SyncStateSet] = []
        self.broker_id: int | None = None
        self.max_offset = 1000 * index
        self.beating = False
        self._task: asyncio.Task[None] | None = None

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.server.port}"

    def _handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            self.notices.append(NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields))
            self.notice_bodies.append(SyncStateSet.from_json(cmd.body))
        return cmd.response()

    async def start(self, controllers: list[str]) -> None:
        await self.server.start()
        self._controllers = controllers

    def start_heartbeats(self) -> None:
        self.beating = True
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while self.beating:
            h = BrokerHeartbeatRequestHeader(CLUSTER, self.addr, NAME, self.broker_id, 1, self.max_offset,
                                             self.max_offset, HEARTBEAT_TIMEOUT_MS, 0)
            for c in self._controllers:
                try:
                    await self.client.invoke_oneway(c, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                                                               h.to_ext(), oneway=True))
                except (RemotingError, OSError):
                    pass  # that controller is down
            await asyncio.sleep(0.3)

    async def die(self) -> None:
        """Stop heartbeating and drop every connection to the controllers (what kill -9 of a broker looks like)."""
        self.beating = False
        if self._task is not None:
            await self._task
        for c in self._controllers:
            self.client.close_connection(c)

    async def close(self) -> None:
        self.beating = False
        if self._task is not None:
            self._task.cancel()
        await self.client.close()
        await self.server.stop()


class Controllers:
    def __init__(self, root: Path, n: int = 3, **keys: object) -> None:
        ports = []
        while len(ports) < n:
            p = free_port()
            if p not in ports:
                ports.append(p)
        self.ids = [f"n{i}" for i in range(n)]
        self.addrs = {i: f"{LOCALHOST}:{p}" for i, p in zip(self.ids, ports, strict=True)}
        peers = ";".join(f"{i}-{a}" for i, a in self.addrs.items())
        self.procs: dict[str, ServerProcess] = {}
        for node, port in zip(self.ids, ports, strict=True):
            d = root / node
            conf = write_conf(d / "controller.conf", {
                "controllerDLegerGroup": GROUP, "controllerDLegerPeers": peers, "controllerDLegerSelfId": node,
                "controllerStorePath": str(d / "store"), "scanNotActiveBrokerInterval": 500,
                "scanInactiveMasterInterval": 1000, "raftSnapshotEvery": 4, **keys})
            self.procs[node] = ServerProcess.cli(["controller", "-c", str(conf)], d / "controller.log",
                                                 ports=[port], name=f"controller-{node}")

    def start(self) -> None:
        for p in self.procs.values():
            p.start(wait=False)
        for p in self.procs.values():
            p.wait_ready()

    def logs(self) -> str:
        return "\n".join(f"--- {n} ---\n{p.log_tail(30)}" for n, p in self.procs.items())

    def close(self) -> None:
        for p in self.procs.values():
            p.close()


async def metadata(client: RemotingClient, addr: str) -> GetMetaDataResponseHeader:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO), 2000)
    assert resp.code == ResponseCode.SUCCESS, resp
    return GetMetaDataResponseHeader.from_ext(resp.ext_fields)


async def find_leader(client: RemotingClient, addrs: list[str], timeout_s: float = 30.0) -> str:
    """The address of the one controller that says it is the serving leader, agreed by every live peer asked."""
    async def check() -> str | None:
        leaders = []
        for a in addrs:
            try:
                m = await metadata(client, a)
            except (RemotingError, OSError):
                continue
            assert m.group == GROUP
            if m.is_leader:
                leaders.append(a)
        return leaders[0] if len(leaders) == 1 else None

    return str(await wait_for("a controller leader", check, timeout_s))


async def to_leader(client: RemotingClient, addrs: list[str], make: Callable[[], RemotingCommand]) -> RemotingCommand:
    """Send to the current leader, following NOT_LEADER answers until a leader takes it."""
    async def attempt() -> RemotingCommand | None:
        resp = await client.invoke(await find_leader(client, addrs), make(), 6000)
        return None if resp.code == ResponseCode.CONTROLLER_NOT_LEADER else resp

    result = await wait_for("a leader to answer", attempt, 30.0)
    assert isinstance(result, RemotingCommand)
    return result


async def register(client: RemotingClient, addrs: list[str], b: FakeBroker) -> int:
    """The 5.1.1 flow: GET_NEXT_BROKER_ID -> APPLY_BROKER_ID -> REGISTER_BROKER."""
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    bid = int(r.ext_fields["nextBrokerId"])
    code = f"{b.addr};{int(time.time() * 1000)}"
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(CLUSTER, NAME, bid, code).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, bid, b.addr).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    b.broker_id = bid
    return bid


async def replica_info(client: RemotingClient, addrs: list[str]) -> tuple[dict[str, str], SyncStateSet]:
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(NAME).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    return dict(r.ext_fields or {}), SyncStateSet.from_json(r.body)


async def alive_ids(client: RemotingClient, addr: str) -> set[int]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                                             body=broker_names_body([NAME])), 3000)
    if resp.code != ResponseCode.SUCCESS:
        return set()
    info = BrokerReplicasInfo.from_json(resp.body).replicas_info_table.get(NAME)
    if info is None:
        return set()
    return {r.broker_id for r in (*info.in_sync_replicas, *info.not_in_sync_replicas) if r.alive}


async def alter(client: RemotingClient, addrs: list[str], ids: set[int], master: int, master_epoch: int,
                ss_epoch: int) -> RemotingCommand:
    return await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        AlterSyncStateSetRequestHeader(NAME, master, master_epoch).to_ext(),
        SyncStateSet(frozenset(ids), ss_epoch).to_json()))


def test_controller_cluster_failover(tmp_path: Path) -> None:
    ctl = Controllers(tmp_path)
    try:
        ctl.start()
        asyncio.run(asyncio.wait_for(_scenario(ctl), 130))
    except BaseException:
        print(ctl.logs())
        raise
    finally:
        ctl.close()


async def _scenario(ctl: Controllers) -> None:
    addrs = list(ctl.addrs.values())
    client = RemotingClient(name="test-admin")
    brokers = [FakeBroker(i) for i in (1, 2, 3)]
    try:
        for b in brokers:
            await b.start(addrs)
        leader = await find_leader(client, addrs)
        peers = (await metadata(client, leader)).peers
        assert peers == ";".join(f"{i}:{a}" for i, a in ctl.addrs.items())
        follower = next(a for a in addrs if a != leader)

        async def follower_knows_leader() -> bool:
            m = await metadata(client, follower)
            return not m.is_leader and m.controller_leader_address == leader
        await wait_for("the follower to name the leader", follower_knows_leader)
        r = await client.invoke(follower, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER

        # broker-id flow, then heartbeats to every controller
        assert [await register(client, addrs, b) for b in brokers] == [1, 2, 3]
        for b in brokers:
            b.start_heartbeats()
        leader = await find_leader(client, addrs)

        async def all_alive() -> bool:
            return await alive_ids(client, leader) == {1, 2, 3}
        await wait_for("all three brokers alive on the leader", all_alive)

        # first election: the requester becomes master, epoch 1
        r = await to_leader(client, addrs, lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(CLUSTER, NAME, 1).to_ext()))
        assert r.code == ResponseCode.SUCCESS, r
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"], r.ext_fields["masterAddress"]) == (
            "1", "1", brokers[0].addr)
        body = ElectMasterResponseBody.from_json(r.body)
        assert body.sync_state_set == {1} and set(body.broker_member_group.broker_addrs) == {1, 2, 3}

        async def notified_epoch_1() -> bool:
            return all(any(n.master_epoch == 1 and n.master_broker_id == 1 for n in b.notices) for b in brokers)
        await wait_for("NOTIFY_BROKER_ROLE_CHANGED epoch 1 at every broker", notified_epoch_1)

        # the master adds both slaves, then shrinks broker 3 out (it fell behind)
        r = await alter(client, addrs, {1, 2, 3}, 1, 1, 1)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["newSyncStateSetEpoch"] == "2", r
        r = await alter(client, addrs, {1, 2}, 1, 1, 2)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["newSyncStateSetEpoch"] == "3", r
        stale = await alter(client, addrs, {1}, 1, 1, 2)
        assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH

        # kill -9 the controller leader: another node leads with the same metadata
        old_leader = leader
        old_node = next(n for n, a in ctl.addrs.items() if a == old_leader)
        ctl.procs[old_node].kill9()
        killed_at = time.monotonic()
        survivors = [a for a in addrs if a != old_leader]
        leader = await find_leader(client, survivors)
        print(f"controller leader kill -9 -> new serving leader: {time.monotonic() - killed_at:.2f} s")
        assert leader != old_leader
        header, sss = await replica_info(client, survivors)
        assert (header["masterBrokerId"], header["masterEpoch"]) == ("1", "1")
        assert sss == SyncStateSet(frozenset({1, 2}), 3)
        r = await to_leader(client, survivors, lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
        assert r.ext_fields["nextBrokerId"] == "4"

        async def all_alive_on_new_leader() -> bool:
            return await alive_ids(client, leader) == {1, 2, 3}
        await wait_for("all three brokers alive on the new leader", all_alive_on_new_leader)

        # the master dies: broker 3 has the best offset but is outside the SyncStateSet; broker 2 must win
        await brokers[0].die()
        died_at = time.monotonic()

        async def new_master() -> bool:
            h, s = await replica_info(client, survivors)
            return h.get("masterBrokerId") == "2" and h.get("masterEpoch") == "2" and s.sync_state_set == {2}
        await wait_for("broker 2 elected master with epoch 2", new_master)

        async def notified_epoch_2() -> bool:
            return all(any(n.master_epoch == 2 and n.master_broker_id == 2 and n.master_address == brokers[1].addr
                           for n in b.notices) for b in brokers[1:])
        await wait_for("NOTIFY_BROKER_ROLE_CHANGED epoch 2 at brokers 2 and 3", notified_epoch_2)
        print(f"master connection closed -> new master notified: {(time.monotonic() - died_at) * 1000:.0f} ms")
        bodies = [s for n, s in zip(brokers[1].notices, brokers[1].notice_bodies, strict=True) if n.master_epoch == 2]
        assert bodies[-1] == SyncStateSet(frozenset({2}), 4)
        assert not any(n.master_epoch == 2 for n in brokers[0].notices)  # a dead member is not notified

        # every controller stops (SIGTERM) and starts again, the killed one included: the state comes back from
        # each node's Raft log, and a new leader answers with it
        codes = {n: p.terminate() for n, p in ctl.procs.items() if p.running}
        assert codes == {n: 0 for n in codes} and len(codes) == 2  # clean SIGTERM shutdown
        ctl.start()
        header, sss = await replica_info(client, addrs)
        assert (header["masterBrokerId"], header["masterEpoch"]) == ("2", "2")
        assert sss == SyncStateSet(frozenset({2}), 4)
        r = await to_leader(client, addrs, lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
        assert r.ext_fields["nextBrokerId"] == "4"
    finally:
        for b in brokers:
            await b.close()
        await client.close()


def test_controller_embedded_in_namesrv(tmp_path: Path) -> None:
    ns_port, ctl_port = free_port(), free_port()
    while ctl_port == ns_port:
        ctl_port = free_port()
    conf = write_conf(tmp_path / "namesrv.conf", {
        "listenPort": ns_port, "kvConfigPath": str(tmp_path / "kv.json"), "enableControllerInNamesrv": True,
        "controllerDLegerGroup": GROUP, "controllerDLegerPeers": f"n0-{LOCALHOST}:{ctl_port}",
        "controllerDLegerSelfId": "n0", "controllerStorePath": str(tmp_path / "ctl")})
    proc = ServerProcess.cli(["namesrv", "-c", str(conf)], tmp_path / "namesrv.log", ports=[ns_port, ctl_port],
                             name="namesrv+controller")

    async def scenario() -> None:
        client = RemotingClient(name="test-admin")
        ns = f"{LOCALHOST}:{ns_port}"
        try:
            await find_leader(client, [ns])  # answered on the name server's port
            m = await metadata(client, ns)
            assert m.controller_leader_address == f"{LOCALHOST}:{ctl_port}" and m.is_leader

            async def next_id() -> RemotingCommand | None:
                r = await client.invoke(ns, RemotingCommand.request(
                    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
                return r if r.code == ResponseCode.SUCCESS else None
            r = await wait_for("GET_NEXT_BROKER_ID on the name server port", next_id)
            assert isinstance(r, RemotingCommand) and r.ext_fields["nextBrokerId"] == "1"
            # the name server still answers its own requests
            r2 = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert r2.code == ResponseCode.SUCCESS
        finally:
            await client.close()

    try:
        proc.start()
        asyncio.run(asyncio.wait_for(scenario(), 60))
    except BaseException:
        print(proc.log_tail(40))
        raise
    finally:
        proc.close()


def test_single_controller_in_process(tmp_path: Path) -> None:
    """One in-process ControllerService: concurrent writes are serialized (one of two racing ALTERs is fenced),
    a master whose heartbeats stop (connection left open) is replaced after its timeout, config get/update with
    the black list, and the request-level error codes."""
    asyncio.run(asyncio.wait_for(_single(tmp_path), 60))


async def _single(tmp_path: Path) -> None:
    from orbitmq.controller import ControllerConfig, ControllerService

    port = free_port()
    addr = f"{LOCALHOST}:{port}"
    svc = ControllerService(ControllerConfig(
        controller_dleger_group=GROUP, controller_dleger_peers=f"n0-{addr}", controller_dleger_self_id="n0",
        controller_store_path=str(tmp_path / "store"), scan_not_active_broker_interval_ms=100))
    await svc.start()
    client = RemotingClient(name="test-admin")
    brokers = [FakeBroker(i) for i in (1, 2, 3)]
    beat_clients = [RemotingClient(name=f"beat-{i}") for i in (1, 2, 3)]
    beating = {1: True, 2: True, 3: True}

    async def beat_all() -> None:
        while True:
            for b, c in zip(brokers, beat_clients, strict=True):
                if beating[b.index] and b.broker_id is not None:
                    h = BrokerHeartbeatRequestHeader(CLUSTER, b.addr, NAME, b.broker_id, 1, 0, 0, 800)
                    await c.invoke_oneway(addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, h.to_ext(),
                                                                        oneway=True))
            await asyncio.sleep(0.1)

    beater = asyncio.get_running_loop().create_task(beat_all())
    try:
        for b in brokers:
            await b.start([addr])
            await register(client, [addr], b)

        async def all_alive() -> bool:
            return await alive_ids(client, addr) == {1, 2, 3}
        await wait_for("three brokers alive", all_alive)
        r = await to_leader(client, [addr], lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(CLUSTER, NAME, 1).to_ext()))
        assert r.code == ResponseCode.SUCCESS
        assert (await alter(client, [addr], {1, 2, 3}, 1, 1, 1)).code == ResponseCode.SUCCESS

        # two racing ALTERs built on the same epoch: exactly one wins, the other is fenced
        cmds = [RemotingCommand.request(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                                        AlterSyncStateSetRequestHeader(NAME, 1, 1).to_ext(),
                                        SyncStateSet(frozenset(s), 2).to_json()) for s in ({1, 2}, {1, 3})]
        codes = sorted(r.code for r in await asyncio.gather(*(client.invoke(addr, c, 6000) for c in cmds)))
        assert codes == [ResponseCode.SUCCESS, ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH]
        _, sss = await replica_info(client, [addr])
        assert sss.sync_state_set_epoch == 3 and len(sss.sync_state_set) == 2
        successor = max(sss.sync_state_set)

        # the master stops heartbeating but keeps its connection: expiry (800 ms) triggers the election
        beating[1] = False

        async def replaced() -> bool:
            h, s = await replica_info(client, [addr])
            return h.get("masterBrokerId") == str(successor) and h.get("masterEpoch") == "2"
        await wait_for("the master replaced after its heartbeat expired", replaced, 10)

        # config: get, update a tunable key, refuse black-listed ones
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONTROLLER_CONFIG))
        assert r.code == 0 and b"enableElectUncleanMaster=false\n" in r.body
        for text in (b"configBlackList=x\n", b"controllerStorePath=/tmp/x\n", b"controllerDLegerPeers=n0-a:1\n"):
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=text))
            assert r.code == ResponseCode.NO_PERMISSION, (text, r)
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG,
                                                              body=b"enableElectUncleanMaster=true\n"))
        assert r.code == 0 and svc.config.enable_elect_unclean_master

        # error codes: a two-way heartbeat without brokerId, a header missing a field, an unknown broker-set
        r = await client.invoke(addr, RemotingCommand.request(
            RequestCode.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerName": NAME, "brokerAddr": "x:1"}))
        assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, {}))
        assert r.code == ResponseCode.SYSTEM_ERROR and "brokerName" in (r.remark or "")
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                                              GetReplicaInfoRequestHeader("nope").to_ext()))
        assert r.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE))
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        beater.cancel()
        for b in brokers:
            await b.close()
        for c in (client, *beat_clients):
            await c.close()
        await svc.stop()
