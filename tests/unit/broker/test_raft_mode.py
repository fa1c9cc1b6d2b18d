"""Raft broker groups (issue 14): entry codec, the group state machine over a real MessageStore (apply, restore cuts
the CommitLog back, no snapshot rebuilds it from the log, command hooks) and the configuration checks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError, ProtocolError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.raft_mode.codec import (
    MESSAGES,
    decode_checkpoint,
    decode_messages,
    decode_snapshot,
    encode_checkpoint,
    encode_command,
    encode_messages,
    encode_snapshot,
)
from orbitmq.broker.raft_mode.service import follower_broker_id, group_peers, slave_read_target
from orbitmq.broker.raft_mode.state_machine import GroupStateMachine
from orbitmq.store import MessageStore, StoreConfig
from orbitmq.store.results import MessageInner


def _msg(i: int, topic: str = "T") -> MessageInner:
    return MessageInner(topic, i % 2, f"body-{i}".encode(), {"KEYS": f"k{i}", "TAGS": "a"}, flag=3, sys_flag=0,
                        born_timestamp=1_700_000_000_000 + i, born_host="127.0.0.1:5000",
                        store_host="127.0.0.1:10911", reconsume_times=1, prepared_transaction_offset=0)


def test_messages_round_trip_and_malformed_entries() -> None:
    msgs = [_msg(i) for i in range(3)]
    data = encode_messages(msgs)
    assert data[0] == MESSAGES
    assert decode_messages(data) == msgs
    with pytest.raises(ProtocolError, match="truncated"):
        decode_messages(data[:-3])
    with pytest.raises(ProtocolError, match="trailing"):
        decode_messages(data + b"x")
    with pytest.raises(ValueError, match="outside"):
        encode_command(MESSAGES, b"")
    assert decode_snapshot(encode_snapshot(7, 12345)) == (7, 12345, {})
    with_parts = encode_snapshot(7, 12345, {0x10: b"a", 0x11: b""})
    assert decode_snapshot(with_parts) == (7, 12345, {0x10: b"a", 0x11: b""})
    with pytest.raises(ProtocolError):
        decode_snapshot(b"ORGX" + bytes(21))
    with pytest.raises(ProtocolError, match="truncated"):
        decode_snapshot(with_parts[:-1])
    cp = encode_checkpoint(9, 4096)
    assert decode_checkpoint(cp) == (9, 4096)
    assert decode_checkpoint(cp[:-1]) is None and decode_checkpoint(cp[:-1] + b"x") is None


def _store(path: Path) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(path), mapped_file_size_commitlog=1024 * 1024, max_message_size=64 * 1024,
                                     mapped_file_size_consume_queue=1000 * 20))
    store.load()
    return store


def test_state_machine_applies_committed_entries_and_restores_by_cutting_the_commitlog(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path / "s")
        await store.start()
        try:
            sm = GroupStateMachine(store)
            seen: list[int] = []
            sm.add_commit_listener(seen.append)
            assert sm.apply(1, b"") is None  # a leader's no-op
            result, wait_end = sm.apply(2, encode_messages([_msg(0), _msg(1)]))  # type: ignore[misc]
            assert result.ok and wait_end == -1 and store.max_phys_offset > 0
            snap = sm.snapshot()
            end_at_2 = store.max_phys_offset
            sm.apply(3, encode_messages([_msg(2)]))
            assert store.max_phys_offset > end_at_2 and seen == [1, 2, 3]
            # a restart from the snapshot of index 2: the record of entry 3 goes, entry 3 is applied again
            sm2 = GroupStateMachine(store)
            sm2.restore(snap)
            assert store.max_phys_offset == end_at_2 and sm2.behind is None
            sm2.apply(3, encode_messages([_msg(2)]))
            assert store.get_max_offset_in_queue("T", 0) == 2 and store.get_max_offset_in_queue("T", 1) == 1
            # a snapshot beyond our CommitLog (a member behind the leader's compaction) is reported, not hidden
            sm3 = GroupStateMachine(store)
            sm3.restore(encode_snapshot(9, store.max_phys_offset + 100))
            assert sm3.behind == (store.max_phys_offset, store.max_phys_offset + 100)
            # a restart with an applied checkpoint (index 2, its end): the CommitLog keeps that prefix, MESSAGES
            # entries up to 2 are skipped, entry 3 is stored again after it
            sm5 = GroupStateMachine(store)
            sm5.checkpoint = (2, end_at_2)
            sm5.apply(1, b"")
            assert store.max_phys_offset == end_at_2
            assert sm5.apply(2, encode_messages([_msg(0), _msg(1)])) is None and store.max_phys_offset == end_at_2
            sm5.apply(3, encode_messages([_msg(2)]))
            assert store.get_max_offset_in_queue("T", 0) == 2 and store.get_max_offset_in_queue("T", 1) == 1
            # a snapshot newer than the checkpoint wins over it
            sm6 = GroupStateMachine(store)
            sm6.checkpoint = (2, end_at_2)
            sm6.restore(encode_snapshot(3, store.max_phys_offset))
            assert store.get_max_offset_in_queue("T", 0) == 2
            # no snapshot: the Raft log is applied from index 1 again, so the CommitLog is rebuilt from it
            sm4 = GroupStateMachine(store)
            sm4.apply(1, b"")
            assert store.max_phys_offset == 0
        finally:
            await store.shutdown()

    asyncio.run(main())


def test_command_hook_and_unknown_types() -> None:
    sm = GroupStateMachine(store=None)
    calls: list[tuple[int, bytes]] = []
    sm._based = True  # no store involved in command entries
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
