"""The controller admin commands as an operator runs them (`orbitmq <command>` subprocesses) against three real
`orbitmq controller` processes, a real name server and three fake controller-mode brokers (RIP-44 register flow,
heartbeats, 1007 answers): metadata, SyncStateSet, a designated election, config get/update, cleaning a dead
replica, getBrokerEpoch through the name server, and `-a a;b;c` still working after kill -9 of the leader.
Every wait is for a condition, bounded by a deadline."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from orbitmq.base.errors import RemotingError
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    DataVersion,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
    TopicConfigSerializeWrapper,
)
from orbitmq.protocol.bodies.controller import EpochEntry, EpochEntryCache
from orbitmq.remoting import RemotingClient, RemotingServer
from orbitmq.testing.procs import LOCALHOST, ServerProcess, free_port, write_conf, write_namesrv_conf

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CLUSTER, NAME = "AdminCluster", "broker-a"


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except (RemotingError, OSError, AssertionError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "orbitmq.cli.main", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def cli_json(*args: str) -> Any:
    code, out, err = await cli(*args, "--json")
    assert code == 0, (args, err)
    return orjson.loads(out)


class FakeBroker:
    """A controller-mode broker as the controller and the admin tools see it."""

    def __init__(self, index: int) -> None:
        self.server = RemotingServer(self._handle, LOCALHOST, 0, name=f"fake-broker-{index}")
        self.client = RemotingClient(name=f"fake-broker-{index}")
        self.broker_id = -1
        self.max_offset = 1000 * index
        self.controllers: list[str] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.server.port}"

    def _handle(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_BROKER_EPOCH_CACHE:
            epochs = (EpochEntry(1, 0, 500), EpochEntry(2, 500))
            return cmd.response(body=EpochEntryCache(CLUSTER, NAME, self.broker_id, epochs, self.max_offset).to_json())
        return cmd.response()  # NOTIFY_BROKER_ROLE_CHANGED and anything else

    async def start(self, controllers: list[str]) -> None:
        self.controllers = controllers
        await self.server.start()

    def beat(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            h = BrokerHeartbeatRequestHeader(CLUSTER, self.addr, NAME, self.broker_id, 1, self.max_offset,
                                             self.max_offset, 3000, 0)
            for c in self.controllers:
                try:
                    await self.client.invoke_oneway(c, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                                                               h.to_ext(), oneway=True))
                except (RemotingError, OSError):
                    pass
            await asyncio.sleep(0.3)

    async def die(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for c in self.controllers:
            self.client.close_connection(c)

    async def register_namesrv(self, namesrv: str, broker_id: int) -> None:
        wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", read_queue_nums=1, write_queue_nums=1)},
                                              DataVersion(1, 1, 2))
        ext = {"brokerName": NAME, "brokerAddr": self.addr, "clusterName": CLUSTER, "brokerId": str(broker_id),
               "haServerAddr": self.addr, "compressed": "false"}
        resp = await self.client.invoke(namesrv, RemotingCommand.request(
            RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper, []).encode()), 3000)
        assert resp.code == ResponseCode.SUCCESS

    async def close(self) -> None:
        await self.die()
        await self.client.close()
        await self.server.stop()


async def to_leader(client: RemotingClient, addrs: list[str], make: Callable[[], RemotingCommand]) -> RemotingCommand:
    async def attempt() -> RemotingCommand | None:
        for a in addrs:
            try:
                resp = await client.invoke(a, make(), 6000)
            except (RemotingError, OSError):
                continue
            if resp.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return resp
        return None

    return await wait_for("a controller leader to answer", attempt)


async def register(client: RemotingClient, addrs: list[str], b: FakeBroker) -> None:
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(CLUSTER, NAME).to_ext()))
    bid = int(r.ext_fields["nextBrokerId"])
    check = f"{b.addr};{int(time.time() * 1000)}"
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(CLUSTER, NAME, bid, check).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    r = await to_leader(client, addrs, lambda: RemotingCommand.request(
        RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, bid,
                                                                                        b.addr).to_ext()))
    assert r.code == ResponseCode.SUCCESS, r
    b.broker_id = bid


class Cluster:
    def __init__(self, root: Path) -> None:
        ports: list[int] = []
        while len(ports) < 4:
            p = free_port()
            if p not in ports:
                ports.append(p)
        self.addrs = [f"{LOCALHOST}:{p}" for p in ports[:3]]
        peers = ";".join(f"n{i}-{a}" for i, a in enumerate(self.addrs))
        self.procs: list[ServerProcess] = []
        for i, port in enumerate(ports[:3]):
            d = root / f"n{i}"
            conf = write_conf(d / "controller.conf", {
                "controllerDLegerGroup": "adminGroup", "controllerDLegerPeers": peers,
                "controllerDLegerSelfId": f"n{i}", "controllerStorePath": str(d / "store"),
                "scanNotActiveBrokerInterval": 500, "scanInactiveMasterInterval": 1000})
            self.procs.append(ServerProcess.cli(["controller", "-c", str(conf)], d / "controller.log", ports=[port],
                                                name=f"controller-n{i}"))
        self.namesrv = f"{LOCALHOST}:{ports[3]}"
        conf = write_namesrv_conf(root / "ns", ports[3])
        self.procs.append(ServerProcess.cli(["namesrv", "-c", str(conf)], root / "ns" / "namesrv.log",
                                            ports=[ports[3]], name="namesrv"))

    def start(self) -> None:
        for p in self.procs:
            p.start(wait=False)
        for p in self.procs:
            p.wait_ready()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(25)}" for p in self.procs)

    def close(self) -> None:
        for p in self.procs:
            p.close()


def test_controller_admin_commands(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    try:
        c.start()
        asyncio.run(asyncio.wait_for(_scenario(c), 160))
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.close()


async def _leader_row(all_addrs: str) -> dict[str, Any] | None:
    rows = await cli_json("getControllerMetaData", "-a", all_addrs)
    leaders = [r for r in rows if r["isLeader"]]
    return leaders[0] if len(leaders) == 1 and len(rows) == 3 else None


async def _scenario(c: Cluster) -> None:
    all_addrs = ";".join(c.addrs)
    client = RemotingClient(name="test")
    brokers = [FakeBroker(i) for i in (1, 2, 3)]
    try:
        leader = (await wait_for("one leader in getControllerMetaData", lambda: _leader_row(all_addrs)))
        assert leader["controller"] in c.addrs and leader["group"] == "adminGroup"
        assert leader["peers"] == ";".join(f"n{i}:{a}" for i, a in enumerate(c.addrs))
        for b in brokers:
            await b.start(c.addrs)
            await register(client, c.addrs, b)
            b.beat()
        assert [b.broker_id for b in brokers] == [1, 2, 3]
        r = await to_leader(client, c.addrs, lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(CLUSTER, NAME, 1).to_ext()))
        assert r.code == ResponseCode.SUCCESS, r
        epoch = int(r.ext_fields["masterEpoch"])
        r = await to_leader(client, c.addrs, lambda: RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, AlterSyncStateSetRequestHeader(NAME, 1, epoch).to_ext(),
            SyncStateSet(frozenset({1, 2, 3}), int(r.ext_fields["syncStateSetEpoch"])).to_json()))
        assert r.code == ResponseCode.SUCCESS, r

        async def all_alive_in_sync() -> Any:
            info = (await cli_json("getSyncStateSet", "-a", all_addrs, "-b", NAME))["replicasInfoTable"][NAME]
            ok = {(x["brokerId"], x["alive"]) for x in info["inSyncReplicas"]} == {(1, True), (2, True), (3, True)}
            return info if ok else None

        info = await wait_for("replicas 1-3 alive and in sync", all_alive_in_sync)
        assert (info["masterBrokerId"], info["masterAddress"], info["masterEpoch"]) == (1, brokers[0].addr, epoch)
        code, out, _ = await cli("getSyncStateSet", "-a", c.addrs[0], "-b", NAME)  # the table, from any node
        assert code == 0 and out.count(NAME) == 3 and "in-sync" in out

        # designated election of replica 2
        got = await cli_json("electMaster", "-a", all_addrs, "-c", CLUSTER, "-bn", NAME, "-b", "2")
        assert (got["result"], got["masterBrokerId"], got["masterAddress"], got["masterEpoch"]) == \
            ("elected", 2, brokers[1].addr, epoch + 1)
        code, _, err = await cli("electMaster", "-a", all_addrs, "-c", CLUSTER, "-bn", NAME, "-b", "9")
        assert code == 1 and err.startswith("orbitmq: error: CONTROLLER_") and err.count("\n") == 1, err

        # runtime config on every node
        code, out, err = await cli("updateControllerConfig", "-a", all_addrs, "-k", "enableElectUncleanMaster",
                                   "-v", "true")
        assert code == 0, err
        conf = await cli_json("getControllerConfig", "-a", all_addrs)
        assert {a: conf[a]["enableElectUncleanMaster"] for a in c.addrs} == {a: "true" for a in c.addrs}
        code, _, err = await cli("updateControllerConfig", "-a", all_addrs, "-k", "controllerDLegerGroup", "-v", "x")
        assert code == 1 and "NO_PERMISSION" in err

        # clean a dead replica: refused while it lives, accepted once its heartbeats stop
        code, _, err = await cli("cleanBrokerMetadata", "-a", all_addrs, "-c", CLUSTER, "-bn", NAME, "-b", "3")
        assert code == 1 and "CONTROLLER_INVALID_CLEAN_BROKER_METADATA" in err, err
        await brokers[2].die()

        async def replica_3_dead() -> bool:
            info = (await cli_json("getSyncStateSet", "-a", all_addrs, "-b", NAME))["replicasInfoTable"][NAME]
            return any(x["brokerId"] == 3 and not x["alive"]
                       for x in info["inSyncReplicas"] + info["notInSyncReplicas"])

        await wait_for("replica 3 reported dead", replica_3_dead)
        code, out, err = await cli("cleanBrokerMetadata", "-a", all_addrs, "-c", CLUSTER, "-bn", NAME, "-b", "3")
        assert code == 0, err
        info = (await cli_json("getSyncStateSet", "-a", all_addrs, "-b", NAME))["replicasInfoTable"][NAME]
        assert {x["brokerId"] for x in info["inSyncReplicas"] + info["notInSyncReplicas"]} == {1, 2}

        # getBrokerEpoch: the members come from the name server, the epochs from each broker
        await brokers[1].register_namesrv(c.namesrv, 0)
        await brokers[0].register_namesrv(c.namesrv, 1)
        rows = await cli_json("getBrokerEpoch", "-b", NAME, "-n", c.namesrv)
        assert [(r["brokerId"], r["address"], r["epoch"], r["endOffset"]) for r in rows] == [
            (0, brokers[1].addr, 1, 500), (0, brokers[1].addr, 2, None),
            (1, brokers[0].addr, 1, 500), (1, brokers[0].addr, 2, None)]

        # kill -9 of the controller leader: `-a a;b;c` finds the new one
        old = c.addrs.index(str((await _leader_row(all_addrs) or {}).get("controller")))
        c.procs[old].kill9()

        async def new_leader_answers() -> Any:
            code, out, _ = await cli("getSyncStateSet", "-a", all_addrs, "-b", NAME, "--json")
            return orjson.loads(out) if code == 0 else None

        info = (await wait_for("a new controller leader answering", new_leader_answers))["replicasInfoTable"][NAME]
        assert info["masterBrokerId"] == 2
        code, out, err = await cli("getControllerMetaData", "-a", all_addrs)
        assert code == 0 and f"orbitmq: note: {c.addrs[old]}: " in err
    finally:
        for b in brokers:
            await b.close()
        await client.close()
