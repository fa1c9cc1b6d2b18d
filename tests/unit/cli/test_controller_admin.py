"""Controller admin commands against scripted servers on 127.0.0.1: the requests they send (codes, header fields,
bodies), leader discovery and CONTROLLER_NOT_LEADER retries, the tables they print, and their one-line errors."""

from __future__ import annotations

import orjson

from orbitmq.cli.controller_admin import epoch_columns, leader_hint, split_list, sync_state_rows
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import BrokerData, ClusterInfo, KVTable
from orbitmq.protocol.bodies.controller import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntry,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    broker_names_from_body,
)
from orbitmq.testing.procs import free_port
from tests.unit.cli.fake_remoting import FakeServer, run

C = RequestCode


def meta(leader: FakeServer | None, me: FakeServer, group: str = "group1"):
    def reply(cmd: RemotingCommand) -> RemotingCommand:
        h = GetMetaDataResponseHeader(group, "n0" if leader else None, leader.addr if leader else None,
                                      leader is me, "n0:a;n1:b;n2:c")
        return cmd.response(ext_fields=h.to_ext())
    return reply


def replicas_body(cmd: RemotingCommand) -> RemotingCommand:
    names = broker_names_from_body(cmd.body)
    table = {"broker-a": ReplicasInfo(2, "10.0.0.2:10911", 3, 5,
                                      (ReplicaIdentity("broker-a", 1, "10.0.0.1:10911", True),
                                       ReplicaIdentity("broker-a", 2, "10.0.0.2:10911", True)),
                                      (ReplicaIdentity("broker-a", 3, "10.0.0.3:10911", False),))}
    return cmd.response(body=BrokerReplicasInfo({n: table[n] for n in names if n in table}).to_json())


def test_helpers() -> None:
    assert split_list(" a:1; b:2,c:3 ;") == ["a:1", "b:2", "c:3"]
    assert leader_hint("The controller is not in leader state (leader n1 127.0.0.1:9868)") == "127.0.0.1:9868"
    assert leader_hint("The controller is not in leader state") is None
    assert leader_hint(None) is None


def test_get_controller_metadata_one_row_per_controller(servers: list[FakeServer]) -> None:
    leader, follower, _ = servers
    leader.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(leader, leader)
    follower.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(leader, follower)
    r = run("getControllerMetaData", "-a", f"{leader.addr};{follower.addr}", "--json")
    assert r.exit_code == 0, r.output
    rows = orjson.loads(r.stdout)
    assert [(x["controller"], x["isLeader"], x["leaderAddress"], x["group"]) for x in rows] == [
        (leader.addr, True, leader.addr, "group1"), (follower.addr, False, leader.addr, "group1")]
    assert rows[0]["peers"] == "n0:a;n1:b;n2:c"
    r = run("getControllerMetaData", "-a", leader.addr)  # plain table
    assert r.exit_code == 0 and "isLeader" in r.stdout and leader.addr in r.stdout


def test_unreachable_controller_is_one_line_and_exit_1() -> None:
    dead = f"127.0.0.1:{free_port()}"
    for args in (["getControllerMetaData", "-a", dead], ["getSyncStateSet", "-a", dead, "-b", "broker-a"],
                 ["electMaster", "-a", dead, "-c", "C", "-bn", "broker-a", "-b", "1"],
                 ["getControllerConfig", "-a", dead], ["updateControllerConfig", "-a", dead, "-k", "x", "-v", "1"],
                 ["cleanBrokerMetadata", "-a", dead, "-bn", "broker-a", "-b", "1"]):
        r = run(*args)
        assert r.exit_code == 1, (args, r.output)
        assert r.stderr.startswith("orbitmq: error: ") and r.stderr.count("\n") == 1, (args, r.stderr)
        assert dead in r.stderr and "Traceback" not in r.output


def test_one_unreachable_address_among_several_is_a_note(servers: list[FakeServer]) -> None:
    leader = servers[0]
    leader.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(leader, leader)
    dead = f"127.0.0.1:{free_port()}"
    r = run("getControllerMetaData", "-a", f"{dead};{leader.addr}", "--json")
    assert r.exit_code == 0
    assert [x["controller"] for x in orjson.loads(r.stdout)] == [leader.addr]
    assert r.stderr.startswith(f"orbitmq: note: {dead}: ")


