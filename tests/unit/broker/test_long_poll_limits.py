"""LongPollService bounds: held pulls per connection and in all (over either: SYSTEM_BUSY at once, counted), the
hold time capped whatever the client asks, and the counts released on every path out (answer, timeout, close)."""

from __future__ import annotations

from orbitmq.broker.long_poll import (
    LIMIT_HOLD_PER_CONNECTION,
    LIMIT_HOLD_TIME,
    LIMIT_HOLD_TOTAL,
    HoldLimits,
    LongPollService,
)
from orbitmq.protocol import RemotingCommand, ResponseCode


class Conn:
    def __init__(self) -> None:
        self.closed = False
        self.sent: list = []

    def send(self, cmd) -> None:
        self.sent.append(cmd)


class World:
    def __init__(self, limits: HoldLimits) -> None:
        self.now = 1_000
        self.hits: list[str] = []
        self.service = LongPollService(self.rerun, lambda t, q: 0, clock_ms=lambda: self.now)
        self.service.set_limits(lambda: limits, self.hits.append)

    def rerun(self, conn: Conn, request: RemotingCommand) -> str:
        return f"answer:{request.opaque}"


def pull() -> RemotingCommand:
    return RemotingCommand.request(11, {"topic": "T"})


def test_per_connection_cap_answers_system_busy_at_once():
    w = World(HoldLimits(60_000, 2, 100))
    a, b = Conn(), Conn()
    for _ in range(2):
        w.service.hold(a, pull(), "T", 0, 0, 15_000, None)
    third = pull()
    w.service.hold(a, third, "T", 0, 0, 15_000, None)
    assert len(a.sent) == 1
    busy = a.sent[0]
    assert busy.code == ResponseCode.SYSTEM_BUSY and busy.opaque == third.opaque
    assert "longPollingMaxHeldPerConnection=2" in busy.remark
    assert w.hits == [LIMIT_HOLD_PER_CONNECTION] and w.service.refused_count == 1
    w.service.hold(b, pull(), "T", 0, 0, 15_000, None)  # another connection is not affected
    assert b.sent == [] and w.service.held_count == 3 and w.service.held_by(a) == 2


def test_total_cap_and_release_on_timeout_and_close():
    w = World(HoldLimits(60_000, 0, 3))
    conns = [Conn() for _ in range(4)]
    for c in conns[:3]:
        w.service.hold(c, pull(), "T", 0, 0, 1_000, None)
    w.service.hold(conns[3], pull(), "T", 0, 0, 1_000, None)
    assert [m.code for m in conns[3].sent] == [ResponseCode.SYSTEM_BUSY]
    assert w.hits == [LIMIT_HOLD_TOTAL]
    conns[0].closed = True
    w.now += 1_000
    assert w.service.check() == 2  # two timed out and answered, the closed one dropped
    assert w.service.held_count == 0 and w.service.held_by(conns[1]) == 0
    w.service.hold(conns[3], pull(), "T", 0, 0, 1_000, None)  # room again
    assert len(conns[3].sent) == 1 and w.service.held_count == 1
    assert w.service.answer_all() == 1 and w.service.held_count == 0


def test_hold_time_is_capped_whatever_the_client_asks():
    w = World(HoldLimits(5_000, 0, 0))
    a = Conn()
    w.service.hold(a, pull(), "T", 0, 0, 3_600_000, None)  # an hour asked
    assert w.hits == [LIMIT_HOLD_TIME]
    assert w.service.next_deadline_ms() == 1_000 + 5_000
    w.now += 5_000
    assert w.service.check() == 1 and len(a.sent) == 1 and a.sent[0].startswith("answer:")
    w.service.hold(a, pull(), "T", 0, 0, 2_000, None)  # below the cap: kept as asked, not counted
    assert w.service.next_deadline_ms() == 6_000 + 2_000 and w.hits == [LIMIT_HOLD_TIME]


def test_arrival_releases_the_count():
    w = World(HoldLimits(60_000, 1, 0))
    a = Conn()
    w.service.hold(a, pull(), "T", 0, 0, 15_000, None)
    w.service.notify_arriving("T", 0, 1, None)  # no loop: answered synchronously
    assert len(a.sent) == 1 and w.service.held_by(a) == 0
    w.service.hold(a, pull(), "T", 0, 0, 15_000, None)
    assert len(a.sent) == 1 and w.service.held_by(a) == 1  # held, not refused
