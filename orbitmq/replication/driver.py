"""asyncio driver of classic HA replication: HAServer on the master's haListenPort, HAClient on the slave.

Runs the sans-IO HAMaster / HASlave over raw TCP (frames.py). The master streams CommitLog bytes read through
MessageStore.read_commitlog and feeds slave reports into store.replica.on_replicated (SYNC_MASTER waiters,
visibility gate). The slave appends with MessageStore.append_raw and reconnects with capped exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.base.errors import OrbitMQError
from orbitmq.replication.epoch import EpochCache
from orbitmq.replication.frames import DataDecoder, ReportDecoder, encode_data, encode_report
from orbitmq.replication.ha_auth import authenticated, prove
from orbitmq.replication.master import HAMaster
from orbitmq.replication.slave import HASlave, Verdict

log = logging.getLogger(__name__)

MASTER_READ_SIZE = 1 << 20
SLAVE_READ_SIZE = 4 << 20


@dataclass(frozen=True)
class ReplicationConfig:
    host: str = "0.0.0.0"
    port: int = 0  # haListenPort (0 = any free port)
    batch_size: int = 32 * 1024  # haTransferBatchSize
    heartbeat_ms: int = 5_000  # haSendHeartbeatInterval
    housekeeping_ms: int = 20_000  # haHousekeepingInterval
    fallbehind_max: int = 256 * 1024 * 1024  # haSlaveFallbehindMax
    reconnect_min_ms: int = 100
    reconnect_max_ms: int = 3_000
    cluster_secret: str = ""  # set: a slave proves it before any data (ha_auth.py)
    server_ssl: Any = None  # ssl.SSLContext: the master's HA port speaks TLS only (remoting/tls.py)
    client_ssl: Any = None  # ssl.SSLContext: the slave connects with TLS


class HAServer:
    """Master side: accepts slave connections and streams the CommitLog to each."""

    def __init__(self, store: Any, master: HAMaster, config: ReplicationConfig, *, clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.master = master
        self.config = config
        self.clock = clock
        self.port = config.port
        self._server: asyncio.Server | None = None
        self._wakers: set[asyncio.Event] = set()
        self._conns: set[asyncio.StreamWriter] = set()
        store.replica.on_written = self._wake_all

    def _wake_all(self) -> None:
        for ev in self._wakers:
            ev.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.config.host, self.config.port,
                                                  ssl=self.config.server_ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("HA server listening on %s:%d (epoch %d)", self.config.host, self.port, self.master.epoch)

    async def stop(self) -> None:
        if self.store.replica.on_written == self._wake_all:
            self.store.replica.on_written = None
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self.config.cluster_secret and not await authenticated(reader, writer, self.config.cluster_secret,
                                                                  address):
            return
        sid = self.master.on_connect(address, self.clock.monotonic_ms())
        wake = asyncio.Event()
        self._wakers.add(wake)
        self._conns.add(writer)
        log.info("HA slave %s connected", address)
        try:
            async with asyncio.TaskGroup() as tg:
                read_task = tg.create_task(self._read_loop(sid, reader, wake))
                write_task = tg.create_task(self._write_loop(sid, writer, wake))
                read_task.add_done_callback(lambda _t: write_task.cancel())
        except* (OSError, asyncio.IncompleteReadError, OrbitMQError) as eg:
            log.info("HA slave %s connection ended: %r", address, eg.exceptions[0])
        finally:
            self._wakers.discard(wake)
            self._conns.discard(writer)
            self.master.on_disconnect(sid)
            writer.close()
            log.info("HA slave %s disconnected", address)

    async def _read_loop(self, sid: int, reader: asyncio.StreamReader, wake: asyncio.Event) -> None:
        decoder = ReportDecoder()
        master = self.master
        while True:
            try:
                data = await asyncio.wait_for(reader.read(MASTER_READ_SIZE), master.housekeeping_ms / 1000)
            except TimeoutError:
                log.warning("HA slave silent for %d ms: closing", master.housekeeping_ms)
                return
            if not data:
                return
            offset = decoder.feed(data)
            if offset is None:
                continue
            max_offset = self.store.max_phys_offset
            advanced = master.on_report(sid, offset, max_offset, self.clock.monotonic_ms())
            if master.diverged(sid, max_offset):
                log.error("HA slave reports offset %d beyond the master's %d: refusing to stream", offset, max_offset)
                return
            if advanced:
                self.store.replica.on_replicated(master.confirm_offset)
            wake.set()

    async def _write_loop(self, sid: int, writer: asyncio.StreamWriter, wake: asyncio.Event) -> None:
        master = self.master
        store = self.store
        epoch = master.epoch
        hb_s = master.heartbeat_ms / 1000
        while True:
            now = self.clock.monotonic_ms()
            chunk = master.next_chunk(sid, store.max_phys_offset, now)
            if chunk is None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), hb_s)
                continue
            start, size = chunk
            data = store.read_commitlog(start, size) if size else b""
            writer.write(encode_data(start, epoch, data))
            master.on_sent(sid, start, len(data), now)
            await writer.drain()

    def lag_bytes(self) -> dict[str, int]:
        return self.master.lag_bytes(self.store.max_phys_offset)


class HAClient:
    """Slave side: connect to the master's HA address, report offsets, append what arrives; reconnect."""

    def __init__(self, store: Any, resolve_master: Callable[[], Awaitable[str | None]], config: ReplicationConfig,
                 *, clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.resolve_master = resolve_master
        self.config = config
        self.clock = clock
        entries = list(getattr(store.epochs, "entries", []))
        self.slave = HASlave(EpochCache(entries), heartbeat_ms=config.heartbeat_ms,
                             housekeeping_ms=config.housekeeping_ms)
        self.master_ha_addr: str | None = None
        self.connected = False
        self.last_error = ""
        self.connects = 0
        self.stale_refusals = 0
        self.connect_failed = False  # the last attempt could not open a connection at all
        self._writer: asyncio.StreamWriter | None = None
        self._kick: asyncio.Event | None = None

    def reconnect_now(self) -> None:
        """The master's HA address may have changed (EXCHANGE_BROKER_HA_INFO): drop the current session, skip the
        backoff and resolve the master again at once."""
        if self._writer is not None:
            self._writer.close()
        if self._kick is not None:
            self._kick.set()

    async def run(self) -> None:
        backoff = self.config.reconnect_min_ms
        self._kick = kick = asyncio.Event()
        while True:
            kick.clear()
            addr = None
            try:
                addr = await self.resolve_master()
            except (OSError, OrbitMQError) as e:
                self.last_error = f"resolve master: {e!r}"
            if addr:
                self.master_ha_addr = addr
                try:
                    if await self._session(addr):
                        backoff = self.config.reconnect_min_ms
                except (OSError, asyncio.IncompleteReadError, OrbitMQError) as e:
                    self.last_error = repr(e)
                    log.info("HA connection to %s ended: %r", addr, e)
                finally:
                    self.connected = False
            if kick.is_set():
                backoff = self.config.reconnect_min_ms
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), backoff / 1000)
            backoff = min(backoff * 2, self.config.reconnect_max_ms)

    async def _session(self, addr: str) -> bool:
        """One connection; True if it carried data (resets the backoff)."""
        host, _, port = addr.rpartition(":")
        self.connect_failed = True
        ssl_ctx = self.config.client_ssl
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=ssl_ctx, server_hostname=host if ssl_ctx else None), 3)
        self.connect_failed = False
        self._writer = writer
        self.connected = True
        self.connects += 1
        store = self.store
        slave = self.slave
        decoder = DataDecoder()
        got_data = False
        now = self.clock.monotonic_ms()
        slave.on_connected(now)
        try:
            if self.config.cluster_secret:
                await prove(reader, writer, self.config.cluster_secret)
            offset = store.max_phys_offset
            writer.write(encode_report(offset))
            slave.on_reported(offset, now)
            await writer.drain()
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(SLAVE_READ_SIZE), slave.housekeeping_ms / 1000)
                except TimeoutError:
                    self.last_error = "master silent"
                    return got_data
                if not data:
                    self.last_error = "master closed the connection"
                    return got_data
                now = self.clock.monotonic_ms()
                for frame in decoder.feed(data):
                    verdict, new_epoch = slave.on_frame(frame, store.max_phys_offset, now)
                    if verdict is Verdict.APPEND:
                        if new_epoch:
                            store.set_master_epoch(frame.epoch, frame.phys_offset)
                        store.replica.append_raw(frame.phys_offset, frame.data, dispatch=False)
                        got_data = True
                    elif verdict is Verdict.STALE_EPOCH:
                        self.stale_refusals += 1
                        self.last_error = f"refused frame of stale epoch {frame.epoch} < {slave.epochs.newest}"
                        log.warning("HA: %s from %s", self.last_error, addr)
                        return got_data
                    elif verdict is Verdict.OFFSET_MISMATCH:
                        self.last_error = (f"frame at {frame.phys_offset} does not continue the log at "
                                           f"{store.max_phys_offset}")
                        log.warning("HA: %s", self.last_error)
                        return got_data
                offset = store.max_phys_offset
                if slave.report_due(offset, now):  # ack first (the bytes are in the CommitLog), then dispatch
                    writer.write(encode_report(offset))
                    slave.on_reported(offset, now)
                store.replica.dispatch_complete()
                await writer.drain()
        finally:
            self._writer = None
            store.replica.dispatch_complete()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
