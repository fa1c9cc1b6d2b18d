"""Hypothesis: CommitLog.append's one-queue fast path writes the same bytes, answers the same results and
dispatch requests, and leaves the same queue table as the general per-message path, for any sequence of puts
(batches of one queue, mixed batches, transaction halves, schedule topic, size-limit refusals, rolls)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.store import commitlog as commitlog_module
from orbitmq.store.commitlog import CommitLog
from orbitmq.store.config import StoreConfig
from orbitmq.store.results import MessageInner, PutStatus
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


class _FrozenClock(_Clock):
    """One store timestamp for every append: one-by-one puts and a run of them stamp their records alike."""

    def now_ms(self) -> int:
        return self.t


def _big_log() -> CommitLog:
    """A segment no test sequence fills (rolls are tested separately) and the test's valid hosts already packed
    (a host's first sight goes through the general path, which append_singles leaves to the one-by-one puts)."""
    cfg = StoreConfig("/s", mapped_file_size_commitlog=4 << 20, max_message_size=2048).derive()
    cl = CommitLog("/s", cfg, SimDisk(), _FrozenClock())
    cl.load()
    for host in ("127.0.0.1:5555", "[::1]:7", "127.0.0.1:10911", "10.0.0.2:10911"):
        cl._host(host)
    return cl


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_append_singles_equals_one_by_one_puts(data: st.DataObject) -> None:
    """append_singles (the sends of one read stored together) gives every message the record, result and dispatch
    request that appending it alone, in the same order, gives; when it declines, nothing is taken and the one-by-one
    puts that follow (the caller's fallback) give the same as the reference."""
    fast, ref = _big_log(), _big_log()
    for _ in range(data.draw(st.integers(1, 8))):
        msgs = data.draw(st.lists(_msg, min_size=1, max_size=6))
        table_before, end_before = dict(fast.topic_queue_table), fast.max_offset
        done = fast.append_singles(msgs)
        if done is None:
            assert fast.topic_queue_table == table_before
            assert fast.max_offset == end_before
            got = [fast.append([m]) for m in msgs]
            results, requests = [a.result for a in got], [r for a in got for r in a.requests]
        else:
            results, end, requests = done
        expected = [ref.append([m]) for m in msgs]
        if done is not None:
            assert all(a.result.status.name == "PUT_OK" for a in expected)
            assert end == expected[-1].end_offset
        assert results == [a.result for a in expected]
        assert requests == [r for a in expected for r in a.requests]
        assert _taken(fast.topic_queue_table) == _taken(ref.topic_queue_table)
        assert fast.max_offset == ref.max_offset
    assert len(fast.segments.segments) == len(ref.segments.segments) <= 1  # none when every put was refused
    for sf, sr in zip(fast.segments.segments, ref.segments.segments, strict=True):
        assert sf.wrote_position == sr.wrote_position
        assert bytes(sf.buf[: sf.wrote_position]) == bytes(sr.buf[: sr.wrote_position])


def test_append_singles_keeps_a_run_in_one_segment() -> None:
    """Records that do not all fit in the last segment's room go together into the next one (after the filler),
    as a batch does; a run larger than a segment is declined with nothing taken."""
    cl = _log(CommitLog)
    cl._host("127.0.0.1:5555")
    cl._host("127.0.0.1:10911")

    def m(queue_id: int, size: int) -> MessageInner:
        return MessageInner("T", queue_id, b"x" * size, {"TAGS": "A"}, 0, 0, 1, "127.0.0.1:5555", "127.0.0.1:10911",
                            0, 0)

    first = cl.append([m(0, 2000)] * 1)
    assert first.result.status.name == "PUT_OK"
    while cl.segments.segments[-1].free_bytes > 6000:
        cl.append([m(1, 1500)])
    room = cl.segments.segments[-1].free_bytes
    done = cl.append_singles([m(0, 1500), m(1, 1500), m(2, 1500), m(0, 1500)])
    assert done is not None
    results, end, _ = done
    assert len(cl.segments.segments) == 2
    assert [r.phys_offset for r in results][0] == SEG  # all in the new segment, after the old one's filler
    assert end == SEG + sum(r.wrote_bytes for r in results)
    assert room < sum(r.wrote_bytes for r in results)
    assert [r.queue_offset for r in results][0] + 1 == results[3].queue_offset  # queue 0 twice, in order
    table = dict(cl.topic_queue_table)
    assert cl.append_singles([m(3, 2000)] * 9) is None  # ≈ 18 kB > one 16 kB segment
    assert cl.topic_queue_table == table


def test_append_singles_declined_mid_run_gives_back_the_queue_offsets() -> None:
    """A header field out of its Java range in the third message (flag 2^31): the run is declined with no queue
    offset taken (the native loop checks the fields before the segment pick; a queue offset past int64, found while
    writing, gives back what the run took: test_native_append_singles_equals_its_python_twin)."""
    cl = _big_log()

    def m(queue_id: int, flag: int = 0) -> MessageInner:
        return MessageInner("T", queue_id, b"x", {}, flag, 0, 1, "127.0.0.1:5555", "127.0.0.1:10911", 0, 0)

    cl.append([m(0)])
    table, end = dict(cl.topic_queue_table), cl.max_offset
    assert table == {"T-0": 1}
    assert cl.append_singles([m(0), m(1), m(2, flag=2**31)]) is None
    assert cl.topic_queue_table == table
    assert cl.max_offset == end
    assert [cl.append([x]).result.queue_offset for x in (m(0), m(1))] == [1, 0]


_odd_props = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "A", "é"]),
                             st.one_of(st.sampled_from(["", "x", "TagA", "k1 k2", "ü" * 3]), st.none(), st.integers(0, 9)),
                             max_size=4)
