"""Metrics plumbing without processes: the plain counters the hot paths keep (BrokerStats per topic, GroupGetStats
per group), their bounds, the int histograms and their exposition, the RPC timer, the loop-side collector and the
exporter's start-up errors."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from prometheus_client.core import GaugeMetricFamily

from orbitmq.base.errors import ConfigError
from orbitmq.base.prom import Histogram, LoopCollector, PromExporter, check_exporter_config, histogram_family
from orbitmq.broker import group_stats as group_stats_mod
from orbitmq.broker import stats as stats_mod
from orbitmq.broker.config_file import build_configs
from orbitmq.broker.group_stats import GroupGetStats
from orbitmq.broker.metrics import RpcTimer
from orbitmq.broker.stats import OTHER_TOPIC, BrokerStats
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode


def _msg(topic: str, **props: str) -> SimpleNamespace:
    return SimpleNamespace(topic=topic, properties=props)


def test_puts_count_per_topic_and_rewritten_messages_under_their_real_topic() -> None:
    s = BrokerStats()
    s.on_put(1, 100, _msg("A"))
    s.on_put(32, 3200, _msg("A"))
    s.on_put(1, 50, _msg("B"))
    s.on_put(1, 70, _msg("RMQ_SYS_TRANS_HALF_TOPIC", REAL_TOPIC="A"))
    s.on_put(2, 80, _msg("SCHEDULE_TOPIC_XXXX", REAL_TOPIC="B"))
    s.on_put(5, 500)  # a put whose caller has no message: totals only
    assert s.topic_in == {"A": [33, 3300], "B": [1, 50]}
    assert s.special_in == {("A", "transaction"): [1, 70], ("B", "delay"): [2, 80]}
    assert (s.put_msgs_total, s.put_bytes_total) == (42, 4000)


def test_topic_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_mod, "MAX_TOPICS", 2)
    s = BrokerStats()
    for t in ("A", "B", "C", "D", "A"):
        s.on_put(1, 10, _msg(t))
    assert s.topic_in == {"A": [2, 20], "B": [1, 10], OTHER_TOPIC: [2, 20]}
    assert s.limits_hit == {"metricsTopics": 2}


def test_group_totals_and_pulled_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    g = GroupGetStats()
    g.on_get("G", "T", 3, 300)
    g.on_get("G", "T", 2, 200)
    g.on_get("G", "T", 0, 0)  # nothing found: not counted
    g.on_pulled("G", "T", 1, 5)
    g.on_pulled("G", "T", 1, 9)
    assert g.out == {("G", "T"): [5, 500]}
    assert g.pulled == {("G", "T", 1): 9}
    monkeypatch.setattr(group_stats_mod, "MAX_QUEUES", 1)
    monkeypatch.setattr(group_stats_mod, "MAX_PAIRS", 1)
    g.on_pulled("G", "T", 2, 4)  # table full: dropped, the known queue still moves
    g.on_pulled("G", "T", 1, 11)
    g.on_get("H", "T", 1, 10)
    assert g.pulled == {("G", "T", 1): 11}
    assert ("H", "T") not in g.out and g.dropped == 2


def test_histogram_buckets_are_cumulative_and_scaled() -> None:
    h = Histogram((1_000_000, 3_000_000))  # ns
    for v in (500_000, 1_000_000, 2_000_000, 9_000_000):
        h.observe(v)
    assert h.counts == [2, 1, 1]
    fam = histogram_family("rpc", "doc", ("code",), [(("x",), h)], scale=1e-6, unit_bounds=(1, 3))
    samples = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert samples[("rpc_bucket", "1.0")] == 2
    assert samples[("rpc_bucket", "3.0")] == 3
    assert samples[("rpc_bucket", "+Inf")] == 4
    assert samples[("rpc_count", None)] == 4
    assert samples[("rpc_sum", None)] == pytest.approx(12.5)


def test_rpc_timer_times_direct_and_awaited_answers() -> None:
    ok = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2)

    def handler(conn: object, cmd: RemotingCommand) -> object:
        if cmd.code == RequestCode.SEND_MESSAGE_V2:
            return cmd.response()
        if cmd.code == RequestCode.PULL_MESSAGE:
            return None  # held: answered later, not timed

        async def later() -> RemotingCommand:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "x")
        return later()

    timer = RpcTimer(handler)
    assert isinstance(timer(None, ok), RemotingCommand)
    assert timer(None, RemotingCommand.request(RequestCode.PULL_MESSAGE)) is None
    coro = timer(None, RemotingCommand.request(RequestCode.QUERY_MESSAGE))
    assert asyncio.run(coro).code == ResponseCode.SYSTEM_ERROR
    counts = {k: sum(h.counts) for k, h in timer.table.items()}
    assert counts == {(int(RequestCode.SEND_MESSAGE_V2), 0): 1,
                      (int(RequestCode.QUERY_MESSAGE), int(ResponseCode.SYSTEM_ERROR)): 1}


def test_loop_collector_runs_the_snapshot_on_the_loop_thread() -> None:
    async def main() -> None:
        seen: list[threading.Thread] = []

        def snapshot() -> list[GaugeMetricFamily]:
            seen.append(threading.current_thread())
            return [GaugeMetricFamily("g", "doc", value=1)]

        collector = LoopCollector(asyncio.get_running_loop(), snapshot)
        fams = await asyncio.to_thread(lambda: list(collector.collect()))
        assert [f.name for f in fams] == ["g"]
        assert seen == [threading.current_thread()]

    asyncio.run(main())


def test_loop_collector_gives_up_when_the_loop_does_not_run_it() -> None:
    async def main() -> None:
        collector = LoopCollector(asyncio.get_running_loop(), lambda: [], timeout_s=0.2)
        err: list[BaseException] = []

        def scrape() -> None:
            try:
                list(collector.collect())
            except RuntimeError as e:
                err.append(e)

        t = threading.Thread(target=scrape)
        t.start()
        time.sleep(0.5)  # the loop is blocked: the scrape must not hang
        t.join(5)
        assert err and "did not run" in str(err[0])

    asyncio.run(main())


def test_exporter_port_in_use_is_a_one_line_config_error() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        exporter = PromExporter("127.0.0.1", port, LoopCollector(asyncio.new_event_loop(), lambda: []))
        with pytest.raises(ConfigError) as ei:
            exporter.start()
        assert "metricsPromExporterPort" in str(ei.value) and str(port) in str(ei.value)
        assert "\n" not in str(ei.value)
    finally:
        holder.close()


def test_exporter_keys_in_broker_conf() -> None:
    broker, _store, _warn = build_configs({"metricsExporterType": "PROM", "metricsPromExporterPort": "15557",
                                           "metricsPromExporterHost": "127.0.0.1"})
    assert (broker.metrics_exporter_type, broker.metrics_prom_exporter_port) == ("PROM", 15557)
    broker.validate()
    with pytest.raises(ConfigError, match="metricsExporterType"):
        check_exporter_config("OTLP_GRPC", 5557)
    with pytest.raises(ConfigError, match="metricsPromExporterPort"):
        check_exporter_config("PROM", 70000)


def test_dlq_moves_count_per_topic_and_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_mod, "MAX_TOPICS", 2)
    s = BrokerStats()
    for topic, group in (("A", "G"), ("A", "G"), ("B", "G"), ("C", "H"), ("D", "H")):
        s.on_dlq(topic, group)
    assert s.dlq == {("A", "G"): 2, ("B", "G"): 1, (OTHER_TOPIC, "H"): 2}
    assert s.limits_hit == {"metricsDlq": 2}


def test_rpc_timer_passes_a_read_to_the_routers_many_form_and_counts_each_answer() -> None:
    class _Inner:
        def __init__(self) -> None:
            self.reads: list[int] = []

        def __call__(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(ResponseCode.SUCCESS, None)

        def many(self, conn: object, cmds: list[RemotingCommand]) -> list[object]:
            self.reads.append(len(cmds))
            return [cmds[0].response(ResponseCode.SUCCESS, None), ValueError("x"), None,
                    cmds[3].response(ResponseCode.SYSTEM_BUSY, "busy")]

    inner = _Inner()
    timer = RpcTimer(inner)
    cmds = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2) for _ in range(4)]
    out = timer.many(None, cmds)
    assert inner.reads == [4]
    assert isinstance(out[1], ValueError) and out[2] is None
    counts = {k: sum(h.counts) for k, h in timer.table.items()}
    assert counts == {(int(RequestCode.SEND_MESSAGE_V2), 0): 1,
                      (int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SYSTEM_BUSY)): 1}
    plain = RpcTimer(lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, None))  # no many form: one by one
    assert [r.code for r in plain.many(None, cmds[:2])] == [0, 0]
    assert sum(sum(h.counts) for h in plain.table.values()) == 2
