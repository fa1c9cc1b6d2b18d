"""asyncio driver of AutoSwitch HA: AutoSwitchHAServer (master), AutoSwitchHAClient (slave), AutoSwitchHAService
(role switches without restart, the API the broker's ReplicasManager calls).

Runs the sans-IO AutoSwitchMaster / AutoSwitchSlave over raw TCP (autoswitch_frames.py) against the MessageStore
API (read_commitlog, replica.append_raw, truncate_dirty, truncate_invalid, replace_epochs). It never talks to the
controller: SyncStateSet proposals go to the `on_sync_state_set_change` callback. Design: docs/design/autoswitch-ha.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.errors import InvariantError, OrbitMQError
from orbitmq.base.invariant import check
from orbitmq.replication.autoswitch_frames import (
    Ack,
    MasterHandshake,
    MasterStreamDecoder,
    SlaveHandshake,
    SlaveStreamDecoder,
    TransferFrame,
    encode_ack,
    encode_master_handshake,
    encode_slave_handshake,
    encode_transfer,
)
from orbitmq.replication.autoswitch_master import AutoSwitchMaster, Chunk, LogBounds, MasterConfig
from orbitmq.replication.autoswitch_slave import AutoSwitchSlave, FrameVerdict
from orbitmq.replication.epoch import EpochCache
from orbitmq.replication.ha_auth import authenticated, prove

log = logging.getLogger(__name__)

READ_SIZE = 4 << 20


@dataclass(frozen=True)
class AutoSwitchConfig:
    host: str = "0.0.0.0"
    port: int = 0  # haListenPort (0 = any free port)
    batch_size: int = 32 * 1024  # haTransferBatchSize
    heartbeat_ms: int = 5_000  # haSendHeartbeatInterval
    housekeeping_ms: int = 20_000  # haHousekeepingInterval
    max_time_slave_not_catchup_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    check_sync_state_set_period_ms: int = 5_000  # how often the master looks for members to shrink
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet
    in_sync_replicas: int = 1  # inSyncReplicas
    min_in_sync_replicas: int = 1  # minInSyncReplicas
    sync_from_last_file: bool = False  # syncFromLastFile
    async_learner: bool = False  # asyncLearner
    reconnect_min_ms: int = 100
    reconnect_max_ms: int = 3_000
    handshake_retry_ms: int = 2_000  # wait after "no consistent point" before trying again
    cluster_secret: str = ""  # set: a slave proves it before the handshake (ha_auth.py)


class AutoSwitchHAServer:
    """Master side: one session per slave connection (read acks, stream frames) over an AutoSwitchMaster."""

    def __init__(self, service: AutoSwitchHAService) -> None:
        self.service = service
        self.store = service.store
        self.clock = service.clock
        self.port = service.config.port
        self._server: asyncio.Server | None = None
        self._wakers: set[asyncio.Event] = set()
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        c = self.service.config
        self._server = await asyncio.start_server(self._handle, c.host, c.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def wake_all(self) -> None:
        for ev in self._wakers:
            ev.set()

    def drop_connections(self) -> None:
        for w in list(self._conns):
            w.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop_connections()
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()

    def bounds(self) -> LogBounds:
        st = self.store
        return LogBounds(st.min_phys_offset, st.max_phys_offset, st.last_file_start)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        master = self.service.master
        if master is None:  # not (or no longer) a master: refuse
            writer.close()
            return
        secret = self.service.config.cluster_secret
        if secret:
            peer = writer.get_extra_info("peername")
            if not await authenticated(reader, writer, secret, f"{peer[0]}:{peer[1]}" if peer else "?"):
                return
            if self.service.master is not master:  # the role changed while the peer answered
                writer.close()
                return
        cid = master.on_connect(self.clock.monotonic_ms())
        wake = asyncio.Event()
        self._wakers.add(wake)
        self._conns.add(writer)
        try:
            async with asyncio.TaskGroup() as tg:
                read_task = tg.create_task(self._read_loop(master, cid, reader, writer, wake))
                write_task = tg.create_task(self._write_loop(master, cid, writer, wake))
                read_task.add_done_callback(lambda _t: write_task.cancel())
        except* InvariantError as eg:
            log.error("AutoSwitch HA master: broken invariant, connection dropped: %r", eg.exceptions[0])
        except* (OSError, asyncio.IncompleteReadError, OrbitMQError) as eg:
            log.info("AutoSwitch HA slave connection ended: %r", eg.exceptions[0])
        finally:
            self._wakers.discard(wake)
            self._conns.discard(writer)
            writer.close()
            if self.service.master is master:
                self.service.report(master.on_disconnect(cid, self.store.max_phys_offset))

    async def _read_loop(self, master: AutoSwitchMaster, cid: int, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, wake: asyncio.Event) -> None:
        decoder = SlaveStreamDecoder()
        while True:
            try:
                async with asyncio.timeout(master.config.housekeeping_ms / 1000):
                    data = await reader.read(READ_SIZE)
            except TimeoutError:
                log.warning("AutoSwitch HA slave silent for %d ms: closing", master.config.housekeeping_ms)
                return
            if not data or self.service.master is not master:
                return
            for item in decoder.feed(data):
                now = self.clock.monotonic_ms()
                if isinstance(item, SlaveHandshake):
                    answer = master.on_handshake(cid, item, self.store.max_phys_offset, now)
                    writer.write(encode_master_handshake(answer))
                    continue
                assert isinstance(item, Ack)
                error, proposal = master.on_ack(cid, item.max_offset, self.bounds(), now)
                if error:
                    log.warning("AutoSwitch HA slave %d: %s; closing", master.conns[cid].broker_id, error)
                    return
                self.service.progress()
                self.service.report(proposal)
            wake.set()

    async def _write_loop(self, master: AutoSwitchMaster, cid: int, writer: asyncio.StreamWriter,
                          wake: asyncio.Event) -> None:
        hb_s = master.config.heartbeat_ms / 1000
        while True:
            now = self.clock.monotonic_ms()
            chunk = master.next_chunk(cid, self.bounds(), now)
            if chunk is None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(hb_s):
                        await wake.wait()
                continue
            data = self.store.read_commitlog(chunk.offset, chunk.size) if chunk.size else b""
            if chunk.size and not data:
                raise OrbitMQError(f"CommitLog bytes at {chunk.offset} are gone (deleted?)")
            if len(data) != chunk.size:
                chunk = Chunk(chunk.offset, len(data), chunk.epoch, chunk.epoch_start)
            writer.write(encode_transfer(chunk.offset, chunk.epoch, chunk.epoch_start, master.confirm_offset, data))
            master.on_sent(cid, chunk, self.store.max_phys_offset, now)
            await writer.drain()


class AutoSwitchHAClient:
    """Slave side: READY (cut invalid tail) -> connect -> HANDSHAKE (truncate at the consistent point) ->
    TRANSFER (append, ack); any failure goes back to READY after a backoff."""

    def __init__(self, service: AutoSwitchHAService, master_ha_addr: str, broker_id: int) -> None:
        self.service = service
        self.store = service.store
        self.clock = service.clock
        c = service.config
        self.master_ha_addr = master_ha_addr
        self.slave = AutoSwitchSlave(broker_id, EpochCache(self.store.epoch_entries),
                                     sync_from_last_file=c.sync_from_last_file, async_learner=c.async_learner,
                                     heartbeat_ms=c.heartbeat_ms, housekeeping_ms=c.housekeeping_ms)
        self.connected = False
        self.connects = 0
        self.handshake_failures = 0
        self.last_error = ""
        self._writer: asyncio.StreamWriter | None = None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    async def run(self) -> None:
        c = self.service.config
        backoff = c.reconnect_min_ms
        while True:
            self.store.truncate_invalid()
            self.slave.epochs = EpochCache(self.store.epoch_entries)
            wait_ms = backoff
            try:
                outcome = await self._session()
            except (OSError, asyncio.IncompleteReadError, OrbitMQError) as e:
                outcome = "error"
                self.last_error = repr(e)
                level = logging.ERROR if isinstance(e, InvariantError) else logging.INFO
                log.log(level, "AutoSwitch HA connection to %s ended: %r", self.master_ha_addr, e)
            finally:
                self.connected = False
                self.slave.on_disconnected()
            if outcome == "data":
                backoff = c.reconnect_min_ms
                wait_ms = backoff
            elif outcome == "handshake":
                wait_ms = max(backoff, c.handshake_retry_ms)
            await asyncio.sleep(wait_ms / 1000)
            backoff = min(backoff * 2, c.reconnect_max_ms)

    async def _session(self) -> str:
        """One connection; returns "data" (it carried data), "handshake" (no consistent point) or "idle"."""
        host, _, port = self.master_ha_addr.rpartition(":")
        async with asyncio.timeout(3):
            reader, writer = await asyncio.open_connection(host, int(port))
        self._writer = writer
        self.connected = True
        self.connects += 1
        slave = self.slave
        decoder = MasterStreamDecoder()
        got_data = False
        try:
            if self.service.config.cluster_secret:
                await prove(reader, writer, self.service.config.cluster_secret)
            writer.write(encode_slave_handshake(slave.on_connected(self.clock.monotonic_ms())))
            await writer.drain()
            while True:
                try:
                    async with asyncio.timeout(slave.housekeeping_ms / 1000):
                        data = await reader.read(READ_SIZE)
                except TimeoutError:
                    self.last_error = "master silent"
                    return "data" if got_data else "idle"
                if not data:
                    self.last_error = "master closed the connection"
                    return "data" if got_data else "idle"
                now = self.clock.monotonic_ms()
                for item in decoder.feed(data):
                    if isinstance(item, MasterHandshake):
                        if not self._on_handshake(item, writer, now):
                            return "handshake"
                    elif not self._on_frame(item, now):
                        return "data" if got_data else "idle"
                    else:
                        got_data = got_data or not item.is_heartbeat
                offset = self.store.max_phys_offset
                if slave.report_due(offset, now):  # ack first (the bytes are in the CommitLog), then dispatch
                    writer.write(encode_ack(offset))
                    slave.on_reported(offset, now)
                self.store.replica.dispatch_complete()
                # with the replica gate on, consumers of a slave see only what the master confirmed
                self.store.replica.on_replicated(slave.confirm_offset)
                await writer.drain()
        finally:
            self._writer = None
            self.store.replica.dispatch_complete()
            writer.close()

    def _on_handshake(self, hs: MasterHandshake, writer: asyncio.StreamWriter, now: int) -> bool:
        store = self.store
        t = self.slave.on_master_handshake(hs, store.max_phys_offset, now)
        if not t.ok:
            self.handshake_failures += 1
            self.last_error = t.reason
            log.warning("AutoSwitch HA handshake with %s failed: %s", self.master_ha_addr, t.reason)
            return False
        if t.truncate_to >= 0:
            log.warning("AutoSwitch HA: truncating the CommitLog from %d to the consistent point %d",
                        store.max_phys_offset, t.truncate_to)
            store.truncate_dirty(t.truncate_to)
        store.replace_epochs(list(t.epochs))
        self.slave.truncated(t)
        writer.write(encode_ack(t.report_offset))
        self.slave.on_reported(t.report_offset, now)
        return True

    def _on_frame(self, frame: TransferFrame, now: int) -> bool:
        store = self.store
        verdict, new_epoch = self.slave.on_frame(frame, store.max_phys_offset, now)
        if verdict is FrameVerdict.APPEND:
            if new_epoch:
                store.replace_epochs(list(self.slave.epochs.entries))
            store.replica.append_raw(frame.offset, frame.data, dispatch=False)
            self.slave.after_append(frame, store.max_phys_offset)
            return True
        if verdict is FrameVerdict.HEARTBEAT:
            return True
        self.last_error = (f"{verdict.value}: frame at {frame.offset} epoch {frame.epoch} (local end "
                           f"{store.max_phys_offset}, epochs {self.slave.epochs.entries[-2:]})")
        log.warning("AutoSwitch HA: %s", self.last_error)
        return False


class AutoSwitchHAService:
    """One per broker: owns the HA listener and switches between master and slave without a restart.

    The broker's ReplicasManager calls change_to_master / change_to_slave on role changes and
    set_sync_state_set with the controller's answers; it implements `on_sync_state_set_change(proposed)` (report
    ALTER_SYNC_STATE_SET, then call set_sync_state_set or sync_state_set_change_failed)."""

    def __init__(self, store: Any, config: AutoSwitchConfig, broker_id: int, *, clock: Clock = REAL_CLOCK,
                 on_sync_state_set_change: Callable[[set[int]], None] | None = None) -> None:
        self.store = store
        self.config = config
        self.broker_id = broker_id
        self.clock = clock
        self.on_sync_state_set_change = on_sync_state_set_change
        self.role = "NONE"
        self.master: AutoSwitchMaster | None = None
        self.client: AutoSwitchHAClient | None = None
        self.server = AutoSwitchHAServer(self)
        self._client_task: asyncio.Task[None] | None = None
        self._check_task: asyncio.Task[None] | None = None
        self.proposals = 0

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self._stop_roles()
        await self.server.stop()

    async def _stop_roles(self) -> None:
        for task in (self._client_task, self._check_task):
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1)
            if task is not None and not task.cancelled() and task.exception() is not None:
                log.error("AutoSwitch HA task %s failed: %r", task.get_name(), task.exception())
        self._client_task = self._check_task = None
        if self.client is not None:
            self.client.close()
        self.client = None
        self.master = None
        if self.store.replica.on_written == self._on_written:
            self.store.replica.on_written = None
        self.server.drop_connections()

    async def suspend(self) -> None:
        """Stop being master or slave (fenced, no replication) until the next change_to_* call."""
        await self._stop_roles()
        self.role = "NONE"

    # ---- role changes ----------------------------------------------------------------------------------
    async def change_to_master(self, epoch: int, sync_state_set: set[int], sss_epoch: int = 0) -> None:
        """Become (or stay) master of `epoch` (§4.6): cut only invalid tail bytes, record (epoch, maxPhyOffset),
        start serving slaves with the controller's SyncStateSet. ValueError on a stale epoch."""
        store = self.store
        cache = EpochCache(store.epoch_entries)
        if epoch < cache.newest:
            raise ValueError(f"changeToMaster epoch {epoch} is older than the last epoch {cache.newest}")
        if self.master is not None and self.role == "MASTER":  # re-elected: keep connections and queue offsets
            if epoch > cache.newest:
                self.master.epochs.append(epoch, store.max_phys_offset)
                store.replace_epochs(list(self.master.epochs.entries))
            self.set_sync_state_set(sync_state_set, sss_epoch)
            return
        prior_confirm = self.client.slave.confirm_offset if self.client is not None else store.confirm_offset
        await self._stop_roles()
        end = store.truncate_invalid()
        cache = EpochCache(store.epoch_entries)
        cache.truncate_suffix_by_offset(end + 1)  # entries starting past the end (an empty one AT it stays)
        if cache.newest != epoch:  # the same epoch again (a restarted master) keeps its start offset
            cache.truncate_suffix_by_epoch(epoch)
            check(cache.append(epoch, end), f"epoch ({epoch}, {end}) cannot follow {cache.entries[-2:]}")
        store.replace_epochs(list(cache.entries))
        mc = MasterConfig(store.config.mapped_file_size_commitlog, self.config.batch_size, self.config.heartbeat_ms,
                          self.config.housekeeping_ms, self.config.max_time_slave_not_catchup_ms,
                          self.config.all_ack_in_sync_state_set, self.config.in_sync_replicas,
                          self.config.min_in_sync_replicas)
        self.master = AutoSwitchMaster(mc, self.broker_id, cache, set(sync_state_set), sss_epoch,
                                       min(prior_confirm, end))
        self.role = "MASTER"
        store.replica.on_written = self._on_written
        self.progress()
        self._check_task = asyncio.get_running_loop().create_task(self._check_loop(), name="autoswitch ha check")
        log.info("AutoSwitch HA: master of epoch %d at %d, SyncStateSet %s", epoch, end, sorted(sync_state_set))

    async def change_to_slave(self, master_ha_addr: str, epoch: int, self_broker_id: int) -> None:
        """Follow the master at `master_ha_addr` (a new client, starting at READY). ValueError on a stale epoch."""
        newest = EpochCache(self.store.epoch_entries).newest
        if epoch < newest:
            raise ValueError(f"changeToSlave epoch {epoch} is older than the last epoch {newest}")
        await self._stop_roles()
        self.broker_id = self_broker_id
        self.role = "SLAVE"
        self.client = AutoSwitchHAClient(self, master_ha_addr, self_broker_id)
        self._client_task = asyncio.get_running_loop().create_task(self.client.run(), name="autoswitch ha client")
        log.info("AutoSwitch HA: slave of %s (epoch %d)", master_ha_addr, epoch)

    # ---- SyncStateSet ------------------------------------------------------------------------------------
    def set_sync_state_set(self, sync_state_set: set[int], sss_epoch: int) -> bool:
        """The controller's SyncStateSet (an answer to a proposal, or a notification); True if applied."""
        if self.master is None:
            return False
        applied = self.master.set_sync_state_set(set(sync_state_set), sss_epoch, self.store.max_phys_offset)
        self.progress()
        return applied

    def sync_state_set_change_failed(self) -> None:
        """The proposal did not reach the controller: drop it (a later check proposes again)."""
        if self.master is not None:
            self.master.proposal_failed()

    def report(self, proposal: set[int] | None) -> None:
        if proposal is None:
            return
        self.proposals += 1
        log.info("AutoSwitch HA: proposing SyncStateSet %s", sorted(proposal))
        if self.on_sync_state_set_change is not None:
            self.on_sync_state_set_change(set(proposal))

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.check_sync_state_set_period_ms / 1000)
            master = self.master
            if master is None:
                return
            now = self.clock.monotonic_ms()
            self.report(master.check_shrink(now, self.store.max_phys_offset))

    # ---- confirm offset ----------------------------------------------------------------------------------
    def _on_written(self) -> None:
        self.server.wake_all()
        self.progress()

    def progress(self) -> None:
        """Recompute the confirm offset and release SYNC waiters (and gated visibility) it covers."""
        master = self.master
        if master is None:
            return
        top = self.store.max_phys_offset
        master.refresh_confirm(top)
        self.store.replica.on_replicated(master.acked_offset(top))

    @property
    def confirm_offset(self) -> int:
        if self.master is not None:
            return self.master.confirm_offset
        if self.client is not None:
            return self.client.slave.confirm_offset
        return self.store.confirm_offset

    def needed_acks(self) -> int:
        return self.master.needed_acks() if self.master is not None else 0

    def check_put(self) -> str | None:
        """IN_SYNC_REPLICAS_NOT_ENOUGH when a put needing HA must be refused before it is appended."""
        return self.master.check_put() if self.master is not None else None

    def status(self) -> dict[str, str]:
        st = self.store
        out = {"haRole": self.role, "haPort": str(self.port), "haConfirmOffset": str(self.confirm_offset),
               "masterEpoch": str(st.master_epoch), "commitLogMaxOffset": str(st.max_phys_offset)}
        if self.master is not None:
            m = self.master
            out |= {"syncStateSet": ",".join(map(str, sorted(m.sync_state_set))), "syncStateSetEpoch":
                    str(m.sss_epoch), "syncStateSetProposed": ",".join(map(str, sorted(m.proposed or ()))),
                    "haConnectedSlaves": str(len(m.conns)), "haProposals": str(self.proposals)}
            out |= {f"haSlaveLag[{b}]": str(lag) for b, lag in m.lag_bytes(st.max_phys_offset).items()}
        if self.client is not None:
            c = self.client
            out |= {"haMasterAddr": c.master_ha_addr, "haConnected": str(c.connected).lower(),
                    "haState": c.slave.state.name, "haLastError": c.last_error,
                    "haTruncations": str(c.slave.truncations), "haHandshakeFailures": str(c.handshake_failures)}
        return out
