"""The daily mqadmin commands and the CLI's consistency rules against a real standalone server: every new
command in table and --json form, queryMsgById with both id kinds, consume's Ctrl-C message, fast one-line
failures when the name server is unreachable or a topic has no route, process titles, and consumerProgress with a
hung second broker (the last test: it adds that broker to the cluster)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from orbitmq.cli.main import main
from orbitmq.client import Message, Producer
from orbitmq.testing.procs import REPO_ROOT, free_port, start_broker
from tests.integration.test_cli import (  # noqa: F401 - standalone is a fixture (this module gets its own server)
    assert_one_line_error,
    cli,
    standalone,
    wait_for_banner,
    wait_for_route,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest):
    proc, ns, broker, _ = request.getfixturevalue("standalone")
    wait_for_banner(proc)
    assert cli("updateTopic", "-t", "AdmT", "-c", "DefaultCluster", "-r", "2", "-w", "2", namesrv=ns).returncode == 0
    wait_for_route("AdmT", ns, 2)
    return proc, ns, broker


def js(*args: str, namesrv: str) -> object:
    """`orbitmq ARGS --json -n NAMESRV` in this process (no interpreter start per command), parsed."""
    res = CliRunner().invoke(main, [*args, "--json", "-n", namesrv])
    assert res.exit_code == 0, (args, res.stdout, res.stderr)
    return orjson.loads(res.stdout)


def js_soon(*args: str, namesrv: str, within_s: float = 10.0) -> object:
    """js() retried until it succeeds: index lookups see a message once the broker's dispatch indexed it."""
    deadline = time.monotonic() + within_s
    while True:
        res = CliRunner().invoke(main, [*args, "--json", "-n", namesrv])
        if res.exit_code == 0:
            return orjson.loads(res.stdout)
        assert time.monotonic() < deadline, (args, res.stdout, res.stderr)
        time.sleep(0.1)


def test_process_title_names_role_and_broker(server) -> None:
    proc, _, broker = server
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert cmdline.startswith(f"orbitmq standalone broker-a/0 :{broker.split(':')[1]}"), cmdline


def test_produce_prints_both_ids_and_query_by_id_takes_either(server) -> None:
    _, ns, broker = server
    res = cli("produce", "-t", "AdmT", "--tag", "TagQ", "--body", "q{i}", "-c", "2", "-n", ns)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and all("msgId=" in line and "offsetMsgId=" in line for line in lines), lines
    fields = dict(kv.split("=", 1) for kv in lines[1].split()[1:])
    uniq, offset_id = fields["msgId"], fields["offsetMsgId"]
    for msg_id in (uniq, offset_id):  # no -t: a unique id is searched in every topic's index
        found = js_soon("queryMsgById", "-i", msg_id, namesrv=ns)
        assert (found["msgId"], found["offsetMsgId"], found["body"]) == (uniq, offset_id, "q1")
    assert js("queryMsgById", "-i", uniq, "-t", "AdmT", namesrv=ns)["storeHost"] == broker
    assert js_soon("queryMsgByUniqueKey", "-i", uniq, "-t", "AdmT", namesrv=ns)["body"] == "q1"
    assert_one_line_error(cli("queryMsgById", "-i", "C0A80101000000000000000000000000", namesrv=ns), 1,
                          "not found")


def test_send_read_and_print_messages(server) -> None:
    _, ns, _ = server
    sent = js("sendMessage", "-t", "AdmT", "-p", "to-q1", "-b", "broker-a", "-i", "1", "-k", "sk", "-c", "TagS",
              namesrv=ns)
    assert len(sent) == 1 and sent[0]["queueId"] == 1 and sent[0]["sendResult"] == "SEND_OK"
    offset = sent[0]["queueOffset"]
    at = js_soon("queryMsgByOffset", "-t", "AdmT", "-b", "broker-a", "-i", "1", "-o", str(offset), namesrv=ns)
    assert (at["body"], at["tags"], at["keys"], at["msgId"]) == ("to-q1", "TagS", "sk", sent[0]["msgId"])
    one_queue = js("consumeMessage", "-t", "AdmT", "-b", "broker-a", "-i", "1", "-o", str(offset), "-c", "5",
                   namesrv=ns)
    assert [m["body"] for m in one_queue] == ["to-q1"]
    assert len(js("consumeMessage", "-t", "AdmT", "-c", "1", namesrv=ns)) == 1
    tagged = js("printMsg", "-t", "AdmT", "-s", "TagS", namesrv=ns)
    assert [m["body"] for m in tagged] == ["to-q1"]
    assert "to-q1" in cli("printMsg", "-t", "AdmT", namesrv=ns).stdout
    assert_one_line_error(cli("queryMsgByOffset", "-t", "AdmT", "-b", "broker-a", "-i", "1", "-o", "999999",
                              namesrv=ns), 1, "999999")