_odd_msg = st.builds(
    MessageInner,
    topic=st.sampled_from(["T", "T", "Other", SCHEDULE_TOPIC, "é" * 70, ""]),
    queue_id=st.sampled_from([0, 1, True, 2**31, -1]),
    body=st.one_of(st.binary(max_size=2100), st.builds(bytearray, st.binary(max_size=20))),
    properties=st.one_of(_props, _odd_props),
    flag=st.sampled_from([0, 7, 2**31, -(2**31)]),
    sys_flag=st.sampled_from([0, 0, 0x4, 0x8, 0xC, 0x10, 2**40]),
    born_timestamp=st.sampled_from([0, 1, 2**40, 2**63]),
    born_host=st.sampled_from(["127.0.0.1:5555", "[::1]:7", "bad"]),
    store_host=st.sampled_from(["127.0.0.1:10911", "10.0.0.2:10911"]),
    reconsume_times=st.sampled_from([0, 1]),
    prepared_transaction_offset=st.sampled_from([0, 99, 2**63]),
)
_plain_msg = st.builds(  # what the native loop takes whole: the common send
    MessageInner,
    topic=st.sampled_from(["T", "T", "Other", "é" * 40]),
    queue_id=st.sampled_from([0, 0, 1, 2]),
    body=st.binary(max_size=1500),
    properties=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "A", "é"]),
                               st.sampled_from(["", "x", "TagA", "k1 k2", "ü" * 3, "\U0001f600"]), max_size=4),
    flag=st.sampled_from([0, 7]),
    sys_flag=st.sampled_from([0, 0x8, 0x10, 0x30]),
    born_timestamp=st.integers(0, 2**41),
    born_host=st.sampled_from(["127.0.0.1:5555", "[::1]:7"]),
    store_host=st.sampled_from(["127.0.0.1:10911", "10.0.0.2:10911"]),
    reconsume_times=st.sampled_from([0, 3]),
    prepared_transaction_offset=st.sampled_from([0, 99]),
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_native_append_singles_equals_its_python_twin(data: st.DataObject) -> None:
    """The native append_singles and append_singles_py, fed the same runs (odd ones too: non-str properties,
    out-of-range fields, bools, bytearray bodies, the schedule topic, unknown hosts, a queue table near its end)
    answer alike: the same decline, or the same results, dispatch requests, queue table and bytes."""
    native, twin = _big_log(), _big_log()
    if data.draw(st.booleans()):
        for cl in (native, twin):
            cl.topic_queue_table["T-0"] = 2**63 - 1  # the next offset taken overflows the record field
    for _ in range(data.draw(st.integers(1, 6))):
        msgs = data.draw(st.lists(_plain_msg if data.draw(st.booleans()) else st.one_of(_plain_msg, _odd_msg),
                                  min_size=1, max_size=6))
        try:
            got = native.append_singles(msgs)
        except Exception as e:  # noqa: BLE001 - the twin must raise the same kind
            got = type(e)
        try:
            want = twin.append_singles_py(msgs)
        except Exception as e:  # noqa: BLE001
            want = type(e)
        assert got == want
        assert native.topic_queue_table == twin.topic_queue_table
        assert native.max_offset == twin.max_offset
    for sf, sr in zip(native.segments.segments, twin.segments.segments, strict=True):
        assert sf.wrote_position == sr.wrote_position
        assert bytes(sf.buf[: sf.wrote_position]) == bytes(sr.buf[: sr.wrote_position])


