"""AutoSwitchMaster (sans-IO): start offset, one epoch per frame, heartbeats, caught-up times, confirm offset over
the SyncStateSet, shrink/expand with the in-flight union, SYNC ack counting."""

import pytest

from orbitmq.base.errors import InvariantError
from orbitmq.replication.autoswitch_frames import SlaveHandshake
from orbitmq.replication.autoswitch_master import (
    ALL_ACK_IN_SYNC_STATE_SET,
    IN_SYNC_REPLICAS_NOT_ENOUGH,
    AutoSwitchMaster,
    Chunk,
    LogBounds,
    MasterConfig,
)
from orbitmq.replication.epoch import EpochCache

SEG = 4096


def make(sss=frozenset({1}), epochs=((1, 0),), confirm=0, **kw):
    cfg = MasterConfig(segment_size=SEG, batch_size=kw.pop("batch", 1024), heartbeat_ms=100,
                       max_time_slave_not_catchup_ms=1000, **kw)
    return AutoSwitchMaster(cfg, 1, EpochCache(list(epochs)), set(sss), 1, confirm)


def join(m, broker_id, ack, log, now=0, last_file=False, learner=False):
    cid = m.on_connect(now)
    m.on_handshake(cid, SlaveHandshake(last_file, learner, broker_id), log.max_offset, now)
    err, prop = m.on_ack(cid, ack, log, now)
    assert err == ""
    return cid, prop


def drain(m, cid, log, now=0):
    """Send everything there is; returns the chunks."""
    out = []
    while (ch := m.next_chunk(cid, log, now)) is not None and ch.size:
        m.on_sent(cid, ch, log.max_offset, now)
        out.append(ch)
    return out


def test_handshake_answer_carries_the_history():
    m = make(epochs=((1, 0), (4, 700)))
    cid = m.on_connect(0)
    hs = m.on_handshake(cid, SlaveHandshake(False, False, 2), 900, 0)
    assert hs.max_offset == 900 and hs.epoch == 4 and hs.entries == ((1, 0), (4, 700))
    assert m.next_chunk(cid, LogBounds(0, 900, 0), 0) is None  # nothing before the first ack


@pytest.mark.parametrize("ack,last_file,expected", [(SEG + 50, True, SEG + 50), (0, True, 2 * SEG),
                                                     (0, False, SEG)])
def test_start_offset_rule(ack, last_file, expected):
    m = make()
    log = LogBounds(SEG, 2 * SEG + 100, 2 * SEG)
    cid, _ = join(m, 2, ack, log, last_file=last_file)
    assert m.next_chunk(cid, log, 0).offset == expected


def test_bad_acks_close_the_connection():
    m = make()
    log = LogBounds(SEG, 3 * SEG, 2 * SEG)
    cid = m.on_connect(0)
    assert m.on_ack(cid, 10, log, 0)[0] == "ack before handshake"
    m.on_handshake(cid, SlaveHandshake(False, False, 2), log.max_offset, 0)
    assert "beyond" in m.on_ack(cid, 3 * SEG + 1, log, 0)[0]
    assert "below the master's min offset" in m.on_ack(cid, 100, log, 0)[0]
    cid2, _ = join(m, 3, 2 * SEG, log)
    assert "went back" in m.on_ack(cid2, SEG, log, 0)[0]


def test_frames_never_cross_an_epoch_a_segment_or_the_batch():
    m = make(epochs=((1, 0), (2, 1000), (3, 5000)), batch=1500)
    log = LogBounds(0, 6000, SEG)
    cid, _ = join(m, 2, 900, log)
    chunks = drain(m, cid, log)
    assert chunks == [Chunk(900, 100, 1, 0), Chunk(1000, 1500, 2, 1000), Chunk(2500, 1500, 2, 1000),
                      Chunk(4000, 96, 2, 1000), Chunk(4096, 904, 2, 1000), Chunk(5000, 1000, 3, 5000)]
    assert m.conns[cid].next_offset == 6000


def test_heartbeat_after_idle_and_caught_up_refresh():
    m = make()
    log = LogBounds(0, 300, 0)
    cid, _ = join(m, 2, 300, log, now=0)
    assert m.next_chunk(cid, log, 50) is None
    hb = m.next_chunk(cid, log, 100)
    assert hb == Chunk(300, 0, 1, 0)
    m.on_sent(cid, hb, 300, 100)
    assert m.next_chunk(cid, log, 150) is None and m.conns[cid].caught_up_ms == 150  # idle and fully acked


def test_caught_up_time_follows_the_last_transfer():
    m = make()
    log = LogBounds(0, 2000, 0)
    cid, _ = join(m, 2, 0, log, now=0)
    drain(m, cid, log, now=10)  # frames sent at t=10 with master max 2000
    grown = LogBounds(0, 2500, 0)
    m.on_ack(cid, 1000, grown, 20)
    assert m.conns[cid].caught_up_ms == 0  # not yet at the max it was sent against
    m.on_ack(cid, 2000, grown, 30)
    assert m.conns[cid].caught_up_ms == 10  # caught up with what was sent at t=10 (the master grew since)
    m.on_ack(cid, 2000, LogBounds(0, 2000, 0), 40)
    assert m.conns[cid].caught_up_ms == 40  # equal to the master's max: now