def test_groups_offsets_and_stats(server) -> None:
    _, ns, broker = server
    assert cli("produce", "-t", "AdmT", "--body", "g{i}", "-c", "4", "-q", "-n", ns).returncode == 0
    got = cli("consume", "-t", "AdmT", "-g", "AdmG", "--from-beginning", "-c", "3", "--format", "body",
              "--idle-timeout", "20", "-n", ns)
    assert got.returncode == 0, got.stderr
    src = js("consumerProgress", "-g", "AdmG", "-t", "AdmT", namesrv=ns)
    assert src["problems"] == [] and src["total"]["consumerOffset"] == 3

    clone = js("cloneGroupOffset", "-s", "AdmG", "-d", "AdmG2", "-t", "AdmT", "-o", "true", namesrv=ns)
    assert [r["addr"] for r in clone] == [broker]
    dest = js("consumerProgress", "-g", "AdmG2", "-t", "AdmT", namesrv=ns)
    assert dest["total"]["consumerOffset"] == 3 and dest["total"]["lag"] == src["total"]["lag"]

    stats = js("brokerConsumeStats", namesrv=ns)  # no -b: the only broker
    mine = [r for r in stats["rows"] if r["topic"] == "AdmT" and r["group"] in ("AdmG", "AdmG2")]
    assert {r["group"] for r in mine} == {"AdmG", "AdmG2"}
    assert sum(r["consumerOffset"] for r in mine if r["group"] == "AdmG") == 3
    skipped = js("skipAccumulatedMessage", "-g", "AdmG2", "-t", "AdmT", namesrv=ns)
    assert js("consumerProgress", "-g", "AdmG2", "-t", "AdmT", namesrv=ns)["total"]["lag"] == 0
    assert sum(r["offset"] for r in skipped) == dest["total"]["brokerOffset"]
    all_rows = js("statsAll", "-t", "AdmT", namesrv=ns)
    row = next(r for r in all_rows if r["group"] == "AdmG")
    assert row["messages"] >= 4 and row["accumulation"] == src["total"]["lag"]

    created = js("updateSubGroup", "-g", "AdmSub", "-c", "DefaultCluster", "-r", "3", namesrv=ns)
    assert created[0]["result"] == "OK"
    conf = js("getConsumerConfig", "-g", "AdmSub", namesrv=ns)[broker]
    assert (conf["retryMaxTimes"], conf["consumeEnable"], conf["consumeBroadcastEnable"]) == (3, True, True)
    assert js("deleteSubGroup", "-g", "AdmSub", "-b", broker, namesrv=ns)[0]["result"] == "deleted"


