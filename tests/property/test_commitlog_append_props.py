"""Hypothesis: CommitLog.append's one-queue fast path writes the same bytes, answers the same results and
dispatch requests, and leaves the same queue table as the general per-message path, for any sequence of puts
(batches of one queue, mixed batches, transaction halves, schedule topic, size-limit refusals, rolls)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.store.commitlog import CommitLog
from orbitmq.store.config import StoreConfig
from orbitmq.store.results import MessageInner
from orbitmq.store.schedule import SCHEDULE_TOPIC
from orbitmq.testing.sim_disk import SimDisk

SEG = 16384


class _Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def now_ms(self) -> int:
        self.t += 3
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


class _GeneralOnly(CommitLog):
    """The reference: every append takes the general path."""

    def _append_run(self, msgs: list[MessageInner]) -> None:
        return None


def _log(cls: type[CommitLog]) -> CommitLog:
    cfg = StoreConfig("/s", mapped_file_size_commitlog=SEG, max_message_size=2048).derive()
    cl = cls("/s", cfg, SimDisk(), _Clock())
    cl.load()
    return cl


_props = st.fixed_dictionaries(
    {},
    optional={
        "TAGS": st.sampled_from(["A", "TagB", ""]),
        "KEYS": st.sampled_from(["k1", "k1 k2", " "]),
        "UNIQ_KEY": st.text("0123456789ABCDEF", min_size=32, max_size=32),
        "DELAY": st.sampled_from(["1", "3", "x"]),
        "BIG": st.sampled_from(["v", "w" * 33000]),
    },
)
_msg = st.builds(
    MessageInner,
    topic=st.sampled_from(["T", "T", "Other", SCHEDULE_TOPIC, "é" * 70]),
    queue_id=st.sampled_from([0, 0, 1]),
    body=st.binary(max_size=3000),
    properties=_props,
    flag=st.sampled_from([0, 7, 2**31]),
    sys_flag=st.sampled_from([0, 0, 0x4, 0x8, 0xC, 0x10]),
    born_timestamp=st.integers(0, 2**40),
    born_host=st.sampled_from(["127.0.0.1:5555", "[::1]:7", "bad"]),
    store_host=st.sampled_from(["127.0.0.1:10911", "10.0.0.2:10911"]),
    reconsume_times=st.sampled_from([0, 1]),
    prepared_transaction_offset=st.sampled_from([0, 99]),
)


def _one_queue_batch(data: st.DataObject) -> list[MessageInner]:
    """A batch as SEND_BATCH_MESSAGE builds it: one topic, queue, host pair; per-message body/flag/props."""
    first = data.draw(_msg)
    n = data.draw(st.integers(1, 6))
    out = [first]
    for _ in range(n - 1):
        m = data.draw(_msg)
        out.append(MessageInner(first.topic, first.queue_id, m.body, m.properties, m.flag, first.sys_flag,
                                m.born_timestamp, first.born_host, first.store_host, m.reconsume_times, 0))
    return out


def _taken(table: dict[str, int]) -> dict[str, int]:
    """The queue offsets taken. A batch refused part-way leaves "topic-queue": 0 behind on the general path (it
    takes and gives back); the fast path takes nothing. Both read as 0 (table.get(key, 0))."""
    return {k: v for k, v in table.items() if v}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fast_path_equals_general_path(data: st.DataObject) -> None:
    fast, ref = _log(CommitLog), _log(_GeneralOnly)
    for _ in range(data.draw(st.integers(1, 8))):
        msgs = _one_queue_batch(data) if data.draw(st.booleans()) else data.draw(st.lists(_msg, min_size=1, max_size=4))
        a, b = fast.append(msgs), ref.append(msgs)
        assert a.result == b.result
        assert a.end_offset == b.end_offset
        assert a.requests == b.requests
        assert _taken(fast.topic_queue_table) == _taken(ref.topic_queue_table)
        assert fast.last_store_timestamp == ref.last_store_timestamp
        assert fast.max_offset == ref.max_offset
    assert len(fast.segments.segments) == len(ref.segments.segments)
    for sf, sr in zip(fast.segments.segments, ref.segments.segments, strict=True):
        assert sf.wrote_position == sr.wrote_position
        assert bytes(sf.buf[: sf.wrote_position]) == bytes(sr.buf[: sr.wrote_position])