def test_get_sync_state_set_finds_the_leader_and_prints_replicas(servers: list[FakeServer]) -> None:
    leader, follower, _ = servers
    follower.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(leader, follower)
    leader.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(leader, leader)
    leader.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = replicas_body
    r = run("getSyncStateSet", "-a", follower.addr, "-b", "broker-a,broker-x")
    assert r.exit_code == 0, r.output
    assert C.CONTROLLER_GET_SYNC_STATE_DATA not in follower.codes()
    [req] = [c for c in leader.requests if c.code == C.CONTROLLER_GET_SYNC_STATE_DATA]
    assert broker_names_from_body(req.body) == ["broker-a", "broker-x"]
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["brokerName", "masterId", "masterAddress", "masterEpoch", "syncStateSetEpoch",
                                "brokerId", "address", "state", "alive"]
    assert lines[2].split() == ["broker-a", "2", "10.0.0.2:10911", "3", "5", "1", "10.0.0.1:10911", "in-sync",
                                "alive"]
    assert lines[4].split()[5:] == ["3", "10.0.0.3:10911", "not", "in-sync", "dead"]
    assert "broker-x" in lines[5] and "unknown to the controller" in lines[5]
    r = run("getSyncStateSet", "-a", follower.addr, "-b", "broker-a", "--json")
    info = BrokerReplicasInfo.from_json(r.stdout.encode())
    assert info.replicas_info_table["broker-a"].master_epoch == 3


def test_not_leader_answer_is_followed_to_the_hinted_leader(servers: list[FakeServer]) -> None:
    stale, real, _ = servers
    # `stale` still believes it leads (e.g. partitioned); its answer to the read names the real leader
    stale.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(stale, stale)
    stale.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = lambda cmd: cmd.response(
        ResponseCode.CONTROLLER_NOT_LEADER, f"The controller is not in leader state (leader n1 {real.addr})")
    real.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = replicas_body
    r = run("getSyncStateSet", "-a", stale.addr, "-b", "broker-a", "--json")
    assert r.exit_code == 0, r.output
    assert real.codes() == [C.CONTROLLER_GET_SYNC_STATE_DATA]


def test_not_leader_everywhere_gives_up_with_one_line(servers: list[FakeServer]) -> None:
    a = servers[0]
    a.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(a, a)
    a.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = lambda cmd: cmd.response(
        ResponseCode.CONTROLLER_NOT_LEADER, "The controller is not in leader state")
    r = run("getSyncStateSet", "-a", a.addr, "-b", "broker-a")
    assert r.exit_code == 1
    assert r.stderr.startswith("orbitmq: error: CONTROLLER_NOT_LEADER: ") and r.stderr.count("\n") == 1
    assert a.codes().count(C.CONTROLLER_GET_SYNC_STATE_DATA) == 4  # bounded: len(-a) + 3 attempts


def test_no_leader_known(servers: list[FakeServer]) -> None:
    a = servers[0]
    a.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(None, a)
    r = run("getSyncStateSet", "-a", a.addr, "-b", "broker-a")
    assert r.exit_code == 1 and "no controller leader known" in r.stderr


