"""Admin commands against scripted servers: consumerProgress names the broker groups it could not ask,
clusterList shows lease-mode columns, brokerStatus picks the only broker (and refuses to guess among several)."""

from __future__ import annotations

import orjson

from orbitmq.cli.admin import LEASE_COLUMNS, lease_columns
from orbitmq.model import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumeStats,
    KVTable,
    OffsetWrapper,
    QueueData,
    TopicRouteData,
)
from orbitmq.testing.procs import free_port
from tests.unit.cli.fake_remoting import FakeServer, run

C = RequestCode


def stats_reply(broker: str, broker_offset: int, consumer_offset: int):
    def reply(cmd: RemotingCommand) -> RemotingCommand:
        table = {MessageQueue("T", broker, 0): OffsetWrapper(broker_offset, consumer_offset, 0)}
        return cmd.response(body=ConsumeStats(table, 1.5).to_json())
    return reply


def not_online(cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, "not online")


def test_consumer_progress_names_unreachable_broker_and_reads_a_masterless_group_from_its_slave(
        servers: list[FakeServer]) -> None:
    ns, broker_a, slave_c = servers
    dead = f"127.0.0.1:{free_port()}"
    route = TopicRouteData([QueueData(n, 1, 1) for n in ("broker-a", "broker-b", "broker-c")],
                           [BrokerData("C", "broker-a", {0: broker_a.addr}), BrokerData("C", "broker-b", {0: dead}),
                            BrokerData("C", "broker-c", {1: slave_c.addr})])
    ns.replies[C.GET_ROUTEINFO_BY_TOPIC] = lambda cmd: cmd.response(body=route.to_json())
    for srv, name, (bo, co) in ((broker_a, "broker-a", (10, 4)), (slave_c, "broker-c", (7, 7))):
        srv.replies[C.GET_CONSUME_STATS] = stats_reply(name, bo, co)
        srv.replies[C.GET_CONSUMER_CONNECTION_LIST] = not_online

    r = run("consumerProgress", "-g", "G", "-t", "T", "-n", ns.addr, "--json")
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.stdout)
    assert [(row["broker"], row["lag"]) for row in out["rows"]] == [("broker-a", 6), ("broker-c", 0)]
    assert out["total"]["topic"] == "total (without broker-b)" and out["total"]["lag"] == 6
    problems = {p["broker"]: p for p in out["problems"]}
    assert problems["broker-b"]["addr"] == dead and "unreachable" in problems["broker-b"]["error"]
    assert "no master registered" in problems["broker-c"]["error"]

    r = run("consumerProgress", "-g", "G", "-t", "T", "-n", ns.addr)  # table: one line per problem
    assert r.exit_code == 0, r.output
    assert f"UNREACHABLE: broker broker-b {dead}: unreachable" in r.stdout
    assert "note: broker broker-c: no master registered" in r.stdout


def test_consumer_progress_with_every_broker_unreachable_is_one_line_exit_1(servers: list[FakeServer]) -> None:
    ns = servers[0]
    dead = f"127.0.0.1:{free_port()}"
    route = TopicRouteData([QueueData("broker-a", 1, 1)], [BrokerData("C", "broker-a", {0: dead})])
    ns.replies[C.GET_ROUTEINFO_BY_TOPIC] = lambda cmd: cmd.response(body=route.to_json())
    r = run("consumerProgress", "-g", "G", "-t", "T", "-n", ns.addr)
    assert r.exit_code == 1 and r.stderr.startswith("orbitmq: error: ") and dead in r.stderr, r.output
    assert r.stderr.count("\n") == 1


def runtime(info: dict[str, str]):
    return lambda cmd: cmd.response(body=KVTable(info).to_json())


def test_cluster_list_shows_lease_columns_when_reported(servers: list[FakeServer]) -> None:
    ns, a, b = servers
    info = ClusterInfo({"broker-a": BrokerData("C", "broker-a", {0: a.addr, 1: b.addr})}, {"C": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=info.to_json())
    a.replies[C.GET_BROKER_RUNTIME_INFO] = runtime({"brokerRole": "ASYNC_MASTER", "leaseState": "HELD",
                                                   "leaseEpoch": "3", "leaseRemainingMs": "2500",
                                                   "leaseMaster": a.addr})
    b.replies[C.GET_BROKER_RUNTIME_INFO] = runtime({"brokerRole": "SLAVE"})
    r = run("clusterList", "-n", ns.addr, "--json")
    assert r.exit_code == 0, r.output
    rows = orjson.loads(r.stdout)
    assert [(x["leaseState"], x["leaseEpoch"], x["leaseRemainingMs"], x["leaseMaster"]) for x in rows] == [
        ("HELD", "3", "2500", a.addr), ("-", "-", "-", "-")]
    b.replies[C.GET_BROKER_RUNTIME_INFO] = runtime({"brokerRole": "SLAVE"})
    a.replies[C.GET_BROKER_RUNTIME_INFO] = runtime({"brokerRole": "ASYNC_MASTER"})
    rows = orjson.loads(run("clusterList", "-n", ns.addr, "--json").stdout)
    assert not any(c in rows[0] for c in LEASE_COLUMNS)  # classic clusters keep their columns


def test_lease_columns_keep_only_reported_keys() -> None:
    assert lease_columns([{}, {"x": "1"}]) == ([], [])
    assert lease_columns([{"leaseEpoch": "2"}, {}]) == (["leaseEpoch"], [["2"], ["-"]])


def test_broker_status_defaults_to_the_only_broker_and_refuses_to_guess(servers: list[FakeServer]) -> None:
    ns, a, b = servers
    one = ClusterInfo({"broker-a": BrokerData("C", "broker-a", {0: a.addr})}, {"C": ["broker-a"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=one.to_json())
    a.replies[C.GET_BROKER_RUNTIME_INFO] = runtime({"brokerVersionDesc": "V4_9_7"})
    r = run("brokerStatus", "-n", ns.addr, "--json")
    assert r.exit_code == 0 and orjson.loads(r.stdout) == {"brokerVersionDesc": "V4_9_7"}, r.output
    two = ClusterInfo({"broker-a": BrokerData("C", "broker-a", {0: a.addr}),
                       "broker-b": BrokerData("C", "broker-b", {0: b.addr})}, {"C": ["broker-a", "broker-b"]})
    ns.replies[C.GET_BROKER_CLUSTER_INFO] = lambda cmd: cmd.response(body=two.to_json())
    r = run("brokerStatus", "-n", ns.addr)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
    assert "2 brokers registered" in r.stderr and a.addr in r.stderr and b.addr in r.stderr
