"""RaftTransport: Raft messages between peers over the remoting protocol (ORBIT_RAFT_MESSAGE, oneway).

Owns one outbound RemotingClient, a bounded per-peer queue (oldest dropped) and one sender task per peer.
It does NOT own a listening socket: whoever owns the port (the controller) routes ORBIT_RAFT_MESSAGE requests to
handle(). Delivery is best effort by design: Raft retries, so a message to an unreachable or slow peer is
dropped, never waited for and never queued without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from orbitmq.base.errors import ConfigError, ProtocolError, RemotingError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.raft.codec import decode_batch, encode_batch_parts, encode_message
from orbitmq.raft.messages import Message
from orbitmq.remoting import Connection, RemotingClient

log = logging.getLogger("orbitmq.raft")

Receiver = Callable[[list[Message]], None]
DEFAULT_QUEUE_LIMIT = 1024             # messages per peer; beyond it the oldest is dropped
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024


def parse_peers(spec: str) -> dict[str, str]:
    """`controllerDLegerPeers` ("n0-127.0.0.1:9878;n1-127.0.0.1:9868") -> {"n0": "127.0.0.1:9878", ...};
    ConfigError naming the bad entry when malformed (no id, no host, a port outside 1..65535, a duplicate id)."""
    out: dict[str, str] = {}
    for item in spec.split(";"):
        item = item.strip()
        if not item:
            continue
        node_id, sep, addr = item.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not node_id or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bad controllerDLegerPeers entry {item!r} (expected id-host:port)")
        if node_id in out:
            raise ConfigError(f"duplicate peer id {node_id!r} in controllerDLegerPeers")
        out[node_id] = f"{host}:{port}"
    return out


class _Peer:
    __slots__ = ("node_id", "addr", "queue", "wake", "task", "dropped", "sent", "down")

    def __init__(self, node_id: str, addr: str) -> None:
        self.node_id = node_id
        self.addr = addr
        self.queue: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.sent = 0
        self.down = False  # last attempt failed (for logging the outage once)


class RaftTransport:
    """Peer-to-peer message delivery for one Raft group. Use: set_receiver(), await start(), send(), handle(),
    await stop()."""

    def __init__(self, group: str, node_id: str, peers: Mapping[str, str], *,
                 client: RemotingClient | None = None, queue_limit: int = DEFAULT_QUEUE_LIMIT,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, connect_timeout_ms: int = 1000,
                 retry_backoff_ms: int = 100, sign: Callable[[RemotingCommand], object] | None = None) -> None:
        if node_id not in peers:
            raise ValueError(f"node id {node_id!r} is not one of the peers {sorted(peers)}")
        self.group = group
        self.node_id = node_id
        self.addrs = dict(peers)
        self._sign = sign  # applied to every outgoing message (the cluster secret's signature)
        self._own_client = client is None
        self._client = client if client is not None else self._new_client(node_id, connect_timeout_ms)
        self._connect_timeout_ms = connect_timeout_ms
        self._backoff_s = retry_backoff_ms / 1000.0
        self._queue_limit = queue_limit
        self._max_batch_bytes = max_batch_bytes
        self._peers = {p: _Peer(p, a) for p, a in peers.items() if p != node_id}
        self._receiver: Receiver | None = None
        self._logged: set[str] = set()
        self._running = False
        self._stopped_once = False
        self.received = 0
        self.not_running_drops = 0
        self.rejected = 0

    @staticmethod
    def _new_client(node_id: str, connect_timeout_ms: int) -> RemotingClient:
        return RemotingClient(name=f"raft-{node_id}", connect_timeout_ms=connect_timeout_ms)

    # ---- lifecycle ----------------------------------------------------------------------------------
    def set_receiver(self, receiver: Receiver | None) -> None:
        """Called (on the event loop) with each inbound batch for this node; None drops inbound messages."""
        self._receiver = receiver

    async def start(self) -> None:
        if self._running:
            return
        if self._own_client and self._stopped_once:  # stop() closed it: a restart gets a fresh one
            self._client = self._new_client(self.node_id, self._connect_timeout_ms)
        self._running = True
        for p in self._peers.values():
            p.task = asyncio.create_task(self._sender(p), name=f"raft-send-{self.node_id}->{p.node_id}")

    async def stop(self) -> None:
        self._running = False
        self._stopped_once = True
        tasks = [p.task for p in self._peers.values() if p.task is not None]
        for p in self._peers.values():
            p.task = None
            p.queue.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._own_client:
            await self._client.close()

    def peer_addr(self, node_id: str) -> str:
        return self.addrs.get(node_id, "")

    def status(self) -> dict[str, object]:
        return {"received": self.received, "rejected": self.rejected,
                "peers": {p.node_id: {"addr": p.addr, "queued": len(p.queue), "sent": p.sent,
                                      "dropped": p.dropped, "down": p.down} for p in self._peers.values()}}

    # ---- outbound -----------------------------------------------------------------------------------
    def send(self, messages: Iterable[Message]) -> None:
        """Queue messages for their peers (encoded now: the caller may reuse the objects). Never blocks."""
        if not self._running:
            self.not_running_drops += sum(1 for _ in messages)
            return
        for m in messages:
            peer = self._peers.get(m.dst)
            if peer is None:
                self._log_once(f"dst:{m.dst}", "raft %s: dropping %s to unknown peer %r", self.node_id,
                               m.type.name, m.dst)
                continue
            peer.queue.append(encode_message(m))
            if len(peer.queue) > self._queue_limit:
                peer.queue.popleft()
                peer.dropped += 1
            peer.wake.set()

    def _take_batch(self, peer: _Peer) -> list[bytes]:
        batch: list[bytes] = []
        size = 0
        while peer.queue and (not batch or size + len(peer.queue[0]) <= self._max_batch_bytes):
            part = peer.queue.popleft()
            batch.append(part)
            size += len(part) + 4
        return batch

    async def _sender(self, peer: _Peer) -> None:
        while self._running:
            await peer.wake.wait()
            peer.wake.clear()
            while peer.queue and self._running:
                try:
                    conn = await self._client.get_connection(peer.addr, self._connect_timeout_ms)
                except RemotingError as e:
                    self._peer_failed(peer, str(e))
                    await asyncio.sleep(self._backoff_s)  # the queue stays bounded meanwhile
                    continue
                if conn.reading_paused:  # its write buffer is over the high-water mark: a slow peer
                    self._peer_failed(peer, "write buffer full")
                    await asyncio.sleep(self._backoff_s)
                    continue
                batch = self._take_batch(peer)
                cmd = RemotingCommand.request(RequestCode.ORBIT_RAFT_MESSAGE,
                                              {"group": self.group, "from": self.node_id},
                                              encode_batch_parts(batch), oneway=True)
                if self._sign is not None:
                    self._sign(cmd)
                try:
                    conn.invoke_oneway(cmd)
                except RemotingError as e:
                    peer.dropped += len(batch)
                    self._peer_failed(peer, str(e))
                    continue
                peer.sent += len(batch)
                if peer.down:
                    peer.down = False
                    log.info("raft %s: peer %s at %s reachable again", self.node_id, peer.node_id, peer.addr)

    def _peer_failed(self, peer: _Peer, reason: str) -> None:
        dropped = len(peer.queue)
        peer.dropped += dropped
        peer.queue.clear()  # stale by the time the peer is back; Raft resends what still matters
        if not peer.down:
            peer.down = True
            log.warning("raft %s: peer %s at %s unreachable (%s); dropping its messages until it is back",
                        self.node_id, peer.node_id, peer.addr, reason)

    # ---- inbound ------------------------------------------------------------------------------------
    def handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """The ORBIT_RAFT_MESSAGE handler to register with the server owning the port."""
        ext = cmd.ext_fields or {}
        group = ext.get("group", "")
        src = ext.get("from", "")
        if group != self.group:
            self.rejected += 1
            self._log_once(f"group:{group}", "raft %s: ignoring messages for group %r from %s (this node is in "
                           "group %r)", self.node_id, group, conn.remote_addr, self.group)
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR,
                                f"raft group {group!r} is not served here (group {self.group!r})")
        if src not in self._peers:
            self.rejected += 1
            self._log_once(f"from:{src}", "raft %s: ignoring messages from unknown peer %r at %s", self.node_id,
                           src, conn.remote_addr)
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, f"raft peer {src!r} is not a member")
        try:
            msgs = decode_batch(cmd.body or b"")
        except ProtocolError as e:
            self.rejected += 1
            self._log_once(f"bad:{src}", "raft %s: undecodable batch from %s: %s", self.node_id, src, e)
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        msgs = [m for m in msgs if m.src == src and m.dst == self.node_id]
        self.received += len(msgs)
        if msgs and self._receiver is not None:
            self._receiver(msgs)
        return self._answer(cmd, ResponseCode.SUCCESS, None)

    @staticmethod
    def _answer(cmd: RemotingCommand, code: int, remark: str | None) -> RemotingCommand | None:
        return None if cmd.is_oneway else cmd.response(code, remark)

    def _log_once(self, key: str, fmt: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(fmt, *args)


__all__ = ["RaftTransport", "Receiver", "parse_peers"]