def test_get_sync_state_set_by_cluster_asks_the_name_server(servers: list[FakeServer]) -> None:
    ctrl, ns, _ = servers
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)
    ctrl.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = replicas_body
    info = ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {0: "x:1"}),
                        "broker-b": BrokerData("C1", "broker-b", {0: "y:1"})}, {"C1": ["broker-b", "broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    r = run("getSyncStateSet", "-a", ctrl.addr, "-c", "C1", "-n", ns.addr)
    assert r.exit_code == 0, r.output
    [req] = [c for c in ctrl.requests if c.code == C.CONTROLLER_GET_SYNC_STATE_DATA]
    assert broker_names_from_body(req.body) == ["broker-a", "broker-b"]
    r = run("getSyncStateSet", "-a", ctrl.addr, "-c", "nope", "-n", ns.addr)
    assert r.exit_code == 1 and "cluster 'nope' not found (known: C1)" in r.stderr
    assert run("getSyncStateSet", "-a", ctrl.addr).exit_code == 2  # usage: -b or -c


def test_elect_master_sends_designate_elect_with_mqadmin_options(servers: list[FakeServer]) -> None:
    ctrl = servers[0]
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)

    def elect(cmd: RemotingCommand) -> RemotingCommand:
        h = ElectMasterResponseHeader(2, "10.0.0.2:10911", 4, 6)
        body = ElectMasterResponseBody(BrokerMemberGroup("C1", "broker-a", {1: "10.0.0.1:10911",
                                                                            2: "10.0.0.2:10911"}), frozenset({2}))
        return cmd.response(ext_fields=h.to_ext(), body=body.to_json())

    ctrl.replies[C.CONTROLLER_ELECT_MASTER] = elect
    r = run("electMaster", "-a", ctrl.addr, "-c", "C1", "-bn", "broker-a", "-b", "2", "--json")
    assert r.exit_code == 0, r.output
    [req] = [c for c in ctrl.requests if c.code == C.CONTROLLER_ELECT_MASTER]
    ext = req.ext_fields
    assert (ext["clusterName"], ext["brokerName"], ext["brokerId"], ext["designateElect"]) == \
        ("C1", "broker-a", "2", "true")
    assert int(ext["invokeTime"]) > 1_600_000_000_000
    got = orjson.loads(r.stdout)
    assert got == {"result": "elected", "masterBrokerId": 2, "masterAddress": "10.0.0.2:10911", "masterEpoch": 4,
                   "syncStateSetEpoch": 6, "syncStateSet": "2",
                   "members": "1=10.0.0.1:10911 2=10.0.0.2:10911"}


def test_elect_master_errors(servers: list[FakeServer]) -> None:
    ctrl = servers[0]
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)
    ctrl.replies[C.CONTROLLER_ELECT_MASTER] = lambda cmd: cmd.response(
        ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master\nbroker 3 is not alive")
    r = run("electMaster", "-a", ctrl.addr, "-c", "C1", "-bn", "broker-a", "-b", "3")
    assert r.exit_code == 1
    assert r.stderr == ("orbitmq: error: CONTROLLER_ELECT_MASTER_FAILED: Failed to elect a new master broker 3 is "
                        "not alive\n")
    ctrl.replies[C.CONTROLLER_ELECT_MASTER] = lambda cmd: cmd.response(
        ResponseCode.CONTROLLER_MASTER_STILL_EXIST, "", ext_fields=ElectMasterResponseHeader(3, "m:1", 2, 2).to_ext())
    r = run("electMaster", "-a", ctrl.addr, "-c", "C1", "-bn", "broker-a", "-b", "3", "--json")
    assert r.exit_code == 0 and orjson.loads(r.stdout)["result"] == "already master"
    assert run("electMaster", "-a", ctrl.addr, "-c", "C1", "-bn", "broker-a").exit_code == 2  # -b required


def test_get_broker_epoch_asks_every_member_found_on_the_name_server(servers: list[FakeServer]) -> None:
    ns, master, slave = servers
    info = ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {0: master.addr, 2: slave.addr})},
                       {"C1": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    master.replies[C.GET_BROKER_EPOCH_CACHE] = lambda cmd: cmd.response(body=EpochEntryCache(
        "C1", "broker-a", 1, (EpochEntry(1, 0, 500), EpochEntry(2, 500)), 900).to_json())
    slave.replies[C.GET_BROKER_EPOCH_CACHE] = lambda cmd: cmd.response(body=EpochEntryCache(
        "C1", "broker-a", 2, (EpochEntry(1, 0, 500), EpochEntry(2, 500)), 700).to_json())
    r = run("getBrokerEpoch", "-b", "broker-a", "-n", ns.addr, "--json")
    assert r.exit_code == 0, r.output
    rows = [(x["brokerId"], x["address"], x["epoch"], x["startOffset"], x["endOffset"], x["maxOffset"])
            for x in orjson.loads(r.stdout)]
    assert rows == [(0, master.addr, 1, 0, 500, 900), (0, master.addr, 2, 500, None, 900),
                    (2, slave.addr, 1, 0, 500, 700), (2, slave.addr, 2, 500, None, 700)]
    r = run("getBrokerEpoch", "-c", "C1", "-n", ns.addr)
    assert r.exit_code == 0 and r.stdout.count("broker-a") == 4
    r = run("getBrokerEpoch", "-b", "broker-z", "-n", ns.addr)
    assert r.exit_code == 1 and "broker 'broker-z' not found on the name server" in r.stderr


def test_get_broker_epoch_member_down_is_a_note_all_down_an_error(servers: list[FakeServer]) -> None:
    ns, master, _ = servers
    dead = f"127.0.0.1:{free_port()}"
    info = ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {0: master.addr, 1: dead})}, {"C1": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    master.replies[C.GET_BROKER_EPOCH_CACHE] = lambda cmd: cmd.response(body=EpochEntryCache().to_json())
    r = run("getBrokerEpoch", "-b", "broker-a", "-n", ns.addr, "--json")
    assert r.exit_code == 0 and len(orjson.loads(r.stdout)) == 1 and r.stderr.startswith(f"orbitmq: note: {dead}")
    # a broker that does not answer 1007 (not in controller mode): its error code, one line
    master.replies.pop(C.GET_BROKER_EPOCH_CACHE)
    r = run("getBrokerEpoch", "-b", "broker-a", "-n", ns.addr)
    assert r.exit_code == 1 and r.stderr.startswith("orbitmq: error: ") and r.stderr.count("\n") == 1


def test_controller_config_get_and_update(servers: list[FakeServer]) -> None:
    a, b, _ = servers
    for s in (a, b):
        s.replies[C.GET_CONTROLLER_CONFIG] = lambda cmd, s=s: cmd.response(
            body=f"controllerDLegerGroup=g1\nenableElectUncleanMaster=false\nself={s.addr}\n".encode())
        s.replies[C.UPDATE_CONTROLLER_CONFIG] = lambda cmd: cmd.response()
    r = run("getControllerConfig", "-a", f"{a.addr};{b.addr}", "--json")
    assert r.exit_code == 0, r.output
    got = orjson.loads(r.stdout)
    assert got[a.addr]["enableElectUncleanMaster"] == "false" and got[b.addr]["self"] == b.addr
    r = run("updateControllerConfig", "-a", f"{a.addr};{b.addr}", "-k", "enableElectUncleanMaster", "-v", "true")
    assert r.exit_code == 0, r.output
    for s in (a, b):
        [req] = [c for c in s.requests if c.code == C.UPDATE_CONTROLLER_CONFIG]
        assert req.body == b"enableElectUncleanMaster=true\n"
    b.replies[C.UPDATE_CONTROLLER_CONFIG] = lambda cmd: cmd.response(
        ResponseCode.NO_PERMISSION, "Can not update config in black list: ['controllerDLegerGroup']")
    r = run("updateControllerConfig", "-a", f"{a.addr};{b.addr}", "-k", "controllerDLegerGroup", "-v", "x")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"orbitmq: error: {b.addr}: NO_PERMISSION: Can not update config in black list")
    assert f"(updated: {a.addr})" in r.stderr
    assert run("updateControllerConfig", "-a", a.addr, "-k", "a=b", "-v", "1").exit_code == 2


