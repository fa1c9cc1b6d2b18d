"""The store behaviour controller mode relies on: a master whose replica policy confirms a put at once (a
SyncStateSet of one in all-ack mode: the confirm offset is the max offset) must make that put visible, not leave it
pending until the next write; and raise_queue_offsets never lowers a queue's next offset."""

from __future__ import annotations

from pathlib import Path

from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.testing.sim_disk import SimDisk

SEG = 16 * 1024


def make(root: Path) -> MessageStore:
    s = MessageStore(StoreConfig(str(root), mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                                 max_message_size=4096, max_hash_slot_num=64, max_index_num=512), disk=SimDisk())
    s.load()
    return s


def test_a_put_confirmed_inside_on_written_is_visible(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.replica.set_policy(wait_ms=1000, gate_visibility=True, available=None)
    # what AutoSwitchHAService does on every write: confirm = our max when the set is only us
    store.replica.on_written = lambda: store.replica.on_replicated(store.max_phys_offset)
    for i in range(3):
        r, end = store.put_messages_nowait([MessageInner("T", 0, b"m%d" % i, {"WAIT": "true"})])
        assert r.status is PutStatus.PUT_OK and end > 0
        assert store.get_max_offset_in_queue("T", 0) == i + 1, "the last acknowledged put is not visible"


def test_raise_queue_offsets_never_lowers(tmp_path: Path) -> None:
    store = make(tmp_path)
    for i in range(4):
        store.put_messages_nowait([MessageInner("T", 1, b"x%d" % i, {})])
    table = store.commitlog.topic_queue_table
    assert table["T-1"] == 4
    table["T-1"] = 2  # a queue table behind its ConsumeQueue
    table["U-0"] = 9  # ahead (records replicated but not dispatched yet): kept
    assert store.raise_queue_offsets() == 1
    assert table["T-1"] == 4 and table["U-0"] == 9
    assert store.raise_queue_offsets() == 0
