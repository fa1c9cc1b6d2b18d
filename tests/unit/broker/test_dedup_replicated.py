"""De-duplication on a replica: records a slave store receives by append_raw feed its table (a retry after a
failover is answered with the original result); the topic is part of the key; an old-format journal is replaced by
a scan of the CommitLog window. Real stores on a simulated disk, no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import orjson

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services.dedup import SEP, DedupService, table_key
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.store import MessageInner, MessageStore, PutResult, PutStatus, StoreConfig
from orbitmq.testing.sim_disk import SimDisk

SEG = 64 * 1024
MASTER_HOST = "10.0.0.1:10911"


class _Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def now_ms(self) -> int:
        self.t += 1
        return self.t

    def monotonic_ms(self) -> int:
        return 0


def _store(root: str, clock: _Clock) -> MessageStore:
    s = MessageStore(StoreConfig(root, mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                                 max_message_size=4096, max_hash_slot_num=64, max_index_num=512),
                     disk=SimDisk(), clock=clock)
    s.load()
    return s


def _svc(tmp_path: Any, store: MessageStore, clock: _Clock, role: str = "SLAVE") -> DedupService:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", broker_role=role, broker_id=1 if role == "SLAVE" else 0)
    ctx = SimpleNamespace(config=cfg, stats=BrokerStats(), send_hooks=[], store=store, store_host="10.0.0.2:10911",
                          role_listeners=[])
    env = SimpleNamespace(clock=clock, config_dir=str(tmp_path), store_config=store.config, writes=BackgroundWrites())
    svc = DedupService(ctx, env)  # type: ignore[arg-type]
    asyncio.run(svc.start())  # rebuild, then the dispatch listener
    return svc


def _msg(key: str | None, topic: str = "T", qid: int = 1, **props: str) -> MessageInner:
    p = dict(props)
    if key is not None:
        p[Prop.UNIQ_KEY] = key
    return MessageInner(topic, qid, b"body-" + (key or "none").encode() + b"." * 100, p, store_host=MASTER_HOST)


def _put(store: MessageStore, msg: MessageInner) -> PutResult:
    r, _ = store.put_messages_nowait([msg])
    assert r.status is PutStatus.PUT_OK
    return r


def _replicate(master: MessageStore, slave: MessageStore) -> None:
    start = slave.max_phys_offset
    data = master.read_commitlog(start, master.max_phys_offset - start)
    slave.append_raw(start, data)


def _req(group: str = "PG") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": group, "b": "T"})


def _promote(svc: DedupService) -> None:
    """The slave becomes master, told as BrokerContext.set_role tells the services (role listeners)."""
    svc.ctx.config = dataclasses.replace(svc.ctx.config, broker_role="SYNC_MASTER", broker_id=0)
    for listener in svc.ctx.role_listeners:
        listener(False)


def test_a_replicated_message_retried_after_a_failover_is_answered_with_its_original_result(tmp_path: Any) -> None:
    clock = _Clock()
    master, slave = _store("/m", clock), _store("/s", clock)
    replica = _svc(tmp_path / "s", slave, clock)
    _put(master, _msg(None))  # no UNIQ_KEY: skipped
    originals = {k: _put(master, _msg(k, qid=i % 4)) for i, k in enumerate(["K1", "K2", "K3"])}
    _put(master, _msg("R1", topic="%RETRY%G"))  # consumer retries are never de-duplicated
    _replicate(master, slave)
    assert set(replica.table.entries) == {table_key(k, "T", {}) for k in originals}
    _promote(replica)  # the slave becomes master: a client retries its unanswered sends here
    for i, (key, r) in enumerate(originals.items()):
        resp = replica.before_put(None, _req(), [_msg(key, qid=3)])
        assert resp is not None and resp.code == 0
        assert resp.ext_fields["msgId"] == r.msg_ids[0]  # the master's msgId: its host, read from the record
        assert resp.ext_fields["msgId"] == master.look_message_by_offset(r.phys_offset).offset_msg_id
        assert (resp.ext_fields["queueId"], resp.ext_fields["queueOffset"]) == (str(i % 4), str(r.queue_offset))
    assert replica.before_put(None, _req(), [_msg("NEW")]) is None
    assert replica.before_put(None, _req(), [_msg("R1", topic="%RETRY%G")]) is None


def test_a_replicated_delayed_message_answers_its_real_queue(tmp_path: Any) -> None:
    clock = _Clock()
    master, slave = _store("/m", clock), _store("/s", clock)
    replica = _svc(tmp_path / "s", slave, clock)
    delayed = _msg("D1", topic="SCHEDULE_TOPIC_XXXX", qid=2, **{Prop.REAL_TOPIC: "T", Prop.REAL_QID: "3"})
    r = _put(master, delayed)
    _replicate(master, slave)
    _promote(replica)
    resp = replica.before_put(None, _req(), [_msg("D1", qid=3)])
    assert resp is not None and resp.ext_fields["queueId"] == "3"
    assert resp.ext_fields["queueOffset"] == str(r.queue_offset)


def test_a_replicas_table_persists_in_its_journal(tmp_path: Any) -> None:
    clock = _Clock()
    master, slave = _store("/m", clock), _store("/s", clock)
    replica = _svc(tmp_path / "s", slave, clock)
    r = _put(master, _msg("K1"))
    _replicate(master, slave)
    asyncio.run(replica.stop())
    # reloaded beside an empty CommitLog: only the journal can know K1 (its msgId is resolved from this host then)
    reloaded = _svc(tmp_path / "s", _store("/empty", clock), clock, role="SYNC_MASTER")
    resp = reloaded.before_put(None, _req(), [_msg("K1")])
    assert resp is not None and resp.ext_fields["queueOffset"] == str(r.queue_offset)
    assert resp.ext_fields["msgId"].endswith(f"{r.phys_offset:016X}")


def test_a_tail_received_as_slave_and_dispatched_after_the_switch_is_remembered(tmp_path: Any) -> None:
    """The old master died before confirming its last records: the new master dispatches them only after it
    became master. A producer's retry of one of them (its answer was lost with the old master) is answered with the
    original, not stored a second time; the new master's own later dispatches are left to after_put."""
    clock = _Clock()
    master, slave = _store("/m", clock), _store("/s", clock)
    replica = _svc(tmp_path / "s", slave, clock)
    original = _put(master, _msg("TAIL", qid=1))
    start = slave.max_phys_offset
    slave.replica.append_raw(start, master.read_commitlog(start, master.max_phys_offset - start), dispatch=False)
    assert len(replica.table) == 0  # received, not visible yet
    _promote(replica)
    slave.replica.dispatch_complete()  # visible now, on the new master
    resp = replica.before_put(None, _req(), [_msg("TAIL", qid=3)])
    assert resp is not None and resp.code == 0, "the retry of a replicated record would be stored twice"
    assert (resp.ext_fields["queueId"], resp.ext_fields["queueOffset"]) == ("1", str(original.queue_offset))
    _put(slave, _msg("OWN"))  # the new master's own put: dispatched past the switch point, not fed
    assert table_key("OWN", "T", {}) not in replica.table.entries
    assert not replica._listening  # and the listener is no longer called for the master's records


