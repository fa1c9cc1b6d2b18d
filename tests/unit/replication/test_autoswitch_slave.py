"""AutoSwitchSlave (sans-IO): the truncation decision at the handshake (§4.5), transfer frame checks, epoch
changes, confirm offset and ack policy; plus a store-level round trip through the cores without sockets."""

from orbitmq.replication.autoswitch_frames import HAState, MasterHandshake, TransferFrame
from orbitmq.replication.autoswitch_master import AutoSwitchMaster, LogBounds, MasterConfig
from orbitmq.replication.autoswitch_slave import AutoSwitchSlave, FrameVerdict
from orbitmq.replication.epoch import EpochCache
from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.testing.sim_disk import SimDisk


def connected(entries=(), **kw):
    s = AutoSwitchSlave(2, EpochCache(list(entries)), **kw)
    hs = s.on_connected(0)
    assert hs.broker_id == 2 and s.state is HAState.HANDSHAKE
    return s


def test_empty_replica_needs_no_truncation():
    s = connected(sync_from_last_file=True)
    t = s.on_master_handshake(MasterHandshake(5000, 3, ((1, 0), (3, 100))), 0, 0)
    assert t.ok and t.truncate_to == -1 and t.report_offset == 0
    s.truncated(t)
    assert s.state is HAState.TRANSFER and s.epochs.entries == []


def test_non_empty_log_without_history_is_refused():
    t = connected().on_master_handshake(MasterHandshake(5000, 3, ((1, 0),)), 700, 0)
    assert not t.ok and "no epoch history" in t.reason


def test_divergent_tail_is_cut_at_the_consistent_point():
    # we were master of epoch 2 from 1000 and wrote to 1500; the new master (epoch 3) took over at 1200
    s = connected([(1, 0), (2, 1000)])
    t = s.on_master_handshake(MasterHandshake(2000, 3, ((1, 0), (2, 1000), (3, 1200))), 1500, 0)
    assert t.ok and t.truncate_to == 1200 and t.report_offset == 1200 and t.epochs == ((1, 0), (2, 1000))
    s.confirm_offset = 1400  # confirmed by our own term as master
    s.truncated(t)
    assert s.truncations == 1 and s.epochs.entries == [(1, 0), (2, 1000)]
    assert s.confirm_offset == 1200


def test_epoch_the_master_never_had_is_dropped():
    s = connected([(1, 0), (2, 1000)])
    t = s.on_master_handshake(MasterHandshake(2000, 3, ((1, 0), (3, 800))), 1500, 0)
    assert t.truncate_to == 800 and t.epochs == ((1, 0),)


def test_behind_slave_keeps_everything_and_drops_an_empty_newer_epoch():
    s = connected([(1, 0), (4, 900)])  # we were master of epoch 4 at 900 and wrote nothing
    t = s.on_master_handshake(MasterHandshake(2000, 5, ((1, 0), (5, 1200))), 900, 0)
    assert t.ok and t.truncate_to == -1 and t.report_offset == 900 and t.epochs == ((1, 0),)


def test_no_consistent_point_fails_and_stale_master_refused():
    s = connected([(7, 0)])
    t = s.on_master_handshake(MasterHandshake(2000, 8, ((1, 0), (8, 10))), 100, 0)
    assert not t.ok and "consistent point" in t.reason and s.state is HAState.HANDSHAKE
    t = s.on_master_handshake(MasterHandshake(2000, 6, ((6, 0),)), 100, 0)
    assert not t.ok and "older" in t.reason


def test_empty_log_with_an_unshared_history_copies_the_master():
    # master of epoch 1 that never took a write, restarted after a whole-group crash; the group moved to epoch 2
    s = connected([(1, 0)])
    t = s.on_master_handshake(MasterHandshake(0, 2, ((2, 0),)), 0, 0)
    assert t.ok and t.truncate_to == -1 and t.report_offset == 0 and t.epochs == ()
    s.truncated(t)
    assert s.state is HAState.TRANSFER and s.epochs.entries == []
    # with bytes of its own it must still refuse (they could diverge)
    t = connected([(1, 0)]).on_master_handshake(MasterHandshake(100, 2, ((2, 0),)), 50, 0)
    assert not t.ok and "consistent point" in t.reason


def transferring(entries=((1, 0),), local_max=0):
    s = connected(entries)
    t = s.on_master_handshake(MasterHandshake(10_000, entries[-1][0] if entries else 1, tuple(entries) or ((1, 0),)),
                              local_max, 0)
    s.truncated(t)
    return s


def test_frame_checks():
    s = transferring(((1, 0),), 100)
    assert s.on_frame(TransferFrame(100, 1, 0, 50, b"x"), 100, 0) == (FrameVerdict.APPEND, False)
    assert s.on_frame(TransferFrame(120, 1, 0, 50, b"x"), 101, 0) == (FrameVerdict.OFFSET_MISMATCH, False)
    assert s.on_frame(TransferFrame(101, 1, 7, 50, b"x"), 101, 0) == (FrameVerdict.BAD_EPOCH, False)
    assert s.on_frame(TransferFrame(101, 3, 101, 60, b"y"), 101, 0) == (FrameVerdict.APPEND, True)
    assert s.epochs.entries == [(1, 0), (3, 101)]
    assert s.on_frame(TransferFrame(102, 2, 101, 60, b"y"), 102, 0) == (FrameVerdict.STALE_EPOCH, False)
    assert s.on_frame(TransferFrame(102, 3, 101, 60, b""), 102, 0) == (FrameVerdict.HEARTBEAT, False)
    assert s.refused == 3


