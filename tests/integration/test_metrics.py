"""Prometheus metrics (metricsExporterType=PROM) of real processes: a broker under SDK load shows RocketMQ 5's
metrics rising and a lag equal to consumerProgress's; the name server and the controller answer; a metrics port
already in use stops start-up with a one-line error."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.client import Admin, ConsumeResult, Producer, PushConsumer, SendStatus
from orbitmq.client.errors import TopicNotExistError
from orbitmq.model import Message, MessageExt
from orbitmq.testing.procs import (
    LOCALHOST,
    ServerProcess,
    Standalone,
    free_port,
    start_broker,
    start_namesrv,
    write_broker_conf,
    write_conf,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC, GROUP = "MetricsT", "G_metrics"
DLQ_TOPIC = "MetricsDlqT"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert found, f"no sample {name}{labels}; have {sorted({n for n, _ in samples})}"
    return sum(found)


async def _wait(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _send(p: Producer, n: int, body: bytes) -> None:
    for _ in range(n):
        r = await p.send(Message(TOPIC, body, {}))
        assert r.status == SendStatus.SEND_OK


def test_broker_metrics_rise_under_load_and_lag_matches_consumer_progress(tmp_path: Path) -> None:
    mport = free_port()
    sa = Standalone(tmp_path / "sa", metricsExporterType="PROM", metricsPromExporterHost=LOCALHOST,
                    metricsPromExporterPort=mport).start()
    body = b"x" * 100
    try:
        async def run() -> None:
            async with Admin(sa.namesrv_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=sa.broker_addr, read_queue_nums=4, write_queue_nums=4)
                for _ in range(100):
                    try:
                        await admin.topic_route(TOPIC)
                        break
                    except TopicNotExistError:
                        await asyncio.sleep(0.1)
            async with Producer("G_metrics_pg", namesrv=sa.namesrv_addr) as p:
                await _send(p, 120, body)
                s1 = await asyncio.to_thread(scrape, mport)
                assert value(s1, "rocketmq_messages_in_total", topic=TOPIC, message_type="normal",
                             node_type="broker", cluster="DefaultCluster") == 120
                assert value(s1, "rocketmq_throughput_in_total", topic=TOPIC) >= 120 * len(body)
                sends = value(s1, "rocketmq_rpc_latency_count", request_code="send_message_v2",
                              response_code="success", protocol_type="remoting")
                assert sends >= 120
                assert value(s1, "rocketmq_rpc_latency_bucket", request_code="send_message_v2", le="+Inf") == sends
                await _send(p, 80, body)
                s2 = await asyncio.to_thread(scrape, mport)
                assert value(s2, "rocketmq_messages_in_total", topic=TOPIC) == 200  # rising
                assert value(s2, "rocketmq_rpc_latency_count", request_code="send_message_v2") >= sends + 80
                assert value(s2, "rocketmq_producer_connections") >= 1
                # consume everything, then stop the consumer: its offsets are committed
                got: list[MessageExt] = []

                def listener(msgs: list[MessageExt]) -> ConsumeResult:
                    got.extend(msgs)
                    return ConsumeResult.SUCCESS

                c = PushConsumer(GROUP, namesrv=sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                 persist_offset_interval_ms=300)
                c.subscribe(TOPIC, "*", listener)
                await c.start()
                await _wait(lambda: len(got) >= 200, 60, "200 messages consumed")
                s3 = await asyncio.to_thread(scrape, mport)
                assert value(s3, "rocketmq_consumer_connections", consumer_group=GROUP) >= 1
                await c.shutdown()  # persists offsets
                await _send(p, 50, body)  # nobody consumes these: lag 50
            s4 = await asyncio.to_thread(scrape, mport)
            assert value(s4, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP) >= 200
            assert value(s4, "rocketmq_throughput_out_total", topic=TOPIC, consumer_group=GROUP) >= 200 * len(body)
            lag = value(s4, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP,
                        is_retry="false", is_system="false")
            async with Admin(sa.namesrv_addr) as admin:
                progress = await admin.consumer_progress(GROUP, TOPIC)
            assert lag == sum(row[3] for row in progress) == 50
            assert value(s4, "rocketmq_consumer_ready_messages", topic=TOPIC, consumer_group=GROUP) == 50
            assert value(s4, "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=GROUP) == 0
            # the 50 unconsumed messages were stored moments ago: lag latency is their age, within the test's run
            lag_ms = value(s4, "rocketmq_consumer_lag_latency", topic=TOPIC, consumer_group=GROUP)
            assert 0 < lag_ms < 120_000
            assert value(s4, "rocketmq_consumer_queueing_latency", topic=TOPIC, consumer_group=GROUP) == lag_ms
            # pulls were timed too, storage and our own gauges are there
            assert value(s4, "rocketmq_rpc_latency_count", request_code="pull_message") >= 1
            assert value(s4, "rocketmq_storage_size", storage_type="local") > 250 * len(body)
            assert value(s4, "rocketmq_storage_flush_behind_bytes") >= 0
            assert value(s4, "orbitmq_role", role="ASYNC_MASTER") == 1
            assert value(s4, "orbitmq_acting_master") == 0
            assert 0 <= value(s4, "orbitmq_storage_disk_ratio") <= 1
            assert value(s4, "rocketmq_broker_permission") == 6
            # a group that fails every message with no retries left: each goes to its DLQ, counted per topic/group
            async with Producer("G_metrics_pg", namesrv=sa.namesrv_addr) as p:
                for _ in range(3):
                    assert (await p.send(Message(DLQ_TOPIC, body, {}))).status == SendStatus.SEND_OK
            d = PushConsumer("G_metrics_dlq", namesrv=sa.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             max_reconsume_times=0)
            d.subscribe(DLQ_TOPIC, "*", lambda msgs: ConsumeResult.RECONSUME_LATER)
            await d.start()
            try:
                s5: Samples = {}

                def three_in_dlq() -> bool:
                    nonlocal s5
                    s5 = scrape(mport)
                    return any(n == "rocketmq_send_to_dlq_messages_total" and ("topic", DLQ_TOPIC) in ls and v == 3
                               for (n, ls), v in s5.items())

                await _wait(three_in_dlq, 60, "3 messages in the DLQ")
                assert value(s5, "rocketmq_send_to_dlq_messages_total", topic=DLQ_TOPIC,
                             consumer_group="G_metrics_dlq") == 3
            finally:
                await d.shutdown()

        asyncio.run(run())
    finally:
        sa.close()


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind((LOCALHOST, 0))
    s.listen(1)
    return s, s.getsockname()[1]


def test_broker_metrics_port_in_use_is_a_clear_startup_error(tmp_path: Path) -> None:
    holder, port = _busy_port()
    try:
        conf = write_broker_conf(tmp_path, free_port(), "", metricsExporterType="PROM",
                                 metricsPromExporterHost=LOCALHOST, metricsPromExporterPort=port)
        r = subprocess.run([sys.executable, "-m", "orbitmq.cli.main", "broker", "-c", str(conf)], capture_output=True,
                           text=True, timeout=60)
    finally:
        holder.close()
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert err and "metricsPromExporterPort" in err[-1] and str(port) in err[-1], r.stderr
    assert "Traceback" not in r.stderr


def _scrape_until(port: int, pred: Callable[[Samples], bool], timeout_s: float = 30.0) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        s = scrape(port)
        if pred(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def test_namesrv_metrics_count_registered_brokers(tmp_path: Path) -> None:
    mport = free_port()
    ns = start_namesrv(tmp_path / "ns", metricsExporterType="PROM", metricsPromExporterHost=LOCALHOST,
                       metricsPromExporterPort=mport)
    broker = None
    try:
        s = scrape(mport)
        assert value(s, "orbitmq_namesrv_brokers", node_type="nameserver") == 0
        broker = start_broker(tmp_path / "b", f"{LOCALHOST}:{ns.ports[0]}")
        s = _scrape_until(mport, lambda s: value(s, "orbitmq_namesrv_brokers") == 1)
        assert value(s, "orbitmq_namesrv_brokers") == 1
        assert value(s, "orbitmq_namesrv_masters", cluster="DefaultCluster") == 1
        assert value(s, "orbitmq_namesrv_topics") >= 1
    finally:
        if broker is not None:
            broker.close()
        ns.close()


def test_controller_metrics_show_leader_and_term(tmp_path: Path) -> None:
    port, mport = free_port(), free_port()
    d = tmp_path / "c"
    conf = write_conf(d / "controller.conf", {
        "controllerDLegerGroup": "g", "controllerDLegerPeers": f"n0-{LOCALHOST}:{port}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(d / "store"), "metricsExporterType": "PROM", "metricsPromExporterHost": LOCALHOST,
        "metricsPromExporterPort": mport})
    proc = ServerProcess.cli(["controller", "-c", str(conf)], d / "controller.log", ports=[port, mport],
                             name="controller").start()
    try:
        s = _scrape_until(mport, lambda s: value(s, "orbitmq_controller_is_leader") == 1)
        assert value(s, "orbitmq_controller_is_leader", node_type="controller", node_id="n0") == 1
        assert value(s, "orbitmq_controller_raft_term") >= 1
        assert value(s, "orbitmq_controller_leader", leader_id="n0") == 1
        assert value(s, "orbitmq_controller_active_brokers") == 0
    finally:
        proc.close()
