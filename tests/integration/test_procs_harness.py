"""The real-process harness (orbitmq.testing.procs) exercised with a name server launched via `python -c`."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import psutil
import pytest

from orbitmq.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_frame
from orbitmq.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from orbitmq.testing.procs import (
    ServerProcess,
    blocking_request,
    free_broker_port,
    free_port,
    port_open,
    registered_broker_addrs,
    start_namesrv,
    wait_broker_registered,
    write_broker_conf,
    write_namesrv_conf,
)

pytestmark = pytest.mark.integration


def register(namesrv_addr: str, broker_addr: str) -> socket.socket:
    """Register over a connection that stays open (closing it would unregister the broker at once)."""
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1)), []).to_json()
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": broker_addr, "clusterName": "C", "haServerAddr": broker_addr,
        "brokerId": "0"}, body)
    host, port = namesrv_addr.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(encode_frame(cmd))
    decoder = FrameDecoder()
    while True:
        resps = decoder.feed(sock.recv(65536))
        if resps:
            assert resps[0].code == 0
            return sock


def test_namesrv_process_kill9_restart_keeps_kv_and_drops_routes(tmp_path):
    proc = start_namesrv(tmp_path, use_cli=False)
    try:
        port = proc.ports[0]
        addr = f"127.0.0.1:{port}"
        assert proc.running and port_open(port)
        broker_sock = register(addr, "127.0.0.1:10911")
        wait_broker_registered(addr, "127.0.0.1:10911", timeout_s=5, proc=proc)
        broker_sock.close()  # the name server drops a broker as soon as its connection closes
        deadline = time.monotonic() + 5
        while registered_broker_addrs(addr):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        broker_sock = register(addr, "127.0.0.1:10911")
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"})
        assert blocking_request(addr, put).code == 0

        assert proc.kill9() == -signal.SIGKILL
        assert not proc.running and not port_open(port)

        broker_sock.close()
        proc.restart()
        assert proc.running and proc.starts == 2
        assert registered_broker_addrs(addr) == set()  # routes live in memory only
        got = blocking_request(addr, RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"}))
        assert got.ext_fields == {"value": "v"}  # kvConfig.json survived kill -9
        log = proc.log_path.read_text()
        assert log.count("===== start #") == 2 and "namesrv listening on" in log
    finally:
        proc.close()
    assert not proc.running


def test_terminate_is_graceful(tmp_path):
    proc = start_namesrv(tmp_path, use_cli=False)
    try:
        assert proc.terminate(timeout=10) == 0
        assert "namesrv stopped" in proc.log_path.read_text()
        assert proc.terminate() == 0  # idempotent
    finally:
        proc.close()


def test_terminate_escalates_to_sigkill(tmp_path):
    port = free_port()
    code = ("import signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    proc = ServerProcess([sys.executable, "-c", code], tmp_path / "stubborn.log", ports=[port]).start()
    try:
        t0 = time.monotonic()
        assert proc.terminate(timeout=0.5) == -signal.SIGKILL
        assert time.monotonic() - t0 < 5
    finally:
        proc.close()


def test_early_exit_reports_log_tail(tmp_path):
    proc = ServerProcess([sys.executable, "-c", "print('boom: bad config'); raise SystemExit(3)"],
                         tmp_path / "bad.log", ports=[free_port()], name="bad")
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 3.*boom: bad config"):
        proc.start()
    assert not proc.running


def test_never_listening_times_out_and_is_killed(tmp_path):
    proc = ServerProcess([sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"],
                         tmp_path / "slow.log", ports=[free_port()], ready_timeout_s=1.0, name="slow")
    with pytest.raises(RuntimeError, match=r"(?s)not listening.*waiting"):
        proc.start()
    assert not proc.running


def test_kill9_takes_the_whole_process_group(tmp_path):
    port = free_port()
    code = ("import socket, subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "open(sys.argv[1], 'w').write(str(c.pid)); "
            f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    pid_file = tmp_path / "child.pid"
    proc = ServerProcess([sys.executable, "-c", code, str(pid_file)], tmp_path / "group.log", ports=[port]).start()
    try:
        child = int(pid_file.read_text())
        assert psutil.pid_exists(child)
        proc.kill9()
        deadline = time.monotonic() + 5
        while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "grandchild survived kill9"
            time.sleep(0.05)
    finally:
        proc.close()


def test_conf_writers_and_ports(tmp_path):
    p = free_broker_port()
    assert p > 1025
    conf = write_broker_conf(tmp_path / "b", p, "127.0.0.1:9", brokerName="broker-x", autoCreateTopicEnable=False)
    text = conf.read_text()
    assert f"listenPort={p}\n" in text and "brokerName=broker-x\n" in text
    assert "autoCreateTopicEnable=false\n" in text and "namesrvAddr=127.0.0.1:9\n" in text
    assert f"storePathRootDir={tmp_path / 'b' / 'store'}\n" in text
    ns = write_namesrv_conf(tmp_path / "n", 1234, orderMessageEnable=True)
    assert ns.read_text() == f"listenPort=1234\nkvConfigPath={tmp_path / 'n' / 'kvConfig.json'}\norderMessageEnable=true\n"
    from orbitmq.namesrv import load_namesrv_conf

    cfg, warnings = load_namesrv_conf(ns)
    assert cfg.listen_port == 1234 and cfg.order_message_enable and warnings == []


def test_child_env_has_repo_on_pythonpath(tmp_path):
    proc = ServerProcess([sys.executable, "-c", "import orbitmq, sys; print('ok', orbitmq.__file__)"],
                         tmp_path / "env.log", cwd="/")
    proc.start(wait=False)
    assert proc.proc.wait(timeout=20) == 0
    assert "ok " in proc.log_path.read_text()
    assert os.fspath(proc.log_path).startswith(os.fspath(tmp_path))
