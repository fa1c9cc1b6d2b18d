"""Raft broker groups (issue 14): snapshot codec, the CommitLog-backed Raft log and the group state machine over real
MessageStores (records stored once, the same bytes on every member, visible only once applied, conflicting suffixes
cut, restart), command hooks and the configuration checks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError, CorruptionError, ProtocolError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.raft_mode.codec import MESSAGES, decode_snapshot, encode_command, encode_snapshot
from orbitmq.broker.raft_mode.commitlog_log import RECORDS, CommitLogRaftStorage, decode_records
from orbitmq.broker.raft_mode.service import follower_broker_id, group_peers, slave_read_target
from orbitmq.broker.raft_mode.state_machine import GroupStateMachine
from orbitmq.raft.messages import Entry, HardState, Ready
from orbitmq.store import MessageStore, StoreConfig
from orbitmq.store.results import MessageInner


def test_snapshot_codec_and_command_types() -> None:
    with pytest.raises(ValueError, match="outside"):
        encode_command(MESSAGES, b"")
    assert decode_snapshot(encode_snapshot(7, 12345)) == (7, 12345, {})
    with_parts = encode_snapshot(7, 12345, {0x10: b"a", 0x11: b""})
    assert decode_snapshot(with_parts) == (7, 12345, {0x10: b"a", 0x11: b""})
    with pytest.raises(ProtocolError):
        decode_snapshot(b"ORGX" + bytes(21))
    with pytest.raises(ProtocolError, match="truncated"):
        decode_snapshot(with_parts[:-1])
    with pytest.raises(ProtocolError, match="trailing"):
        decode_snapshot(with_parts + b"x")


def _store(path: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(path), mapped_file_size_commitlog=64 * 1024,
                                     max_message_size=16 * 1024, mapped_file_size_consume_queue=1000 * 20))
    store.load()
    return store


async def _no_fetch(target: int) -> None:
    raise AssertionError(f"unexpected fetch up to {target}")


class _Member:
    """One member's store + CommitLogRaftStorage + state machine, driven by hand (no RaftNode)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = _store(path / "store")
        self.log = CommitLogRaftStorage(str(path / "dledger"), self.store, _no_fetch)
        self.sm = GroupStateMachine(self.store, self.log)
        self.hs, self.snap, self.entries = self.log.load()
        self.log.loaded()

    async def persist(self, entries: list[Entry], commit: int, term: int = 1) -> None:
        rd = Ready(hard_state=HardState(term, "", commit), entries=entries)
        await self.log.prepare(rd)
        self.log.save(rd)

    def visible(self, topic: str = "T") -> int:
        return sum(n for (t, _), n in self.store.cq_table.queue_max_offsets().items() if t == topic)

    async def close(self) -> None:
        self.log.close()
        await self.store.shutdown()


def _msgs(n: int, start: int = 0, size: int = 600) -> list[MessageInner]:
    return [MessageInner("T", i % 2, bytes([65 + i % 26]) * size + b"-%d" % i, {"KEYS": f"k{i}"},
                         born_host="127.0.0.1:5000", store_host="127.0.0.1:10911") for i in range(start, start + n)]


def test_records_are_stored_once_in_the_commitlog_and_the_raft_log_keeps_references(tmp_path: Path) -> None:
    """A leader's put writes its records into the CommitLog (invisible), the RECORDS entry carries those bytes; a
    follower writes the same bytes at the same offset; apply makes them visible; the Raft log files hold references,
    not the bodies (a second copy would put each body in dledger/ too); a restart rebuilds the entries from the
    CommitLog and keeps committed records visible and the uncommitted one hidden."""
    async def main() -> None:
        lead, fol = _Member(tmp_path / "a"), _Member(tmp_path / "b")
        await lead.store.start()
        await fol.store.start()
        try:
            entries: list[Entry] = []
            for i in range(12):  # 12 x 600 B in 64 KiB segments: crosses a segment end (a BLANK filler in an entry)
                data, result = lead.log.put_local(_msgs(10, 10 * i), term=1)
                assert data is not None and result.ok and data[0] == RECORDS
                entries.append(Entry(1, i + 1, data))
            assert lead.visible() == 0  # nothing visible before the commit
            await lead.persist(entries, commit=0)
            await fol.persist(entries, commit=0)
            end = lead.store.max_phys_offset
            assert end > 64 * 1024 and fol.store.max_phys_offset == end
            assert lead.store.read_commitlog(0, 4096) == fol.store.read_commitlog(0, 4096)
            assert lead.store.read_commitlog(64 * 1024, 4096) == fol.store.read_commitlog(64 * 1024, 4096)
            for e in entries[:10]:
                r_lead = lead.sm.apply(e.index, e.data)
                fol.sm.apply(e.index, e.data)
                assert isinstance(r_lead, tuple) and r_lead[0].ok
            assert lead.visible() == fol.visible() == 100
            await lead.persist([], commit=10)
            await fol.persist([], commit=10)
            body = _msgs(1, 37)[0].body
            raft_bytes = b"".join(p.read_bytes() for p in (tmp_path / "b" / "dledger").rglob("*") if p.is_file())
            nonzero = len(raft_bytes) - raft_bytes.count(0)  # segments are preallocated (zeros)
            assert body not in raft_bytes and nonzero < 4096, nonzero  # references, no bodies (120 kB of bodies)
            commitlog = b"".join(p.read_bytes() for p in (tmp_path / "b" / "store" / "commitlog").iterdir())
            assert commitlog.count(body) == 1
        finally:
            await lead.close()
            await fol.close()
        again = _Member(tmp_path / "b")
        await again.store.start()
        try:
            assert [e.data for e in again.entries] == [e.data for e in entries]  # rebuilt from the CommitLog
            assert again.store.max_phys_offset == end
            assert again.visible() == 0  # hidden until applied again
            for e in again.entries[:10]:
                again.sm.apply(e.index, e.data)
            assert again.visible() == 100  # entries 11 and 12 (uncommitted) stay hidden
            snap = again.sm.snapshot()
            assert decode_snapshot(snap)[:2] == (10, again.log.ends[10])
        finally:
            await again.close()

    asyncio.run(main())


