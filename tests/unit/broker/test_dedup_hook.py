"""De-duplication hook and table (pure parts): window/size eviction, group matching, batches, snapshot."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services import dedup as dedup_mod
from orbitmq.broker.services.dedup import CHUNK, DedupService, DedupTable, encode_entry, table_key
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.store import MessageInner, PutResult, PutStatus


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms


def _svc(tmp_path: Any, **cfg: Any) -> tuple[DedupService, _Clock, Any]:
    ctx = SimpleNamespace(config=BrokerConfig(broker_ip1="127.0.0.1", **cfg), stats=BrokerStats(), send_hooks=[],
                          role_listeners=[])
    clock = _Clock()
    env = SimpleNamespace(clock=clock, config_dir=str(tmp_path), store_config=None, writes=BackgroundWrites())
    return DedupService(ctx, env), clock, ctx  # type: ignore[arg-type]


def _req(group: str = "PG") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": group, "b": "T"})


def _msg(key: str | None, topic: str = "T", reconsume: int = 0, **props: str) -> MessageInner:
    p = dict(props)
    if key is not None:
        p[Prop.UNIQ_KEY] = key
    return MessageInner(topic, 2, b"x", p, reconsume_times=reconsume)


def _k(uniq: str, topic: str = "T") -> str:
    """The table key of a message with UNIQ_KEY `uniq` sent to `topic`."""
    return table_key(uniq, topic, {})


def _stored(n: int, qoff: int = 7) -> PutResult:
    return PutResult(PutStatus.PUT_OK, 100, 10 * n, [f"ID{i}" for i in range(n)], qoff, n, 1_000_000)


def test_retry_answered_with_the_original_result(tmp_path: Any) -> None:
    svc, clock, ctx = _svc(tmp_path)
    msgs = [_msg("K1")]
    assert svc.before_put(None, _req(), msgs) is None
    svc.after_put(None, _req(), msgs, _stored(1))
    resp = svc.before_put(None, _req(), [_msg("K1")])
    assert resp is not None and resp.code == 0
    assert resp.ext_fields["msgId"] == "ID0" and resp.ext_fields["queueId"] == "2"
    assert resp.ext_fields["queueOffset"] == "7"
    assert ctx.stats.counters["dedupHits"] == 1
    assert ctx.stats.runtime_info()["dedupHits"] == "1"
    assert svc.before_put(None, _req("OtherGroup"), [_msg("K1")]) is None  # per producer group
    clock.ms += 300_001  # past the window
    assert svc.before_put(None, _req(), [_msg("K1")]) is None


def test_failed_puts_retries_and_missing_keys_are_not_remembered(tmp_path: Any) -> None:
    svc, _, _ = _svc(tmp_path)
    svc.after_put(None, _req(), [_msg("K1")], PutResult(PutStatus.SERVICE_NOT_AVAILABLE, 0, 0, [], 0, 0, 0))
    assert svc.before_put(None, _req(), [_msg("K1")]) is None
    svc.after_put(None, _req(), [_msg("K2", topic="%RETRY%G", reconsume=1)], _stored(1))
    assert svc.before_put(None, _req(), [_msg("K2", topic="%RETRY%G", reconsume=1)]) is None
    svc.after_put(None, _req(), [_msg(None)], _stored(1))
    assert len(svc.table) == 0


def test_delayed_message_answers_its_real_queue(tmp_path: Any) -> None:
    svc, _, _ = _svc(tmp_path)
    m = _msg("K", topic="SCHEDULE_TOPIC_XXXX", **{Prop.REAL_TOPIC: "T", Prop.REAL_QID: "3"})
    svc.after_put(None, _req(), [m], _stored(1))
    resp = svc.before_put(None, _req(), [m])
    assert resp is not None and resp.ext_fields["queueId"] == "3"


def test_batch_only_when_every_message_was_seen(tmp_path: Any) -> None:
    svc, _, _ = _svc(tmp_path)
    batch = [_msg("B1"), _msg("B2"), _msg("B3")]
    svc.after_put(None, _req(), batch, _stored(3, qoff=10))
    resp = svc.before_put(None, _req(), [_msg("B1"), _msg("B2"), _msg("B3")])
    assert resp is not None
    assert resp.ext_fields["msgId"] == "ID0,ID1,ID2" and resp.ext_fields["queueOffset"] == "10"
    assert svc.before_put(None, _req(), [_msg("B1"), _msg("NEW")]) is None


def test_table_eviction_by_size_and_snapshot_roundtrip(tmp_path: Any) -> None:
    t = DedupTable(window_ms=1000, max_entries=3)
    for i in range(5):
        t.put(f"k{i}", encode_entry("G", 100 + i, f"id{i}", 0, i))
    t.evict(100)
    assert list(t.entries) == ["k2", "k3", "k4"]
    t.put("k2", encode_entry("G", 200, "id2b", 0, 9))  # re-inserted at the young end
    assert list(t.entries) == ["k3", "k4", "k2"]
    data = t.to_json(1234)
    t2 = DedupTable(window_ms=1000, max_entries=3)
    assert t2.load_json(data, now=1104) == 1234
    assert list(t2.entries) == ["k4", "k2"]  # k3 (ts 103) expired at now=1104
    assert t2.find("G", "k2", 1104) == ("G", 200, "id2b", 0, 9)
    assert t2.find("H", "k2", 1104) is None
    t2.put("k5", encode_entry(None, 1100, "id5", 1, 1))  # rebuilt from the CommitLog: any group matches
    assert t2.find("H", "k5", 1104) is not None


def test_snapshot_file_written_and_reloaded(tmp_path: Any) -> None:
    svc, _, _ = _svc(tmp_path)
    svc.ctx.store = _store_ns()
    svc.env.store_config = SimpleNamespace(mapped_file_size_commitlog=1 << 20)
    svc.after_put(None, _req(), [_msg("K1")], _stored(1))
    import asyncio
    asyncio.run(svc.stop())
    svc2, _, _ = _svc(tmp_path)
    svc2.ctx.store = svc.ctx.store
    svc2.env.store_config = svc.env.store_config
    svc2.rebuild()
    resp = svc2.before_put(None, _req(), [_msg("K1")])
    assert resp is not None and resp.ext_fields["msgId"] == "ID0"


def test_after_put_remembers_what_the_per_message_rules_say(tmp_path: Any) -> None:
    """A batch (shared topic) and a mixed list: each message is remembered exactly when _dedupable says so,
    with its own msg id and queue offset; a key seen again moves to the young end; no msg id, no entry."""
    from orbitmq.broker.services.dedup import _dedupable

    svc, _clock, _ctx = _svc(tmp_path)
    svc.table.put("OLD", encode_entry("PG", 999_999, "X", 0, 0))
    svc.table.put(_k("K0"), encode_entry("PG", 999_999, "X", 0, 0))
    msgs = [
        _msg("K0"), _msg(None), _msg("K2", **{Prop.REAL_TOPIC: "%RETRY%G"}), _msg("K3", **{Prop.REAL_TOPIC: "T"}),
        _msg("K4", topic="%DLQ%G"), _msg("K5", reconsume=1), _msg("K6", topic="RMQ_SYS_TRANS_OP_HALF_TOPIC"),
        _msg("K7", topic="U"), _msg("K8"),
    ]
    svc.after_put(None, _req(), msgs, _stored(8))  # K8 has no msg id
    expected = [table_key(u, m.topic, m.properties) for m in msgs[:8]
                if (u := m.properties.get(Prop.UNIQ_KEY)) and _dedupable(m.topic, m.properties, m.reconsume_times)]
    assert expected == [_k("K0"), _k("K3"), _k("K7", "U")]
    assert list(svc.table.entries) == ["OLD", *expected]
    assert svc.table.get(_k("K3")) == ("PG", 1_000_000, "ID3", 2, 10)
    assert svc.table.get(_k("K7", "U")) == ("PG", 1_000_000, "ID7", 2, 14)

    retry_batch = [_msg(f"R{i}", topic="%RETRY%G") for i in range(3)]
    svc.after_put(None, _req(), retry_batch, _stored(3))
    consumer_retries = [_msg(f"C{i}", reconsume=2) for i in range(3)]
    svc.after_put(None, _req(), consumer_retries, _stored(3))
    assert list(svc.table.entries) == ["OLD", *expected]


def test_single_send_fast_path_remembers_what_the_batch_loop_does(tmp_path: Any) -> None:
    """after_put of one message (its own fast path) leaves the same table entries as the per-message loop of a
    longer put (the same message followed by one without a key, which the loop skips)."""
    cases = [
        _msg("K0"), _msg(None), _msg("K2", **{Prop.REAL_TOPIC: "%RETRY%G"}),
        _msg("K3", **{Prop.REAL_TOPIC: "T", Prop.REAL_QID: "5"}), _msg("K4", **{Prop.REAL_TOPIC: "T2"}),
        _msg("K5", **{Prop.REAL_TOPIC: "", Prop.REAL_QID: "x"}), _msg("K6", topic="%DLQ%G"),
        _msg("K7", reconsume=1), _msg("K8", topic="RMQ_SYS_TRANS_OP_HALF_TOPIC"), _msg("K9", topic="U"),
    ]
    for status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.SERVICE_NOT_AVAILABLE):
        for ids in (1, 0):
            single, _c1, _x1 = _svc(tmp_path / "s")
            loop, _c2, _x2 = _svc(tmp_path / "l")
            for m in cases:
                r1 = PutResult(status, 100, 10, [f"ID{m.properties.get(Prop.UNIQ_KEY)}"] * ids, 7, 1, 1_000_000)
                r2 = PutResult(status, 100, 20, r1.msg_ids + ["IDX"] * ids, 7, 2, 1_000_000)
                single.after_put(None, _req(), [m], r1)
                loop.after_put(None, _req(), [m, _msg(None)], r2)
            assert list(single.table.entries.items()) == list(loop.table.entries.items())
            assert (len(single.table) > 0) == (status is not PutStatus.SERVICE_NOT_AVAILABLE and ids == 1)


_MAPS = ["native", "python"] if dedup_mod._native is not None else ["python"]


@pytest.mark.parametrize("impl", _MAPS)
def test_eviction_skips_stale_positions_and_gives_memory_back(impl: str) -> None:
    t = DedupTable(window_ms=1000, max_entries=100_000, native=impl == "native")
    for i in range(20_000):
        t.put(f"k{i}", encode_entry("G", 100, f"id{i}", 0, i))
    t.put("k5", encode_entry("G", 500, "id5b", 0, 99))  # re-put: its first position is stale
    assert t.position == 20_001 and len(t) == 20_000
    assert [k for k, _ in t.rows(1020, 1030)] == [f"k{i}" for i in range(1020, 1030)]
    assert [k for k, _ in t.rows(0, 10)] == [f"k{i}" for i in range(10) if i != 5]  # the stale position skipped
    assert t.rows(20_000, 20_001) == [("k5", encode_entry("G", 500, "id5b", 0, 99))]
    t.evict(1150)  # ts 100 expired, ts 500 not
    got = t.get("k5")
    assert list(t.entries) == ["k5"] and got is not None and got[2] == "id5b"
    assert t.evicted_position == 20_000 and [k for k, _ in t.rows(0, t.position)] == ["k5"]
    if impl == "python":
        m = t.entries
        assert m.dups == {} and m.base == 19 * CHUNK and m.chunks == [] and m.tail[-1] == "k5"  # chunks dropped
    t.evict(1600)
    assert len(t) == 0 and t.evicted_position == t.position == 20_001


@pytest.mark.skipif(dedup_mod._native is None, reason="the native map needs the extension")
def test_native_map_shrinks_after_a_burst() -> None:
    """A burst grows the arrays; once it is evicted they are given back (not kept at the burst's size)."""
    t = DedupTable(window_ms=1000, max_entries=1_000_000, native=True)
    for i in range(100_000):
        t.put(f"{i:032X}\x1fTopicA", encode_entry("ProducerGroupA", 1000, f"7F00000100002A9F{i:016X}", 1, i))
    grown = t.entries.nbytes
    assert grown > 8 << 20
    assert grown < 100_000 * 260  # compact: a dict of str took ≈ 340 B per entry
    t.put("late\x1fTopicA", encode_entry("G", 5000, "id", 0, 0))
    t.evict(5500)
    assert list(t.entries) == ["late\x1fTopicA"] and t.entries.nbytes < grown // 8


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(dedup_mod._native is None or not os.path.exists("/proc/self/status"),
                    reason="the native map's memory, read from Linux's /proc")
def test_native_map_memory_follows_its_records() -> None:
    """200,000 entries of the batch path's shape (168-byte records, 33.6 MB) take a ring of at most 1.5 times that,
    not the next power of two (64 MiB, which a wrapping ring makes resident); the rings freed while growing, and the
    arrays freed by clear(), go back to the system instead of staying in the heap."""
    t = DedupTable(window_ms=1000, max_entries=1_000_000, native=True)
    before = _rss_anon()
    for i in range(200_000):
        t.put(f"{i:032X}\x1fbench-orbitmq-async-1764212345",
              encode_entry("bench-producer", 1_764_212_345_000, f"7F00000100002A9F{i:016X}", 1, 100_000 + i))
    records = 200_000 * 168
    index_and_positions = (8 + 4) << 20  # 2^19 slots of 16 B (load <= 1/2), 2^19 positions of 8 B
    assert t.entries.nbytes <= records * 3 // 2 + index_and_positions + (2 << 20)
    assert _rss_anon() - before <= t.entries.nbytes + (8 << 20)
    t.clear()  # with malloc'd arrays, 15 MiB stayed resident here; as mappings of their own, 1.4 MiB
    assert _rss_anon() - before <= 6 << 20


@pytest.mark.parametrize("impl", _MAPS)
def test_table_holds_no_gc_tracked_container_but_its_tail(impl: str) -> None:
    """The table must stay out of the cyclic GC's way: no GC-tracked object per entry, no tracked container but
    the Python map's short tail."""
    import gc

    t = DedupTable(window_ms=10_000, max_entries=100_000, native=impl == "native")
    for i in range(5000):
        t.put(f"key-{i}", encode_entry("PG" if i % 2 else None, 1000 + i, f"ID{i}", i % 4, i))
    gc.collect()
    assert not gc.is_tracked(t.entries) if impl == "native" else not gc.is_tracked(t.entries._entries)
    if impl == "python":
        assert t.entries.chunks and not any(gc.is_tracked(c) for c in t.entries.chunks)
    assert t.get("key-7") == ("PG", 1007, "ID7", 3, 7) and t.get("key-8") == (None, 1008, "ID8", 0, 8)


def _store_ns() -> SimpleNamespace:
    return SimpleNamespace(confirm_offset=0, min_phys_offset=0, look_message_by_offset=lambda p: None)


def _journal_svc(tmp_path: Any, **cfg: Any) -> tuple[DedupService, _Clock]:
    svc, clock, _ = _svc(tmp_path, **cfg)
    svc.ctx.store = _store_ns()
    svc.env.store_config = SimpleNamespace(mapped_file_size_commitlog=1 << 20)
    return svc, clock


def _reloaded(tmp_path: Any, clock: _Clock, **cfg: Any) -> DedupService:
    svc2, clock2 = _journal_svc(tmp_path, **cfg)
    clock2.ms = clock.ms
    svc2.rebuild()
    return svc2


def test_journal_tick_survives_evictions_and_reputs_between_slices(tmp_path: Any, monkeypatch: Any) -> None:
    import asyncio

    from orbitmq.broker.services import dedup

    monkeypatch.setattr(dedup, "SNAPSHOT_SLICE", 10)
    svc, clock = _journal_svc(tmp_path)
    svc.rebuild()  # empty table: generation 1 starts
    table = svc.table
    for i in range(100):
        table.put(f"k{i}", encode_entry("PG", clock.ms - 1000 + i, f"id{i}", 0, i))
    appended: list[tuple[bytes, int, int]] = []
    real_append = svc.journal.append

    def spy(lines: list[bytes], position: int, rows: int, evicted: int) -> None:
        assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
        appended.append((b"".join(lines), position, rows))
        real_append(lines, position, rows, evicted)

    svc.journal.append = spy  # type: ignore[method-assign]

    async def run() -> None:
        tick = asyncio.ensure_future(svc.snapshot())
        await asyncio.sleep(0)  # the first slice is encoded: now change the table under the walk
        table.put("k50", encode_entry("PG", clock.ms, "id50b", 0, 500))  # re-put: moves to the young end
        del table.entries["k60"]  # gone (as an eviction would)
        table.put("new", encode_entry("PG", clock.ms, "idn", 0, 1))  # added after the walk started: the next tick's
        await tick
        await svc.snapshot()  # the next tick: only what came after the first one's end
        await svc.snapshot()  # nothing new: no line

    asyncio.run(run())
    # k50's first position is stale once it is put again: its row goes out with the next tick, once
    assert [(pos, rows) for _, pos, rows in appended] == [(0, 98), (100, 2)]
    first, second = appended[0][0], appended[1][0]
    assert b'"k50"' not in first and b'"k60"' not in first and b'"new"' not in first
    assert b'"k50"' in second and b'"new"' in second
    loaded = _reloaded(tmp_path, clock).table
    assert set(loaded.entries) == {f"k{i}" for i in range(100)} - {"k60"} | {"new"}
    assert loaded.get("k50") == ("PG", clock.ms, "id50b", 0, 500)
    assert list(loaded.entries)[-2:] == ["k50", "new"]  # the young end as it was


def test_journal_drops_evicted_segments_and_a_start_compacts_into_a_new_generation(tmp_path: Any) -> None:
    import asyncio
    import os

    svc, clock = _journal_svc(tmp_path, dedup_max_entries=50)
    svc.journal.segment_rows = 20
    svc.rebuild()

    async def fill() -> None:
        for batch in range(10):  # 10 ticks of 20 keys; the table keeps the youngest 50
            for i in range(20):
                svc.after_put(None, _req(), [_msg(f"b{batch}k{i}")], _stored(1))
            await svc.snapshot()

    asyncio.run(fill())
    jdir = tmp_path / "dedup"
    names = sorted(os.listdir(jdir))
    assert len(names) <= 4 and all(n.startswith("0000000001-") for n in names)  # evicted segments deleted
    assert svc.journal.segment_count == len(names)
    svc2 = _reloaded(tmp_path, clock, dedup_max_entries=50)
    assert list(svc2.table.entries) == list(svc.table.entries)  # same keys, same order
    assert svc2.before_put(None, _req(), [_msg("b9k19")]) is not None  # group kept: it answers PG
    [name] = os.listdir(jdir)  # one compacted generation, starting at the loaded table's first live position
    assert name == f"0000000002-{svc2.table.evicted_position:020d}.jsonl"


def test_journal_skips_a_torn_line_and_replaces_a_legacy_snapshot(tmp_path: Any, caplog: Any) -> None:
    import asyncio
    import os

    # the whole-table snapshot of earlier versions (format version 1): keys without the topic, so its rows are not
    # loaded (the CommitLog's window is scanned instead, see test_old_format_journal_rescans_the_window)
    (tmp_path / "dedup.json").write_bytes(
        b'{"version":1,"physOffset":0,"entries":[["L1","PG",1000000,"idL",1,4],["L0",null,999000,"idL0",0,3]]}')
    svc, clock = _journal_svc(tmp_path)
    svc.rebuild()
    assert len(svc.table) == 0
    assert not (tmp_path / "dedup.json").exists()  # read, then replaced by the journal
    svc.after_put(None, _req(), [_msg("K1")], _stored(1))
    asyncio.run(svc.snapshot())
    svc.after_put(None, _req(), [_msg("K2")], _stored(1))
    asyncio.run(svc.snapshot())
    [seg] = (tmp_path / "dedup").iterdir()  # the start's table, then one line per tick
    data = seg.read_bytes()
    assert data.count(b"\n") == 3
    seg.write_bytes(data[: len(data) - 9])  # the last append torn by a crash
    svc2 = _reloaded(tmp_path, clock)
    assert _k("K1") in svc2.table.entries and _k("K2") not in svc2.table.entries
    assert "1 unreadable line(s) skipped" in caplog.text
    assert len(os.listdir(tmp_path / "dedup")) == 1


def test_failed_journal_append_is_written_by_the_next_tick(tmp_path: Any) -> None:
    import asyncio

    svc, clock = _journal_svc(tmp_path)
    svc.rebuild()
    real_append = svc.journal.append
    calls = []

    def failing(*a: Any) -> None:
        calls.append(a)
        raise OSError(28, "No space left on device")

    svc.after_put(None, _req(), [_msg("K1")], _stored(1))
    svc.journal.append = failing  # type: ignore[method-assign]
    asyncio.run(svc.snapshot())
    svc.journal.append = real_append  # type: ignore[method-assign]
    svc.after_put(None, _req(), [_msg("K2")], _stored(1))
    asyncio.run(svc.snapshot())
    assert len(calls) == 1
    assert {_k("K1"), _k("K2")} <= set(_reloaded(tmp_path, clock).table.entries)


def test_entry_encoding_roundtrips() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from orbitmq.broker.services.dedup import SEP, decode_entry

    names = st.text(st.characters(blacklist_characters=SEP, blacklist_categories=("Cs",)), max_size=30)

    @given(st.none() | names, st.integers(0, 2**62), names, st.integers(0, 2**31), st.integers(0, 2**62))
    def roundtrip(group: str | None, ts: int, msg_id: str, qid: int, qoff: int) -> None:
        assert decode_entry(encode_entry(group, ts, msg_id, qid, qoff)) == (group, ts, msg_id, qid, qoff)

    roundtrip()


def test_journal_writev_finishes_short_writes(tmp_path: Any, monkeypatch: Any) -> None:
    import os

    from orbitmq.broker.services import dedup_journal

    real_writev = os.writev

    def short_writev(fd: int, bufs: list[Any]) -> int:  # a regular file may accept less than asked
        return real_writev(fd, [bytes(b"".join(bytes(b) for b in bufs)[:7])])

    monkeypatch.setattr(dedup_journal.os, "writev", short_writev)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        dedup_journal._write_all(fd, [b"abc", b"", b"defghijklmnop", b"q\n"])
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abcdefghijklmnopq\n"


def test_a_retry_while_the_original_waits_for_its_flush_gets_the_original_answer(tmp_path: Any) -> None:
    async def main() -> None:
        svc, _, ctx = _svc(tmp_path)
        first = _req()
        msgs = [_msg("K1")]
        assert svc.before_put(None, first, msgs) is None
        svc.after_append(None, first, msgs, _stored(1))  # in the CommitLog, waiting for the group commit
        waiting = svc.before_put(None, _req(), [_msg("K1")])
        assert waiting is not None and not isinstance(waiting, RemotingCommand)  # an awaitable answer
        task = asyncio.ensure_future(waiting)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()  # no SEND_OK before the original is flushed
        svc.after_put(None, first, msgs, PutResult(PutStatus.FLUSH_DISK_TIMEOUT, 100, 10, ["ID0"], 7, 1, 1_000_000))
        resp = await asyncio.wait_for(task, 5)
        assert resp.code == 10 and resp.ext_fields["msgId"] == "ID0"  # FLUSH_DISK_TIMEOUT, like the original
        assert svc.table.position == 1 and len(svc.table) == 1  # remembered once, at append time
        later = svc.before_put(None, _req(), [_msg("K1")])
        assert isinstance(later, RemotingCommand) and later.code == 0  # settled: answered at once
        assert ctx.stats.counters["dedupHits"] == 2

    asyncio.run(main())
