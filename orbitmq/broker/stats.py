"""BrokerStats: put/get message and byte counters with per-second buckets for TPS (10 s / 60 s / 600 s).

Hot path cost: one clock read and a few integer adds per send/pull. No background task: buckets roll lazily.
Read by GET_BROKER_RUNTIME_INFO (runtime_info() uses the Java key names) and, at scrape time, by the Prometheus
collector (broker/metrics.py): per-topic totals (topic_in) and limit counters (limits_hit) are plain ints here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from typing import Any

from orbitmq.base.clock import monotonic_ms
from orbitmq.model.properties import Prop

_WINDOW_S = 600
_PUT_MSGS, _PUT_BYTES, _GET_MSGS, _GET_BYTES, _GET_FOUND, _GET_MISS = range(6)
_NSERIES = 6
MAX_TOPICS = 10_000  # per-topic put totals kept; puts to further topics count under OTHER_TOPIC
OTHER_TOPIC = "__other__"
# system topics a send hook moves a message to (metadata/topics.py, services/timer_wheel.py) -> RocketMQ message_type
_REWRITTEN_TOPICS = {"RMQ_SYS_TRANS_HALF_TOPIC": "transaction", "SCHEDULE_TOPIC_XXXX": "delay",
                     "rmq_sys_wheel_timer": "delay"}


class BrokerStats:
    __slots__ = ("put_msgs_total", "put_bytes_total", "get_msgs_total", "get_bytes_total", "get_found_total",
                 "get_miss_total", "_buckets", "_sec", "_clock", "_ns", "_today", "_today_morning",
                 "_yesterday_morning", "_today_fn", "counters", "topic_in", "special_in", "limits_hit", "dlq")

    def __init__(self, clock_ms: Callable[[], int] = monotonic_ms, today: Callable[[], date] = date.today) -> None:
        self.put_msgs_total = 0
        self.put_bytes_total = 0
        self.get_msgs_total = 0
        self.get_bytes_total = 0
        self.get_found_total = 0  # pulls that returned messages
        self.get_miss_total = 0  # pulls that found nothing
        self.counters: dict[str, int] = {}  # feature counters shown as-is in runtime info (e.g. dedupHits)
        # topic -> [messages, bytes] stored since start by sends (normal messages)
        self.topic_in: dict[str, list[int]] = {}
        # (real topic, "transaction" | "delay") -> [messages, bytes]: sends moved to a system topic by a hook
        self.special_in: dict[tuple[str, str], list[int]] = {}
        self.limits_hit: dict[str, int] = {}  # bound name -> times a request or a table hit it
        self.dlq: dict[tuple[str, str], int] = {}  # (original topic, group) -> messages moved to %DLQ%<group>
        # _buckets[series][sec % WINDOW] = count in that second
        self._buckets = [[0] * _WINDOW_S for _ in range(_NSERIES)]
        self._clock = clock_ms
        # the default clock read directly (its seconds are monotonic_ns // 10**9): one Python call less per put
        self._ns = time.monotonic_ns if clock_ms is monotonic_ms else None
        self._sec = clock_ms() // 1000
        self._today_fn = today
        self._today = today()
        self._today_morning = (0, 0)  # (put, get) totals at the start of today
        self._yesterday_morning = (0, 0)

    def _roll(self) -> int:
        ns = self._ns
        sec = ns() // 1_000_000_000 if ns is not None else self._clock() // 1000
        if sec != self._sec:
            gap = min(sec - self._sec, _WINDOW_S)
            for series in self._buckets:
                for i in range(1, gap + 1):
                    series[(self._sec + i) % _WINDOW_S] = 0
            self._sec = sec
            d = self._today_fn()
            if d != self._today:
                self._yesterday_morning = self._today_morning
                self._today_morning = (self.put_msgs_total, self.get_msgs_total)
                self._today = d
        return sec % _WINDOW_S

    def on_put(self, msg_count: int, size_bytes: int, msg: Any = None) -> None:
        """A stored put. `msg` (the first stored message, when the caller has it) gives the per-topic totals."""
        i = self._roll()
        self.put_msgs_total += msg_count
        self.put_bytes_total += size_bytes
        b = self._buckets
        b[_PUT_MSGS][i] += msg_count
        b[_PUT_BYTES][i] += size_bytes
        if msg is not None:
            t = self.topic_in.get(msg.topic)
            if t is None:
                t = self._new_topic(msg)
            t[0] += msg_count
            t[1] += size_bytes

    def on_put_singles(self, puts: list[tuple[Any, Any]]) -> None:
        """on_put(1, result.wrote_bytes, msg) of each stored single (result, msg) of a read, one clock read for all."""
        i = self._roll()
        b = self._buckets
        total = 0
        topic_in = self.topic_in
        for result, msg in puts:
            size = result.wrote_bytes
            total += size
            t = topic_in.get(msg.topic)
            if t is None:
                t = self._new_topic(msg)
            t[0] += 1
            t[1] += size
        n = len(puts)
        self.put_msgs_total += n
        self.put_bytes_total += total
        b[_PUT_MSGS][i] += n
        b[_PUT_BYTES][i] += total

    def _new_topic(self, msg: Any) -> list[int]:
        """The totals of msg's topic. A message the send hooks moved to a system topic (a transaction's half
        message, a delayed or timer message) counts under its real topic and type, looked up on each such put."""
        topic = msg.topic
        mtype = _REWRITTEN_TOPICS.get(topic)
        if mtype is not None:
            real = msg.properties.get(Prop.REAL_TOPIC) or topic
            key = (real, mtype)
            t = self.special_in.get(key)
            if t is None:
                t = self.special_in[key] = [0, 0]
            return t
        table = self.topic_in
        if len(table) >= MAX_TOPICS:
            self.limit_hit("metricsTopics")
            topic = OTHER_TOPIC
            t = table.get(topic)
            if t is not None:
                return t
        t = table[topic] = [0, 0]
        return t

    def on_dlq(self, topic: str, group: str) -> None:
        """A consumer's send-back went to the group's DLQ (the retries were used up)."""
        key = (topic, group)
        n = self.dlq.get(key)
        if n is None and len(self.dlq) >= MAX_TOPICS:
            self.limit_hit("metricsDlq")
            key = (OTHER_TOPIC, group)
            n = self.dlq.get(key)
        self.dlq[key] = (n or 0) + 1

    def limit_hit(self, name: str) -> None:
        """Count a request or table that hit the bound `name` (exported as orbitmq_limits_hit_total)."""
        self.limits_hit[name] = self.limits_hit.get(name, 0) + 1

    def on_get(self, msg_count: int, size_bytes: int) -> None:
        i = self._roll()
        b = self._buckets
        if msg_count:
            self.get_msgs_total += msg_count
            self.get_bytes_total += size_bytes
            self.get_found_total += 1
            b[_GET_MSGS][i] += msg_count
            b[_GET_BYTES][i] += size_bytes
            b[_GET_FOUND][i] += 1
        else:
            self.get_miss_total += 1
            b[_GET_MISS][i] += 1

    def _rate(self, series: int, window_s: int) -> float:
        """Average per second over the last window_s complete seconds."""
        cur = self._roll()
        s = self._buckets[series]
        total = 0
        for k in range(1, window_s + 1):
            total += s[(cur - k) % _WINDOW_S]
        return total / window_s

    def put_tps(self, window_s: int = 60) -> float:
        return self._rate(_PUT_MSGS, window_s)

    def get_tps(self, window_s: int = 60) -> float:
        return self._rate(_GET_MSGS, window_s)

    def _tps_triplet(self, series: int) -> str:
        return " ".join(f"{self._rate(series, w):.2f}" for w in (10, 60, 600))

    def runtime_info(self) -> dict[str, str]:
        """Java GET_BROKER_RUNTIME_INFO keys that come from broker statistics (values as strings)."""
        self._roll()
        return {
            "msgPutTotalTodayNow": str(self.put_msgs_total),
            "msgGetTotalTodayNow": str(self.get_msgs_total),
            "msgPutTotalTodayMorning": str(self._today_morning[0]),
            "msgGetTotalTodayMorning": str(self._today_morning[1]),
            "msgPutTotalYesterdayMorning": str(self._yesterday_morning[0]),
            "msgGetTotalYesterdayMorning": str(self._yesterday_morning[1]),
            "putTps": self._tps_triplet(_PUT_MSGS),
            "getTransferedTps": self._tps_triplet(_GET_MSGS),
            "getFoundTps": self._tps_triplet(_GET_FOUND),
            "getMissTps": self._tps_triplet(_GET_MISS),
            "getTotalTps": " ".join(
                f"{self._rate(_GET_FOUND, w) + self._rate(_GET_MISS, w):.2f}" for w in (10, 60, 600)
            ),
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "queryThreadPoolQueueSize": "0",
        } | {k: str(v) for k, v in self.counters.items()}