def test_clean_broker_metadata(servers: list[FakeServer]) -> None:
    ctrl = servers[0]
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)
    ctrl.replies[C.CLEAN_BROKER_DATA] = lambda cmd: cmd.response()
    r = run("cleanBrokerMetadata", "-a", ctrl.addr, "-c", "C1", "-bn", "broker-a", "-b", "2;1", "-l")
    assert r.exit_code == 0, r.output
    [req] = [c for c in ctrl.requests if c.code == C.CLEAN_BROKER_DATA]
    ext = req.ext_fields
    assert (ext["clusterName"], ext["brokerName"], ext["brokerControllerIdsToClean"], ext["isCleanLivingBroker"]) \
        == ("C1", "broker-a", "1;2", "true")
    r = run("cleanBrokerMetadata", "-a", ctrl.addr, "-bn", "broker-b")
    assert r.exit_code == 0 and "the whole broker-set" in r.stdout
    req = [c for c in ctrl.requests if c.code == C.CLEAN_BROKER_DATA][-1]
    assert "brokerControllerIdsToClean" not in req.ext_fields and req.ext_fields["isCleanLivingBroker"] == "false"
    ctrl.replies[C.CLEAN_BROKER_DATA] = lambda cmd: cmd.response(
        ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "broker 1 is still alive")
    r = run("cleanBrokerMetadata", "-a", ctrl.addr, "-bn", "broker-a", "-b", "1")
    assert r.exit_code == 1
    assert r.stderr == "orbitmq: error: CONTROLLER_INVALID_CLEAN_BROKER_METADATA: broker 1 is still alive\n"
    assert run("cleanBrokerMetadata", "-a", ctrl.addr, "-bn", "broker-a", "-b", "1;x").exit_code == 2


def test_sync_state_rows_for_a_set_without_replicas() -> None:
    info = BrokerReplicasInfo({"b": ReplicasInfo(None, None, 1, 1)})
    assert sync_state_rows(info, ["b"]) == [["b", None, None, 1, 1, None, None, "no replica", None]]


