"""RoleChangeNotifier: pushes oneway NOTIFY_BROKER_ROLE_CHANGED (1008) to brokers after an election.

One pending push per broker address; a push with a newer master epoch cancels an older one still pending for the
same address (connecting can take up to the 3 s timeout). Best effort: brokers also poll GET_REPLICA_INFO.
"""

from __future__ import annotations

import asyncio
import logging

from orbitmq.base.errors import RemotingConnectError, RemotingTimeoutError
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies.controller import NotifyBrokerRoleChangedRequestHeader, SyncStateSet
from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_MS = 3000


class RoleChangeNotifier:
    def __init__(self, client: RemotingClient | None = None) -> None:
        self.client = client if client is not None else RemotingClient(name="controller-notify",
                                                                       connect_timeout_ms=NOTIFY_TIMEOUT_MS)
        self._pending: dict[str, tuple[int, asyncio.Task[None]]] = {}
        self.sent = 0

    def notify(self, addrs: list[str], header: NotifyBrokerRoleChangedRequestHeader, body: SyncStateSet) -> None:
        """Schedule one push per address (call from the event loop)."""
        epoch = header.master_epoch or 0
        for addr in addrs:
            prev = self._pending.get(addr)
            if prev is not None:
                if prev[0] > epoch:
                    continue  # a newer push is already on its way
                prev[1].cancel()
            task = asyncio.get_running_loop().create_task(self._push(addr, header, body))
            self._pending[addr] = (epoch, task)
            task.add_done_callback(lambda t, a=addr: self._done(a, t))

    def _done(self, addr: str, task: asyncio.Task[None]) -> None:
        cur = self._pending.get(addr)
        if cur is not None and cur[1] is task:
            del self._pending[addr]

    async def _push(self, addr: str, header: NotifyBrokerRoleChangedRequestHeader, body: SyncStateSet) -> None:
        cmd = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext(), body.to_json(),
                                      oneway=True)
        try:
            async with asyncio.timeout(NOTIFY_TIMEOUT_MS / 1000):
                await self.client.invoke_oneway(addr, cmd)
            self.sent += 1
            log.info("notified %s: master %s (%s) epoch %s", addr, header.master_broker_id, header.master_address,
                     header.master_epoch)
        except (RemotingConnectError, RemotingTimeoutError, TimeoutError, OSError) as e:
            log.warning("role-change notification to %s failed: %s", addr, e)

    async def close(self) -> None:
        tasks = [t for _, t in self._pending.values()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()
        await self.client.close()
