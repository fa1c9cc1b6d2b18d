"""ControllerLink: the broker's requests to the controllers. Finds the leader (GET_METADATA_INFO, 1005), sends
reads/writes to it (re-finding it once on CONTROLLER_NOT_LEADER or a broken connection), heartbeats (904) to every
controller, and reports the closing of the connection to the leader (the master's lease ends with it).
Knows the wire shapes only; role decisions are the ReplicasManager's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.controller import GetMetaDataResponseHeader
from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 3000


class ControllerUnavailable(OrbitMQError):
    """No controller leader could be reached."""


class ControllerLink:
    def __init__(self, client: RemotingClient, addrs: list[str], on_leader_lost: Callable[[], None]) -> None:
        self.client = client
        self.addrs = list(addrs)
        self.leader_addr: str | None = None
        self.leader_id: str | None = None
        self.on_leader_lost = on_leader_lost
        self._watched: Any = None  # the Connection to the leader whose close we watch
        self.leader_changes = 0

    async def find_leader(self) -> str:
        """Ask the controllers (1005). The configured address of the one that says it leads is preferred (it may be
        a proxy in front of the leader's own address); else the leader address another controller names.
        ControllerUnavailable if no leader is known."""
        errors: list[str] = []
        named: str | None = None
        for addr in self.addrs:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
                                                REQUEST_TIMEOUT_MS)
            except OrbitMQError as e:
                errors.append(f"{addr}: {e}")
                continue
            if resp.code != ResponseCode.SUCCESS:
                errors.append(f"{addr}: code {resp.code}")
                continue
            h = GetMetaDataResponseHeader.from_ext(resp.ext_fields)
            if h.is_leader:
                return self._set_leader(addr, h.controller_leader_id)
            if h.controller_leader_address and named is None:
                named = h.controller_leader_address
            errors.append(f"{addr}: not the leader")
        if named is not None:
            return self._set_leader(named, None)
        self.leader_addr = None
        raise ControllerUnavailable("no controller leader: " + "; ".join(errors))

    def _set_leader(self, addr: str, leader_id: str | None) -> str:
        if addr != self.leader_addr:
            self.leader_changes += 1
            log.info("controller leader is %s (%s)", addr, leader_id or "?")
        self.leader_addr, self.leader_id = addr, leader_id
        return addr

    async def _watch(self, addr: str) -> None:
        conn = await self.client.get_connection(addr, REQUEST_TIMEOUT_MS)
        if conn is not self._watched:
            self._watched = conn
            conn.add_close_callback(self._closed)

    def _closed(self, conn: Any) -> None:
        if conn is self._watched:
            self._watched = None
            log.warning("connection to the controller leader %s closed", self.leader_addr)
            self.on_leader_lost()

    def leader_connected(self) -> bool:
        return self._watched is not None and not self._watched.closed

    async def call(self, code: int, ext: dict[str, str], body: bytes | None = None,
                   timeout_ms: int = REQUEST_TIMEOUT_MS) -> RemotingCommand:
        """Send to the leader; on CONTROLLER_NOT_LEADER or a transport error find the leader again and retry once.
        Returns the leader's answer (any code); raises OrbitMQError when no leader answered."""
        for attempt in (0, 1):
            addr = self.leader_addr or await self.find_leader()
            try:
                await self._watch(addr)
                resp = await self.client.invoke(addr, RemotingCommand.request(code, dict(ext), body), timeout_ms)
            except OrbitMQError:
                self.leader_addr = None
                if attempt:
                    raise
                continue
            if resp.code == ResponseCode.CONTROLLER_NOT_LEADER and not attempt:
                self.leader_addr = None
                continue
            return resp
        raise ControllerUnavailable("unreachable")  # not reached: the loop returns or raises

    async def heartbeat(self, addr: str, ext: dict[str, str]) -> None:
        """One oneway BROKER_HEARTBEAT to `addr` (raises OrbitMQError when it cannot be sent)."""
        await self.client.invoke_oneway(addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, dict(ext),
                                                                       oneway=True))