def test_cluster_list_epoch_columns() -> None:
    members = [("C", "broker-a", 0, "m:1"), ("C", "broker-a", 2, "s:1"), ("C", "broker-a", 3, "t:1"),
               ("C", "broker-b", 0, "x:1")]
    infos = [{"masterEpoch": "4", "syncStateSet": "[1, 2]"}, {"masterEpoch": "4"}, {}, {"brokerRole": "SYNC_MASTER"}]
    assert epoch_columns(members, infos) == (["epoch", "inSync"], [["4", "yes"], ["4", "yes"], ["-", "no"],
                                                                  ["-", "-"]])
    # brokers reporting only their epoch (classic HA): the epoch column alone
    assert epoch_columns(members, [{"masterEpoch": "2"}, {"masterEpoch": "2"}, {}, {}]) == \
        (["epoch"], [["2"], ["2"], ["-"], ["-"]])
    assert epoch_columns(members, [{}, {}, {}, {"brokerRole": "SLAVE"}]) == ([], [])  # neither key: no columns


def test_cluster_list_shows_epoch_and_in_sync_from_runtime_info(servers: list[FakeServer]) -> None:
    ns, master, slave = servers
    info = ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {0: master.addr, 2: slave.addr})},
                       {"C1": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    runtime = {master: {"brokerRole": "SYNC_MASTER", "masterEpoch": "3", "syncStateSet": "1,2"},
               slave: {"brokerRole": "SLAVE", "masterEpoch": "3"}}
    for s in (master, slave):
        s.replies[C.GET_BROKER_RUNTIME_INFO] = lambda cmd, s=s: cmd.response(body=KVTable(runtime[s]).to_json())
    r = run("clusterList", "-n", ns.addr, "--json")
    assert r.exit_code == 0, r.output
    assert [(x["BID"], x["role"], x["epoch"], x["inSync"]) for x in orjson.loads(r.stdout)] == [
        (0, "SYNC_MASTER", "3", "yes"), (2, "SLAVE", "3", "yes")]
    runtime[master]["syncStateSet"] = "[1]"
    rows = orjson.loads(run("clusterList", "-n", ns.addr, "--json").stdout)
    assert [x["inSync"] for x in rows] == ["yes", "no"]
    for s in (master, slave):
        del runtime[s]["masterEpoch"]
    del runtime[master]["syncStateSet"]
    rows = orjson.loads(run("clusterList", "-n", ns.addr, "--json").stdout)
    assert "epoch" not in rows[0] and "inSync" not in rows[0]


def test_interval_prints_again_until_count(servers: list[FakeServer]) -> None:
    ctrl, ns, broker = servers
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)
    ctrl.replies[C.CONTROLLER_GET_SYNC_STATE_DATA] = replicas_body
    r = run("getSyncStateSet", "-a", ctrl.addr, "-b", "broker-a", "-i", "0.05", "--count", "3")
    assert r.exit_code == 0, r.output
    assert r.stdout.count("# SyncStateSet at ") == 3
    assert ctrl.codes().count(C.CONTROLLER_GET_SYNC_STATE_DATA) == 3
    info = ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {0: broker.addr})}, {"C1": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    broker.replies[C.GET_BROKER_EPOCH_CACHE] = lambda cmd: cmd.response(body=EpochEntryCache().to_json())
    r = run("getBrokerEpoch", "-b", "broker-a", "-n", ns.addr, "-i", "0.05", "--count", "2")
    assert r.exit_code == 0 and r.stdout.count("# broker epochs at ") == 2
    assert broker.codes().count(C.GET_BROKER_EPOCH_CACHE) == 2
    assert run("getSyncStateSet", "-a", ctrl.addr, "-b", "broker-a", "-i", "0").exit_code == 2


def test_mqadmin_long_option_names(servers: list[FakeServer]) -> None:
    ctrl = servers[0]
    ctrl.replies[C.CONTROLLER_GET_METADATA_INFO] = meta(ctrl, ctrl)
    ctrl.replies[C.CLEAN_BROKER_DATA] = lambda cmd: cmd.response()
    ctrl.replies[C.CONTROLLER_ELECT_MASTER] = lambda cmd: cmd.response(
        ext_fields=ElectMasterResponseHeader(1, "m:1", 2, 2).to_ext())
    r = run("cleanBrokerMetadata", "--controllerAddress", ctrl.addr, "--clusterName", "C1", "--brokerName",
            "broker-a", "--brokerControllerIdsToClean", "3", "--cleanLivingBroker")
    assert r.exit_code == 0, r.output
    ext = [c for c in ctrl.requests if c.code == C.CLEAN_BROKER_DATA][0].ext_fields
    assert (ext["clusterName"], ext["brokerControllerIdsToClean"], ext["isCleanLivingBroker"]) == ("C1", "3", "true")
    r = run("electMaster", "--controllerAddress", ctrl.addr, "--clusterName", "C1", "--brokerName", "broker-a",
            "--brokerId", "1")
    assert r.exit_code == 0, r.output