def test_common_run_takes_the_native_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the extension built, a run of plain sends never reaches the Python twin (else the twin test above
    would compare the twin with itself)."""
    if commitlog_module._append_singles_native is None:
        pytest.skip("the native extension is not built")
    cl = _big_log()

    def twin(msgs: list[MessageInner]) -> None:
        raise AssertionError("the Python twin ran")

    monkeypatch.setattr(cl, "append_singles_py", twin)
    msgs = [MessageInner("T", q, b"body", {"TAGS": "A", "UNIQ_KEY": f"K{q}"}, 0, 0, 1, "127.0.0.1:5555",
                         "127.0.0.1:10911", 0, 0) for q in range(4)]
    done = cl.append_singles(msgs)
    assert done is not None
    results, end, requests = done
    assert [r.queue_offset for r in results] == [0, 0, 0, 0]
    assert [r.uniq_key for r in requests] == ["K0", "K1", "K2", "K3"]
    assert end == cl.max_offset


def test_a_batch_is_written_by_the_native_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SEND_BATCH_MESSAGE run (one queue) goes through the native append_singles and is answered as one put: one
    result with every msgId and the first queue offset, one dispatch request per message. (That it equals the
    general path is test_fast_path_equals_general_path.)"""
    if commitlog_module._append_singles_native is None:
        pytest.skip("the native extension is not built")
    cl = _big_log()
    calls: list[int] = []
    native = commitlog_module._append_singles_native

    def counted(msgs: list[MessageInner], *args: object) -> object:
        calls.append(len(msgs))
        return native(msgs, *args)

    monkeypatch.setattr(commitlog_module, "_append_singles_native", counted)
    msgs = [MessageInner("T", 2, b"body%d" % i, {"UNIQ_KEY": f"K{i}"}, 0, 0, 1, "127.0.0.1:5555",
                         "127.0.0.1:10911", 0, 0) for i in range(5)]
    cl.append([msgs[0]])  # queue offset 0 taken by a single first
    done = cl.append(msgs)
    assert calls == [1, 5]
    assert done.result.status is PutStatus.PUT_OK and done.result.msg_count == 5
    assert done.result.queue_offset == 1 and [r.queue_offset for r in done.requests] == [1, 2, 3, 4, 5]
    assert len(done.result.msg_ids) == 5 and done.end_offset == cl.max_offset
    assert done.result.wrote_bytes == sum(r.size for r in done.requests)