def test_frame_before_handshake_is_a_state_mismatch():
    s = connected([(1, 0)])
    assert s.on_frame(TransferFrame(0, 1, 0, 0, b"x"), 0, 0)[0] is FrameVerdict.NOT_TRANSFERRING


def test_confirm_is_clamped_to_the_local_log_and_ack_policy():
    s = transferring(((1, 0),), 100)
    f = TransferFrame(100, 1, 0, 5000, b"z" * 20)
    s.on_frame(f, 100, 0)
    s.after_append(f, 120)
    assert s.confirm_offset == 120
    s.after_append(TransferFrame(120, 1, 0, 110, b"z"), 121)
    assert s.confirm_offset == 110
    assert s.report_due(121, 0)
    s.on_reported(121, 0)
    assert not s.report_due(121, 4999) and s.report_due(121, 5000) and s.report_due(122, 1)
    assert not s.silent_too_long(20_000) and s.silent_too_long(20_001)


# ---- cores + stores, no sockets ----------------------------------------------------------------------------
SEG = 16 * 1024


def store(disk, root):
    s = MessageStore(StoreConfig(root, mapped_file_size_commitlog=SEG, max_message_size=4096), disk=disk)
    s.load()
    return s


def put(st, n, tag):
    for i in range(n):
        r, _ = st.put_messages_nowait([MessageInner("T", i % 2, (tag * 40).encode(), {})])
        assert r.status is PutStatus.PUT_OK


def pump(master_store, m, slave_store, s, frames_limit=10_000):
    """Handshake + transfer through the cores until the slave caught up (the work the driver does)."""
    bounds = LogBounds(master_store.min_phys_offset, master_store.max_phys_offset, master_store.last_file_start)
    cid = m.on_connect(0)
    hs = m.on_handshake(cid, s.on_connected(0), master_store.max_phys_offset, 0)
    t = s.on_master_handshake(hs, slave_store.max_phys_offset, 0)
    assert t.ok
    if t.truncate_to >= 0:
        slave_store.truncate_dirty(t.truncate_to)
    slave_store.replace_epochs(list(t.epochs))
    s.truncated(t)
    assert m.on_ack(cid, t.report_offset, bounds, 0)[0] == ""
    for _ in range(frames_limit):
        ch = m.next_chunk(cid, bounds, 0)
        if ch is None or ch.size == 0:
            break
        data = master_store.read_commitlog(ch.offset, ch.size)
        m.on_sent(cid, ch, bounds.max_offset, 0)
        f = TransferFrame(ch.offset, ch.epoch, ch.epoch_start, m.confirm_offset, data)
        verdict, new_epoch = s.on_frame(f, slave_store.max_phys_offset, 0)
        assert verdict is FrameVerdict.APPEND
        if new_epoch:
            slave_store.replace_epochs(list(s.epochs.entries))
        slave_store.replica.append_raw(f.offset, f.data)
        s.after_append(f, slave_store.max_phys_offset)
        m.on_ack(cid, slave_store.max_phys_offset, bounds, 0)
    return t


def test_stores_through_the_cores_truncate_and_converge():
    disk = SimDisk()
    a, b = store(disk, "/a"), store(disk, "/b")
    a.replace_epochs([(1, 0)])
    put(a, 200, "a")
    cfg = MasterConfig(segment_size=SEG, batch_size=3000)
    pump(a, AutoSwitchMaster(cfg, 1, EpochCache(a.epoch_entries), {1}, 1, 0), b, AutoSwitchSlave(2, EpochCache()))
    assert b.max_phys_offset == a.max_phys_offset and b.epoch_entries == [(1, 0)]
    common = a.max_phys_offset
    put(a, 30, "lost")  # the old master's tail, never replicated
    b.replace_epochs([(1, 0), (2, common)])  # b promoted at `common`
    put(b, 40, "new")
    t = pump(b, AutoSwitchMaster(cfg, 2, EpochCache(b.epoch_entries), {2}, 1, 0), a,
             AutoSwitchSlave(1, EpochCache(a.epoch_entries)))
    assert t.truncate_to == common
    assert a.max_phys_offset == b.max_phys_offset and a.epoch_entries == b.epoch_entries
    assert a.read_commitlog(common, 4096) == b.read_commitlog(common, 4096)
    assert sum(a.get_max_offset_in_queue("T", q) for q in (0, 1)) == 240


def test_truncate_invalid_cuts_a_half_received_record():
    disk = SimDisk()
    a, b = store(disk, "/a"), store(disk, "/b")
    put(a, 5, "r")
    data = a.read_commitlog(0, a.max_phys_offset)
    b.replica.append_raw(0, data[: len(data) - 10])
    assert b.max_phys_offset == len(data) - 10
    end = b.truncate_invalid()
    assert end < len(data) - 10 and data[:end] == b.read_commitlog(0, end)
    assert sum(b.get_max_offset_in_queue("T", q) for q in (0, 1)) == 4
    b.replica.append_raw(end, data[end:])  # the stream resumes at the cut
    assert sum(b.get_max_offset_in_queue("T", q) for q in (0, 1)) == 5