def test_a_tail_still_pending_at_the_switch_is_remembered_before_it_is_dispatched(tmp_path: Any) -> None:
    """The new master holds the replicated tail behind its visibility gate (waiting for its own confirmation) when
    the producer's retry arrives: the retry is answered with the original, not stored a second time."""
    clock = _Clock()
    master, slave = _store("/m", clock), _store("/s", clock)
    replica = _svc(tmp_path / "s", slave, clock)
    original = _put(master, _msg("GATED", qid=2))
    slave.replica.set_policy(wait_ms=0, gate_visibility=True, available=None)
    start = slave.max_phys_offset
    slave.replica.append_raw(start, master.read_commitlog(start, master.max_phys_offset - start))
    assert slave.pending_requests() and len(replica.table) == 0  # received, held by the gate
    _promote(replica)
    resp = replica.before_put(None, _req(), [_msg("GATED", qid=0)])
    assert resp is not None and resp.code == 0, "a retry arriving before the gated tail is dispatched is stored twice"
    assert (resp.ext_fields["queueId"], resp.ext_fields["queueOffset"]) == ("2", str(original.queue_offset))
    slave.replica.on_replicated(slave.max_phys_offset)  # dispatched later: remembered once, unchanged
    assert len([k for k in replica.table.entries if k.startswith("GATED")]) == 1


