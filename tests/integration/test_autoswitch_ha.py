"""AutoSwitch HA in process: three MessageStores in tmp dirs, AutoSwitchHAService on real sockets (127.0.0.1).

Streaming to slaves, the confirm offset as the minimum over the SyncStateSet (held while a member has no
connection), SyncStateSet expand/shrink through a fake controller callback, failover: the promoted slave keeps its
data, the old master's unreplicated tail is truncated at the consistent point and it rejoins byte-identical."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from orbitmq.replication.autoswitch_driver import AutoSwitchConfig, AutoSwitchHAService
from orbitmq.replication.autoswitch_frames import (
    MasterHandshake,
    MasterStreamDecoder,
    SlaveHandshake,
    encode_ack,
    encode_slave_handshake,
)
from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SEG = 64 * 1024
HOST = "127.0.0.1"
CONF = AutoSwitchConfig(host=HOST, batch_size=4096, heartbeat_ms=200, housekeeping_ms=3000,
                        max_time_slave_not_catchup_ms=3000, check_sync_state_set_period_ms=200,
                        all_ack_in_sync_state_set=True, reconnect_min_ms=50, reconnect_max_ms=300,
                        handshake_retry_ms=300)


class Controller:
    """Stands in for the controller: applies each proposal with the next SyncStateSet epoch unless paused."""

    def __init__(self) -> None:
        self.epoch = 1
        self.paused = False
        self.seen: list[set[int]] = []
        self.services: dict[int, AutoSwitchHAService] = {}

    def callback(self, broker_id: int) -> Callable[[set[int]], None]:
        def on_change(proposed: set[int]) -> None:
            self.seen.append(set(proposed))
            if self.paused:
                return
            self.epoch += 1
            epoch = self.epoch
            asyncio.get_running_loop().call_soon(self.services[broker_id].set_sync_state_set, proposed, epoch)
        return on_change


async def open_node(root: Path, broker_id: int, ctl: Controller) -> tuple[MessageStore, AutoSwitchHAService]:
    store = MessageStore(StoreConfig(str(root), mapped_file_size_commitlog=SEG, max_message_size=4096))
    store.load()
    await store.start()
    svc = AutoSwitchHAService(store, CONF, broker_id, on_sync_state_set_change=ctl.callback(broker_id))
    ctl.services[broker_id] = svc
    await svc.start()
    return store, svc


async def close_node(store: MessageStore, svc: AutoSwitchHAService) -> None:
    await svc.stop()
    await store.shutdown()


def put(store: MessageStore, n: int, tag: str) -> None:
    for i in range(n):
        r, _ = store.put_messages_nowait([MessageInner("AS", i % 4, (f"{tag}-{i}-" * 20).encode(), {"KEYS": tag})])
        assert r.status is PutStatus.PUT_OK


async def wait_until(cond: Callable[[], bool], what: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


def same_bytes(a: MessageStore, b: MessageStore, end: int) -> bool:
    pos = 0
    while pos < end:
        x = a.read_commitlog(pos, end - pos)
        if not x or b.read_commitlog(pos, len(x)) != x:
            return False
        pos += len(x)
    return True


def addr(svc: AutoSwitchHAService) -> str:
    return f"{HOST}:{svc.port}"


def test_stream_confirm_min_and_sync_state_set(tmp_path: Path) -> None:
    async def go() -> None:
        ctl = Controller()
        nodes = [await open_node(tmp_path / f"n{i}", i, ctl) for i in (1, 2, 3)]
        (a, sa), (b, sb), (c, sc) = nodes
        try:
            await sa.change_to_master(1, {1}, 1)
            await sb.change_to_slave(addr(sa), 1, 2)
            await sc.change_to_slave(addr(sa), 1, 3)
            put(a, 300, "x")  # spans several 64 KiB segments
            await wait_until(lambda: b.max_phys_offset == c.max_phys_offset == a.max_phys_offset, "slaves caught up")
            await wait_until(lambda: sa.master.sync_state_set == {1, 2, 3}, "SyncStateSet expanded")
            await wait_until(lambda: sa.confirm_offset == a.max_phys_offset, "confirm = max with all acked")
            assert same_bytes(a, b, a.max_phys_offset) and same_bytes(a, c, a.max_phys_offset)
            assert b.epoch_entries == c.epoch_entries == a.epoch_entries == [(1, 0)]
            await wait_until(lambda: sb.confirm_offset == a.max_phys_offset, "slave confirm from the master")
            # member 3 loses its connection while the controller does not answer: confirm is held
            ctl.paused = True
            await sc.suspend()
            await wait_until(lambda: sa.master.proposed == {1, 2}, "shrink proposed")
            held = sa.confirm_offset
            put(a, 40, "y")
            await wait_until(lambda: b.max_phys_offset == a.max_phys_offset, "member 2 caught up")
            assert sa.confirm_offset == held < a.max_phys_offset  # 3 is still in the (union) set
            # the controller's answer removes 3: confirm = min over {1, 2} = max
            ctl.epoch += 1
            sa.set_sync_state_set({1, 2}, ctl.epoch)
            await wait_until(lambda: sa.confirm_offset == a.max_phys_offset, "confirm = min over {1, 2}")
            # 3 rejoins and is added back once caught up
            ctl.paused = False
            await sc.change_to_slave(addr(sa), 1, 3)
            await wait_until(lambda: sa.master.sync_state_set == {1, 2, 3}, "3 back in the set")
            assert c.max_phys_offset == a.max_phys_offset and same_bytes(a, c, a.max_phys_offset)
        finally:
            for st, svc in nodes:
                await close_node(st, svc)
    asyncio.run(go())


def test_failover_truncates_the_old_masters_divergent_tail(tmp_path: Path) -> None:
    async def go() -> None:
        ctl = Controller()
        nodes = [await open_node(tmp_path / f"n{i}", i, ctl) for i in (1, 2, 3)]
        (a, sa), (b, sb), (c, sc) = nodes
        try:
            await sa.change_to_master(1, {1, 2, 3}, 1)
            await sb.change_to_slave(addr(sa), 1, 2)
            await sc.change_to_slave(addr(sa), 1, 3)
            put(a, 120, "one")
            await wait_until(lambda: b.max_phys_offset == c.max_phys_offset == a.max_phys_offset, "replicated")
            behind = a.max_phys_offset
            # C drops out; B gets 10 more messages, beyond the confirm offset (C is still a member)
            ctl.paused = True
            await sc.suspend()
            put(a, 10, "mid")
            await wait_until(lambda: b.max_phys_offset == a.max_phys_offset, "B has the 10")
            common = a.max_phys_offset
            assert sa.confirm_offset == behind < common
            # partition: B stops following too, the old master keeps writing (never replicated)
            await sb.suspend()
            put(a, 30, "lost")
            assert a.max_phys_offset > common
            # B is elected (epoch 2): it keeps its data beyond the old confirm offset, records (2, its max)
            await sa.suspend()
            await sb.change_to_master(2, {2, 3}, 2)
            assert b.max_phys_offset == common and b.epoch_entries == [(1, 0), (2, common)]
            await sc.change_to_slave(addr(sb), 2, 3)
            put(b, 50, "two")
            # the old master rejoins as a slave: truncated at the consistent point, then follows epoch 2
            await sa.change_to_slave(addr(sb), 2, 1)
            await wait_until(lambda: a.max_phys_offset == b.max_phys_offset == c.max_phys_offset, "A rejoined")
            assert sa.client.slave.truncations == 1 and sc.client.slave.truncations == 0
            assert a.epoch_entries == b.epoch_entries == c.epoch_entries == [(1, 0), (2, common)]
            await wait_until(lambda: sb.confirm_offset == b.max_phys_offset, "confirm at the new master's max")
            await wait_until(lambda: sa.confirm_offset == b.max_phys_offset, "A's confirm from the new master")
            assert same_bytes(a, b, sb.confirm_offset) and same_bytes(c, b, sb.confirm_offset)
            # the ConsumeQueue of the old master no longer holds the lost messages
            total = sum(a.get_max_offset_in_queue("AS", q) for q in range(4))
            assert total == 180
            # a stale role change is refused
            with pytest.raises(ValueError):
                await sa.change_to_master(1, {1}, 9)
        finally:
            for st, svc in nodes:
                await close_node(st, svc)
    asyncio.run(go())


def test_restart_keeps_epochs_and_rejoin_without_truncation(tmp_path: Path) -> None:
    async def go() -> None:
        ctl = Controller()
        a, sa = await open_node(tmp_path / "a", 1, ctl)
        b, sb = await open_node(tmp_path / "b", 2, ctl)
        try:
            await sa.change_to_master(3, {1}, 1)
            await sb.change_to_slave(addr(sa), 3, 2)
            put(a, 60, "r")
            await wait_until(lambda: b.max_phys_offset == a.max_phys_offset, "replicated")
            await close_node(b, sb)
            b, sb = await open_node(tmp_path / "b", 2, ctl)
            assert b.epoch_entries == [(3, 0)]
            # the master restarts and the controller keeps it master of epoch 3: the epoch keeps its start
            await close_node(a, sa)
            a, sa = await open_node(tmp_path / "a", 1, ctl)
            await sa.change_to_master(3, {1}, 1)
            assert a.epoch_entries == [(3, 0)]
            put(a, 10, "s")
            await sb.change_to_slave(addr(sa), 3, 2)
            await wait_until(lambda: b.max_phys_offset == a.max_phys_offset, "caught up after restart")
            assert sb.client.slave.truncations == 0 and same_bytes(a, b, a.max_phys_offset)
            # re-elected (epoch 4): connections and data stay; a second election with nothing written in
            # between replaces the empty epoch 4 instead of being refused (#9689)
            connects = sb.client.connects
            await sa.change_to_master(4, {1, 2}, 2)
            top = a.max_phys_offset
            await sa.change_to_master(5, {1, 2}, 3)
            assert a.epoch_entries == [(3, 0), (5, top)]
            put(a, 10, "t")
            await wait_until(lambda: b.max_phys_offset == a.max_phys_offset, "epoch 5 data replicated")
            assert b.epoch_entries == [(3, 0), (5, top)] and sb.client.connects == connects
            with pytest.raises(ValueError):
                await sb.change_to_slave(addr(sa), 4, 2)  # stale epoch
        finally:
            await close_node(a, sa)
            await close_node(b, sb)
    asyncio.run(go())


def test_all_ack_sync_puts_wait_for_the_whole_set(tmp_path: Path) -> None:
    """allAckInSyncStateSet with the store's replica policy (what the broker wires): a SYNC put returns once every
    member acked; with a member gone and the controller silent it times out and stays invisible to consumers."""
    async def go() -> None:
        ctl = Controller()
        nodes = [await open_node(tmp_path / f"n{i}", i, ctl) for i in (1, 2, 3)]
        (a, sa), (b, sb), (c, sc) = nodes
        try:
            await sa.change_to_master(1, {1, 2, 3}, 1)
            a.replica.set_policy(wait_ms=5000, gate_visibility=True, available=None)
            b.replica.set_policy(wait_ms=0, gate_visibility=True, available=None)  # slave: readUnCommitted=false
            await sb.change_to_slave(addr(sa), 1, 2)
            await sc.change_to_slave(addr(sa), 1, 3)
            assert sa.needed_acks() == -1 and sa.check_put() is None
            msg = MessageInner("AS", 0, b"sync", {})
            r = await a.put_messages([msg])
            assert r.status is PutStatus.PUT_OK
            assert sa.confirm_offset >= r.phys_offset + r.wrote_bytes
            assert b.max_phys_offset >= sa.confirm_offset and c.max_phys_offset >= sa.confirm_offset
            assert a.get_max_offset_in_queue("AS", 0) == 1  # visible: the whole set has it
            await wait_until(lambda: b.get_max_offset_in_queue("AS", 0) == 1, "visible on the gated slave")
            ctl.paused = True
            await sc.suspend()
            a.replica.wait_ms = 300
            r2 = await a.put_messages([msg])
            assert r2.status is PutStatus.FLUSH_SLAVE_TIMEOUT
            assert a.get_max_offset_in_queue("AS", 0) == 1  # not visible while member 3 may lack it
            assert b.max_phys_offset == a.max_phys_offset  # the slave has the bytes ...
            assert b.get_max_offset_in_queue("AS", 0) == 1  # ... but its consumers do not see them either
            ctl.epoch += 1
            sa.set_sync_state_set({1, 2}, ctl.epoch)  # the controller removes 3
            await wait_until(lambda: a.get_max_offset_in_queue("AS", 0) == 2, "visible once {1, 2} acked")
            await wait_until(lambda: b.get_max_offset_in_queue("AS", 0) == 2, "and on the slave")
        finally:
            for st, svc in nodes:
                await close_node(st, svc)
    asyncio.run(go())


def test_member_that_stops_acking_is_shrunk_by_time(tmp_path: Path) -> None:
    """A member keeps its connection open but stops acking: after haMaxTimeSlaveNotCatchup the master proposes
    the set without it (the connection itself is still there)."""
    async def go() -> None:
        ctl = Controller()
        ctl.paused = True
        a, sa = await open_node(tmp_path / "a", 1, ctl)
        sa.config = replace(CONF, max_time_slave_not_catchup_ms=400, housekeeping_ms=30_000)
        reader, writer = None, None
        try:
            await sa.change_to_master(1, {1, 7}, 1)
            reader, writer = await asyncio.open_connection(HOST, sa.port)
            writer.write(encode_slave_handshake(SlaveHandshake(False, False, 7)))
            dec = MasterStreamDecoder()
            items: list[object] = []
            while not items:
                items += dec.feed(await reader.read(65536))
            assert isinstance(items[0], MasterHandshake) and items[0].entries == ((1, 0),)
            writer.write(encode_ack(0))  # caught up with an empty master
            await writer.drain()
            await wait_until(lambda: any(c.caught_up_ms for c in sa.master.conns.values()), "member caught up")
            assert sa.master.proposed is None
            put(a, 20, "z")  # streamed to the member, which never acks again
            await wait_until(lambda: sa.master.proposed == {1}, "shrink proposed", timeout=10)
            assert len(sa.master.conns) == 1 and sa.confirm_offset == 0  # still connected; confirm held at its ack
        finally:
            if writer is not None:
                writer.close()
            await close_node(a, sa)
    asyncio.run(go())
