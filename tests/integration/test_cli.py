"""The `orbitmq` CLI against real processes on 127.0.0.1: servers, admin commands, produce/consume, errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from orbitmq.testing.procs import (
    REPO_ROOT,
    ServerProcess,
    free_broker_port,
    free_port,
    write_broker_conf,
    write_conf,
    write_namesrv_conf,
    write_standalone_conf,
)

pytestmark = pytest.mark.integration


def cli(*args: str, namesrv: str | None = None, stdin: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.pop("NAMESRV_ADDR", None)
    if namesrv:
        env["NAMESRV_ADDR"] = namesrv
    return subprocess.run([sys.executable, "-m", "orbitmq.cli.main", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=str(REPO_ROOT))


def assert_one_line_error(res: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    errors = [line for line in res.stderr.splitlines() if line.startswith("orbitmq: error: ")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for f in fragments:
        assert f in errors[0], errors[0]


def wait_for_banner(proc: ServerProcess) -> str:
    """Ports open before the banner is printed: wait for its last line."""
    deadline = time.monotonic() + 10
    while "Ready. SIGTERM" not in (log := proc.log_path.read_text()):
        assert time.monotonic() < deadline, log
        time.sleep(0.05)
    return log


def wait_for_route(topic: str, namesrv: str, queues: int) -> dict:
    deadline = time.monotonic() + 10
    while True:
        res = cli("topicRoute", "-t", topic, "--json", namesrv=namesrv)
        if res.returncode == 0:
            route = orjson.loads(res.stdout)
            if route["queueDatas"] and route["queueDatas"][0]["writeQueueNums"] == queues:
                return route
        assert time.monotonic() < deadline, res.stderr
        time.sleep(0.2)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("standalone")
    ns_port, broker_port = free_port(), free_broker_port()
    conf = write_standalone_conf(d, ns_port, broker_port)
    proc = ServerProcess.cli(["standalone", "-c", str(conf)], d / "server.log", ports=[ns_port, broker_port],
                             name="standalone")
    proc.start()
    yield proc, f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", d
    assert proc.terminate(20) == 0, proc.log_tail()


def test_standalone_prints_banner_and_joins_cluster(standalone) -> None:
    proc, ns, broker, d = standalone
    log = wait_for_banner(proc)
    assert f"name server  0.0.0.0:{ns.split(':')[1]}" in log
    assert f"broker-a @ {broker}" in log and "flush ASYNC_FLUSH" in log and str(d / "store") in log
    assert "namesrvListenPort" not in log  # a standalone key, not an unknown-key warning
    res = cli("clusterList", "--json", namesrv=ns)
    assert res.returncode == 0, res.stderr
    rows = orjson.loads(res.stdout)
    assert [(r["cluster"], r["brokerName"], r["addr"]) for r in rows] == [("DefaultCluster", "broker-a", broker)]
    status = cli("brokerStatus", "-b", broker, "--json", namesrv=ns)
    assert status.returncode == 0 and "brokerVersionDesc" in orjson.loads(status.stdout)


def test_topic_produce_consume_progress_query_reset_delete(standalone) -> None:
    _, ns, broker, _ = standalone
    res = cli("updateTopic", "-t", "CliT", "-c", "DefaultCluster", "-r", "2", "-w", "2", namesrv=ns)
    assert res.returncode == 0, res.stderr
    wait_for_route("CliT", ns, 2)
    assert "CliT" in orjson.loads(cli("topicList", "--json", namesrv=ns).stdout)

    sent = cli("produce", "-t", "CliT", "--tag", "TagA", "--key", "order-1", "--body", "hello {i}", "-c", "3",
               "--json", "--namesrv", ns)
    assert sent.returncode == 0, sent.stderr
    results = [orjson.loads(line) for line in sent.stdout.splitlines()]
    assert [r["status"] for r in results] == ["SEND_OK"] * 3
    stdin_sent = cli("produce", "-t", "CliT", "-q", "--namesrv", ns, stdin="line one\nline two\n")
    assert stdin_sent.returncode == 0 and "sent 2 message(s)" in stdin_sent.stdout

    status = orjson.loads(cli("topicStatus", "-t", "CliT", "--json", namesrv=ns).stdout)
    assert status["total"]["messages"] == 5

    by_key = cli("queryMsgByKey", "-t", "CliT", "-k", "order-1", "--json", namesrv=ns)
    assert by_key.returncode == 0, by_key.stderr
    assert sorted(r["msgId"] for r in orjson.loads(by_key.stdout)) == sorted(r["msgId"] for r in results)
    by_id = orjson.loads(cli("queryMsgById", "-i", results[1]["offsetMsgId"], "--json", namesrv=ns).stdout)
    assert by_id["body"] == "hello 1" and by_id["tags"] == "TagA" and by_id["storeHost"] == broker
    by_uniq = orjson.loads(cli("queryMsgById", "-i", results[2]["msgId"], "-t", "CliT", "--json",
                               namesrv=ns).stdout)
    assert by_uniq["body"] == "hello 2"

    got = cli("consume", "-t", "CliT", "-g", "CliG", "--from-beginning", "-c", "4", "--format", "body",
              "--idle-timeout", "15", "--namesrv", ns)
    assert got.returncode == 0, got.stderr
    assert len(got.stdout.splitlines()) == 4
    assert set(got.stdout.splitlines()) <= {"hello 0", "hello 1", "hello 2", "line one", "line two"}

    progress = orjson.loads(cli("consumerProgress", "-g", "CliG", "-t", "CliT", "--json", namesrv=ns).stdout)
    assert progress["total"]["brokerOffset"] == 5
    assert progress["total"]["consumerOffset"] == 4 and progress["total"]["lag"] == 1

    reset = cli("resetOffsetByTime", "-g", "CliG", "-t", "CliT", "-s", "0", "--json", namesrv=ns)
    assert reset.returncode == 0, reset.stderr
    assert sorted(r["offset"] for r in orjson.loads(reset.stdout)) == [0, 0]
    progress = orjson.loads(cli("consumerProgress", "-g", "CliG", "--json", namesrv=ns).stdout)
    assert progress["total"]["lag"] >= 5

    assert cli("deleteTopic", "-t", "CliT", namesrv=ns).returncode == 0
    assert_one_line_error(cli("topicRoute", "-t", "CliT", namesrv=ns), 1, "TOPIC_NOT_EXIST:")


def test_request_errors_are_one_line_exit_1(standalone) -> None:
    _, ns, _, _ = standalone
    assert_one_line_error(cli("topicStatus", "-t", "NoSuchTopic", namesrv=ns), 1, "TOPIC_NOT_EXIST:")
    dead = f"127.0.0.1:{free_port()}"
    assert_one_line_error(cli("topicList", "-n", dead), 1, dead)
    assert_one_line_error(cli("produce", "-t", "X", "--body", "b", "--namesrv", dead), 1)


def test_startup_errors_are_one_line_exit_2(standalone, tmp_path: Path) -> None:
    _, ns, _, _ = standalone
    busy = cli("standalone", "--data", str(tmp_path / "d"), "--namesrv-port", ns.split(":")[1],
               "--broker-port", str(free_broker_port()))
    assert_one_line_error(busy, 2, "already in use")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    unwritable = cli("standalone", "--data", str(blocker / "sub"), "--namesrv-port", str(free_port()),
                     "--broker-port", str(free_broker_port()))
    assert_one_line_error(unwritable, 2, "not writable")
    bad = tmp_path / "bad.conf"
    bad.write_text("listenPort=abc\n")
    assert_one_line_error(cli("broker", "-c", str(bad)), 2, "listenPort", "not an integer")


def test_sigterm_flushes_and_messages_survive_restart(tmp_path: Path) -> None:
    ns_port, broker_port = free_port(), free_broker_port()
    ns = f"127.0.0.1:{ns_port}"
    # flags override the conf; small segments keep recovery on restart fast
    conf = write_conf(tmp_path / "small.conf", {"mappedFileSizeCommitLog": 64 << 20,
                                               "mappedFileSizeConsumeQueue": 600_000})
    args = ["standalone", "-c", str(conf), "--data", str(tmp_path / "data"), "--namesrv-port", str(ns_port), "--broker-port",
            str(broker_port), "--broker-ip", "127.0.0.1", "--flush", "SYNC_FLUSH"]
    with ServerProcess.cli(args, tmp_path / "server.log", ports=[ns_port, broker_port]) as proc:
        proc.start()
        assert "flush SYNC_FLUSH" in wait_for_banner(proc)
        assert cli("updateTopic", "-t", "Durable", "-b", f"127.0.0.1:{broker_port}", "-w", "1", "-r", "1",
                   namesrv=ns).returncode == 0
        wait_for_route("Durable", ns, 1)
        sent = cli("produce", "-t", "Durable", "--body", "m{i}", "-c", "5", "-q", "--namesrv", ns)
        assert sent.returncode == 0, sent.stderr
        assert proc.terminate(20) == 0, proc.log_tail()
        assert "shutdown complete" in proc.log_path.read_text()
        proc.start()
        wait_for_route("Durable", ns, 1)
        status = orjson.loads(cli("topicStatus", "-t", "Durable", "--json", namesrv=ns).stdout)
        assert status["total"]["messages"] == 5
        assert proc.terminate(20) == 0


def test_separate_namesrv_and_broker_processes(tmp_path: Path) -> None:
    ns_port, broker_port = free_port(), free_broker_port()
    ns_conf = write_namesrv_conf(tmp_path / "ns", ns_port)
    broker_conf = write_broker_conf(tmp_path / "b", broker_port, f"127.0.0.1:{ns_port}", unknownThing="1")
    with ServerProcess.cli(["namesrv", "-c", str(ns_conf)], tmp_path / "ns.log", ports=[ns_port]) as nsp, \
            ServerProcess.cli(["broker", "-c", str(broker_conf)], tmp_path / "b.log", ports=[broker_port]) as bp:
        nsp.start()
        bp.start()
        assert "unknown key 'unknownThing'" in wait_for_banner(bp)
        deadline = time.monotonic() + 10
        while True:
            rows = orjson.loads(cli("clusterList", "--json", namesrv=f"127.0.0.1:{ns_port}").stdout)
            if rows:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert rows[0]["addr"] == f"127.0.0.1:{broker_port}"
        assert bp.terminate(20) == 0
        assert nsp.terminate(20) == 0