def test_a_master_does_not_feed_its_own_dispatches(tmp_path: Any) -> None:
    clock = _Clock()
    master = _store("/m", clock)
    svc = _svc(tmp_path / "m", master, clock, role="SYNC_MASTER")
    _put(master, _msg("K1"))  # dispatched, but after_put (not called here) is what remembers a master's puts
    assert len(svc.table) == 0
    assert not svc._listening  # the listener's gate: a master's own records do not even call it


def test_a_master_demoted_to_slave_learns_the_records_it_receives(tmp_path: Any) -> None:
    """The listener's gate opens again when the broker becomes a slave (BrokerContext.set_role's listeners)."""
    clock = _Clock()
    master, demoted = _store("/m", clock), _store("/s", clock)
    svc = _svc(tmp_path / "s", demoted, clock, role="SYNC_MASTER")
    assert not svc._listening
    svc.ctx.config = dataclasses.replace(svc.ctx.config, broker_role="SLAVE", broker_id=1)
    for listener in svc.ctx.role_listeners:
        listener(False)
    _put(master, _msg("K1"))
    _replicate(master, demoted)
    assert table_key("K1", "T", {}) in svc.table.entries


def test_the_topic_is_part_of_the_key(tmp_path: Any) -> None:
    clock = _Clock()
    master = _store("/m", clock)
    svc = _svc(tmp_path / "m", master, clock, role="SYNC_MASTER")
    msg = _msg("K1", topic="A")
    svc.after_put(None, _req(), [msg], _put(master, msg))
    assert svc.before_put(None, _req(), [_msg("K1", topic="B")]) is None  # another topic: stored
    assert svc.before_put(None, _req(), [_msg("K1", topic="A")]) is not None
    assert svc.before_put(None, _req(), [_msg("K1", topic="A"), _msg("K1", topic="B")]) is None  # a batch too
    # rebuilt from the CommitLog scan: the same rule
    rebuilt = _svc(tmp_path / "other", master, clock, role="SYNC_MASTER")
    assert rebuilt.before_put(None, _req(), [_msg("K1", topic="B")]) is None
    assert rebuilt.before_put(None, _req(), [_msg("K1", topic="A")]) is not None


def test_an_old_format_journal_is_replaced_by_a_scan_of_the_window(tmp_path: Any) -> None:
    clock = _Clock()
    master = _store("/m", clock)
    r = _put(master, _msg("K1"))
    jdir = tmp_path / "dedup"
    jdir.mkdir()
    # a format-2 line (keys without the topic) claiming the whole CommitLog: its rows are not loaded, and the scan
    # starts at the window's start instead of its physOffset
    old_row = ["OLD", SEP.join([str(clock.t), "0", "0", "X"])]
    line = orjson.dumps({"version": 2, "physOffset": master.confirm_offset, "rows": [old_row]})
    (jdir / f"{1:010d}-{0:020d}.jsonl").write_bytes(line + b"\n")
    svc = _svc(tmp_path, master, clock, role="SYNC_MASTER")
    assert "OLD" not in svc.table.entries
    resp = svc.before_put(None, _req(), [_msg("K1")])
    assert resp is not None and resp.ext_fields["msgId"] == r.msg_ids[0]
    assert [p.name.split("-")[0] for p in jdir.iterdir()] == [f"{2:010d}"]  # rewritten in the new format