def test_connections_and_ctrl_c_says_interrupted(server) -> None:
    _, ns, _ = server
    assert cli("produce", "-t", "AdmT", "--body", "c{i}", "-c", "1", "-q", "-n", ns).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.pop("NAMESRV_ADDR", None)
    proc = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", "consume", "-t", "AdmT", "-g", "AdmLive",
                             "--from-beginning", "-c", "100000", "--format", "body", "-n", ns],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO_ROOT))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # blocks until one message was printed
        assert first.strip(), proc.stderr.read() if proc.stderr else ""
        conn = js("consumerConnection", "-g", "AdmLive", namesrv=ns)
        assert len(conn["connectionSet"]) == 1 and "AdmT" in conn["subscriptionTable"]
        client_id = conn["connectionSet"][0]["clientId"]
        status = js("consumerStatus", "-g", "AdmLive", namesrv=ns)
        assert [r["clientId"] for r in status] == [client_id] and status[0]["queues"] >= 2
        one = js("consumerStatus", "-g", "AdmLive", "-i", client_id, namesrv=ns)
        assert one["properties"]["messageModel"] == "CLUSTERING"
        assert {(q["topic"], q["queue"]) for q in one["queues"]} >= {("AdmT", 0), ("AdmT", 1)}
        assert_one_line_error(cli("consumerStatus", "-g", "AdmLive", "-i", "1.2.3.4@nobody", namesrv=ns), 1,
                              "not online")
        sent = js("sendMessage", "-t", "AdmT", "-p", "direct", namesrv=ns)[0]
        direct = js_soon("queryMsgById", "-i", sent["msgId"], "-t", "AdmT", "-g", "AdmLive", "-d", client_id,
                         namesrv=ns)
        assert direct["body"] == "direct" and direct["consumeDirectly"].startswith("CR_SUCCESS"), direct
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "of 100000" in err, err
    assert "idle timeout" not in err and "Traceback" not in err, err


def test_producer_connection(server) -> None:
    _, ns, _ = server

    async def with_producer() -> subprocess.CompletedProcess[str]:
        async with Producer("AdmPG", namesrv=ns) as producer:
            await producer.send(Message("AdmT", b"p"))  # heartbeats the broker of the route
            return await asyncio.to_thread(cli, "producerConnection", "-g", "AdmPG", "-t", "AdmT", "--json",
                                           namesrv=ns)

    res = asyncio.run(with_producer())
    assert res.returncode == 0, res.stderr
    rows = orjson.loads(res.stdout)
    assert len(rows) == 1 and "@" in rows[0]["clientId"] and rows[0]["clientAddr"].startswith("127.0.0.1:"), rows


def test_brokers_config_perm_and_clusters(server) -> None:
    _, ns, broker = server
    assert js("brokerStatus", namesrv=ns)["brokerVersionDesc"]
    assert js("getBrokerConfig", namesrv=ns)["brokerName"] == "broker-a"
    assert js("topicClusterList", "-t", "AdmT", namesrv=ns) == ["DefaultCluster"]
    by_cluster = js("topicList", "-c", namesrv=ns)
    assert {"cluster": "DefaultCluster", "topic": "AdmT", "consumerGroup": "AdmG"} in by_cluster
    assert not any(r["topic"].startswith("%RETRY%") for r in by_cluster)
    try:
        wiped = js("wipeWritePerm", "-b", "broker-a", namesrv=ns)
        assert wiped[0]["namesrv"] == ns and wiped[0]["topics"] >= 1
        assert js("topicRoute", "-t", "AdmT", namesrv=ns)["queueDatas"][0]["perm"] == 4
    finally:
        added = js("addWritePerm", "-b", "broker-a", namesrv=ns)
    assert added[0]["topics"] >= 1
    assert js("topicRoute", "-t", "AdmT", namesrv=ns)["queueDatas"][0]["perm"] == 6
    perm = js("updateTopicPerm", "-t", "AdmT", "-p", "4", "-b", broker, namesrv=ns)
    assert perm[0]["newPerm"] == "R--"
    assert js("updateTopicPerm", "-t", "AdmT", "-p", "6", "-c", "DefaultCluster", namesrv=ns)[0]["newPerm"] == "RW-"