def test_conflicting_suffix_is_cut_from_the_commitlog_and_bytes_past_the_log_go_at_start(tmp_path: Path) -> None:
    async def main() -> None:
        old, new, fol = _Member(tmp_path / "old"), _Member(tmp_path / "new"), _Member(tmp_path / "f")
        for m in (old, new, fol):
            await m.store.start()
        try:
            first, _ = old.log.put_local(_msgs(3), term=1)
            assert first is not None
            base = Entry(1, 1, first)
            await new.persist([base], commit=0)  # the new leader has entry 1 from the old one
            stale, _ = old.log.put_local(_msgs(3, 100), term=1)
            assert stale is not None
            await fol.persist([base, Entry(1, 2, stale)], commit=1)
            fol.sm.apply(1, first)
            cut_at = fol.log.ends[1]  # entry 2 (stale) ends after it
            assert fol.visible() == 3
            # the new leader writes a different entry 2: the follower's stale one is cut first
            await new.persist([], commit=0)
            new.log.put_local(_msgs(1, 500), term=2)  # a put whose proposal never made it (leadership lost)
            fresh, _ = new.log.put_local(_msgs(2, 200), term=3)  # leader again: what term 2 left is cut first
            assert fresh is not None and new.log.truncated_bytes > 0
            await fol.persist([Entry(3, 2, fresh)], commit=1, term=3)
            assert fol.log.truncated_bytes > 0
            assert fol.store.read_commitlog(0, cut_at) == old.store.read_commitlog(0, cut_at)
            fol.sm.apply(2, fresh)
            assert fol.visible() == 5
            visible, _ = decode_records(fol.log._read(0, fol.store.confirm_offset), 0)
            assert [m.body for m in visible] == [m.body for m in _msgs(3) + _msgs(2, 200)]
            # bytes written but never logged (a put whose entry a crash lost) are cut at the next start
            fol.log.put_local(_msgs(2, 300), term=3)
            tail = fol.store.max_phys_offset
        finally:
            for m in (old, new, fol):
                await m.close()
        again = _Member(tmp_path / "f")
        await again.store.start()
        try:
            assert again.store.max_phys_offset < tail and again.store.max_phys_offset == again.log.ends[2]
        finally:
            await again.close()

    asyncio.run(main())


def test_a_committed_reference_without_its_bytes_refuses_to_start(tmp_path: Path) -> None:
    async def main() -> None:
        m = _Member(tmp_path / "m")
        await m.store.start()
        data, _ = m.log.put_local(_msgs(3), term=1)
        assert data is not None
        await m.persist([Entry(1, 1, data)], commit=1)
        await m.close()
        seg = next((tmp_path / "m" / "store" / "commitlog").iterdir())
        raw = bytearray(seg.read_bytes())
        raw[:4096] = bytes(4096)  # the committed records are gone (the store sees an empty CommitLog)
        seg.write_bytes(bytes(raw))
        with pytest.raises(CorruptionError, match="committed Raft entry 1"):
            _Member(tmp_path / "m")

    asyncio.run(main())


def test_command_hook_and_unknown_types() -> None:
    sm = GroupStateMachine(None, None)  # type: ignore[arg-type]  # command entries touch neither
    calls: list[tuple[int, bytes]] = []
    sm.register_command(0x10, lambda i, p: calls.append((i, p)) or len(p))
    assert sm.apply(5, encode_command(0x10, b"abc")) == 3 and calls == [(5, b"abc")]
    assert sm.apply(6, bytes((0x11,)) + b"x") is None and sm.apply_errors == 1
    with pytest.raises(ValueError, match="already registered"):
        sm.register_command(0x10, lambda i, p: None)


def test_config_checks() -> None:
    peers = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"
    assert follower_broker_id(group_peers(peers), "n2") == 3
    # slave reads go to a follower in the route: n0 leading is brokerId 0, so id 1 (its own) becomes 2
    assert [slave_read_target(group_peers(peers), lead, 1) for lead in ("n0", "n1", "n2")] == [2, 1, 1]
    assert slave_read_target(group_peers(peers), "n1", 3) == 3
    ok = BrokerConfig(broker_role="SLAVE", broker_id=1, enable_dleger_commit_log=True, dleger_peers=peers,
                      dleger_self_id="n1")
    ok.validate()
    with pytest.raises(ConfigError, match="dLegerSelfId"):
        BrokerConfig(broker_role="SLAVE", broker_id=1, enable_dleger_commit_log=True, dleger_peers=peers,
                     dleger_self_id="n9").validate()
    with pytest.raises(ConfigError, match="dLegerPeers"):
        BrokerConfig(broker_role="SLAVE", broker_id=1, enable_dleger_commit_log=True, dleger_peers="n0-nohost",
                     dleger_self_id="n0").validate()
    with pytest.raises(ConfigError, match="cannot be combined"):
        BrokerConfig(broker_role="SLAVE", broker_id=1, enable_dleger_commit_log=True, dleger_peers=peers,
                     dleger_self_id="n0", enable_lease_election=True).validate()