def test_confirm_is_min_over_connected_acked_members():
    m = make(sss={1, 2, 3}, confirm=100)
    log = LogBounds(0, 1000, 0)
    c2, _ = join(m, 2, 600, log)
    assert m.confirm_offset == 100  # member 3 has no connection: the old value is kept
    c3 = m.on_connect(0)
    m.on_handshake(c3, SlaveHandshake(False, False, 3), 1000, 0)
    m.refresh_confirm(1000)
    assert m.confirm_offset == 100  # connected but not acked yet: still kept
    m.on_ack(c3, 800, log, 0)
    assert m.confirm_offset == 600  # min(1000, 600, 800)
    join(m, 9, 10, log)  # a non-member connection is ignored
    assert m.confirm_offset == 600
    m.on_ack(c2, 900, log, 0)
    assert m.confirm_offset == 800
    assert m.acked_offset(1000) == 1000  # inSyncReplicas=1: the master's own write suffices


def test_single_member_confirm_is_the_max():
    m = make()
    assert m.refresh_confirm(5000) and m.confirm_offset == 5000


def test_shrink_by_time_and_by_disconnect():
    m = make(sss={1, 2, 3})
    log = LogBounds(0, 1000, 0)
    c2, _ = join(m, 2, 1000, log, now=0)
    c3, _ = join(m, 3, 1000, log, now=0)
    assert m.check_shrink(900, 1000) is None
    m.on_ack(c2, 1000, log, 1500)  # 2 stays caught up, 3 does not ack any more
    assert m.check_shrink(2000, 1000) == {1, 2}
    assert m.proposed == {1, 2} and m.effective_set() == {1, 2, 3}  # union while in flight
    assert m.on_disconnect(c2, 1000) is None  # one change at a time
    assert m.set_sync_state_set({1, 2}, 2, 1000) and m.sync_state_set == {1, 2} and m.proposed is None
    assert m.check_shrink(2000, 1000) == {1}  # 2 left while the change was in flight: the next check removes it
    m.set_sync_state_set({1}, 3, 1000)
    c2, prop = join(m, 2, 1000, log, now=2000)
    assert prop == {1, 2}  # caught up again: expand
    m.set_sync_state_set({1, 2}, 4, 1000)
    assert m.on_disconnect(c2, 1000) == {1}  # a dropped member connection is reported at once
    assert not m.set_sync_state_set({1, 2, 3}, 1, 1000)  # an older SyncStateSet epoch is ignored
    m.proposal_failed()
    assert m.proposed is None and m.sync_state_set == {1, 2}
    assert m.check_shrink(2002, 1000) == {1}  # proposed again after a failed report


def test_expand_conditions_and_in_flight_union():
    m = make(sss={1}, epochs=((1, 0), (2, 500)))
    log = LogBounds(0, 1000, 0)
    c2, prop = join(m, 2, 400, log)
    assert prop is None  # below the current epoch's start and the master's max
    drain(m, c2, log)
    _, prop = m.on_ack(c2, 1000, log, 5)
    assert prop == {1, 2}
    assert m.effective_set() == {1, 2}
    # while the expand is in flight, acks of 2 bound the confirm offset (#5663)
    m.refresh_confirm(1200)
    assert m.confirm_offset == 1000
    _, learner_prop = join(m, 3, 1000, log, learner=True)
    assert learner_prop is None  # a learner never joins
    assert m.set_sync_state_set({1, 2}, 2, 1200) and m.sync_state_set == {1, 2}


def test_ack_counting_modes():
    log = LogBounds(0, 1000, 0)
    m = make(sss={1, 2, 3}, all_ack_in_sync_state_set=True)
    assert m.needed_acks() == ALL_ACK_IN_SYNC_STATE_SET
    join(m, 2, 700, log)
    join(m, 3, 900, log)
    assert m.acked_offset(1000) == m.confirm_offset == 700
    q = make(sss={1, 2, 3}, in_sync_replicas=3)
    assert q.acked_offset(1000) == 0
    join(q, 2, 700, log)
    join(q, 3, 900, log)
    assert q.needed_acks() == 3 and q.acked_offset(1000) == 700  # master + two slaves
    r = make(sss={1, 2, 3}, in_sync_replicas=2)
    join(r, 2, 700, log)
    join(r, 3, 900, log)
    assert r.acked_offset(1000) == 900  # master + the best slave


def test_min_in_sync_replicas_refuses_before_append():
    m = make(sss={1}, min_in_sync_replicas=2)
    assert m.check_put() == IN_SYNC_REPLICAS_NOT_ENOUGH
    m.proposed = {1, 2}
    assert m.in_sync_replicas_nums() == 2 and m.check_put() is None


def test_invariants():
    with pytest.raises(InvariantError):
        AutoSwitchMaster(MasterConfig(segment_size=SEG), 1, EpochCache(), {1}, 0, 0)
    m = make()
    log = LogBounds(0, 1000, 0)
    cid, _ = join(m, 2, 100, log)
    with pytest.raises(InvariantError):
        m.on_sent(cid, Chunk(200, 10, 1, 0), 1000, 0)


def test_bytes_before_the_first_epoch_are_served_as_epoch_0():
    m = make(epochs=((3, 500),))
    log = LogBounds(0, 800, 0)
    cid, _ = join(m, 2, 0, log)
    assert drain(m, cid, log) == [Chunk(0, 500, 0, 0), Chunk(500, 300, 3, 500)]
    assert m.on_handshake(m.on_connect(0), SlaveHandshake(False, False, 4), 800, 0).entries == ((0, 0), (3, 500))