def test_namesrv_settings_and_kv_config(server) -> None:
    _, ns, _ = server
    assert js("getNamesrvConfig", namesrv=ns)[ns]["orderMessageEnable"] in ("true", "false")
    assert js("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true", namesrv=ns)[0]["namesrv"] == ns
    assert js("getNamesrvConfig", namesrv=ns)[ns]["orderMessageEnable"] == "true"
    assert_one_line_error(cli("updateNamesrvConfig", "-k", "listenPort", "-v", "1", namesrv=ns), 1, "NO_PERMISSION")
    assert js("updateKvConfig", "-s", "AdmNs", "-k", "k", "-v", "v", namesrv=ns)[0]["result"] == "OK"
    assert js("deleteKvConfig", "-s", "AdmNs", "-k", "k", namesrv=ns)[0]["result"] == "deleted"
    put = js("updateOrderConf", "-t", "AdmT", "-m", "put", "-v", "broker-a:2", namesrv=ns)
    assert put["orderConf"] == "broker-a:2"
    assert js("topicRoute", "-t", "AdmT", namesrv=ns)["orderTopicConf"] == "broker-a:2"
    assert js("updateOrderConf", "-t", "AdmT", "-m", "delete", namesrv=ns)["orderConf"] is None
    assert_one_line_error(cli("updateOrderConf", "-t", "AdmT", namesrv=ns), 1, "no order conf")


def test_unreachable_namesrv_and_missing_route_fail_fast_with_one_line(server) -> None:
    _, ns, _ = server
    dead = f"127.0.0.1:{free_port()}"
    for args in (["consume", "-t", "AdmT", "-n", dead], ["produce", "-t", "AdmT", "--body", "x", "-n", dead],
                 ["consumerProgress", "-g", "G", "-n", dead], ["sendMessage", "-t", "AdmT", "-p", "x", "-n", dead],
                 ["statsAll", "-n", dead]):
        t0 = time.monotonic()
        res = cli(*args, timeout=20)
        assert time.monotonic() - t0 < 10, args
        assert_one_line_error(res, 1, dead)
    t0 = time.monotonic()
    no_route = cli("consume", "-t", "NoSuchTopicHere", "-n", ns, timeout=20)
    assert time.monotonic() - t0 < 10
    assert_one_line_error(no_route, 1, "no route for topic NoSuchTopicHere")


def test_consumer_progress_names_a_hung_broker(server, tmp_path: Path) -> None:
    """Issue 17.2: a broker of the group that does not answer is named with the error, never silently left out
    of the totals. SIGSTOP keeps it registered with its connections open, like a hung or partitioned broker."""
    _, ns, _ = server
    broker_b = start_broker(tmp_path / "b", ns, brokerName="broker-b")
    b_addr = f"127.0.0.1:{broker_b.ports[0]}"
    try:
        js("updateTopic", "-t", "ProgT", "-c", "DefaultCluster", "-r", "2", "-w", "2", namesrv=ns)
        deadline = time.monotonic() + 20
        while len(js("topicRoute", "-t", "ProgT", namesrv=ns)["queueDatas"]) < 2:  # both brokers in the route
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert cli("produce", "-t", "ProgT", "--body", "p{i}", "-c", "8", "-q", "-n", ns).returncode == 0
        got = cli("consume", "-t", "ProgT", "-g", "ProgG", "--from-beginning", "-c", "8", "--format", "body",
                  "--idle-timeout", "30", "-n", ns, timeout=60)
        assert got.returncode == 0, got.stderr
        before = js("consumerProgress", "-g", "ProgG", "-t", "ProgT", namesrv=ns)
        assert before["problems"] == [] and {r["broker"] for r in before["rows"]} == {"broker-a", "broker-b"}

        os.kill(broker_b.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            after = js("consumerProgress", "-g", "ProgG", "-t", "ProgT", "--timeout", "1500", namesrv=ns)
            assert time.monotonic() - t0 < 15
            assert {r["broker"] for r in after["rows"]} == {"broker-a"}
            assert [(p["broker"], p["addr"]) for p in after["problems"]] == [("broker-b", b_addr)]
            assert "unreachable" in after["problems"][0]["error"]
            assert after["total"]["topic"] == "total (without broker-b)"
            table = cli("consumerProgress", "-g", "ProgG", "-t", "ProgT", "--timeout", "1500", namesrv=ns)
            assert table.returncode == 0, table.stderr
            assert f"UNREACHABLE: broker broker-b {b_addr}: unreachable" in table.stdout, table.stdout
        finally:
            os.kill(broker_b.pid, signal.SIGCONT)
    finally:
        broker_b.close()
