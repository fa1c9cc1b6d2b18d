"""RoleChangeNotifier: one pending push per address, newer master epochs supersede older pending ones."""

from __future__ import annotations

import asyncio

from orbitmq.controller.notify import RoleChangeNotifier
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import NotifyBrokerRoleChangedRequestHeader, SyncStateSet


class GatedClient:
    """Records oneway sends; each send waits until the test opens the gate (a slow connect)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.sent: list[tuple[str, RemotingCommand]] = []
        self.closed = False

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self.gate.wait()
        self.sent.append((addr, cmd))

    async def close(self) -> None:
        self.closed = True


def header(epoch: int) -> NotifyBrokerRoleChangedRequestHeader:
    return NotifyBrokerRoleChangedRequestHeader("10.0.0.2:10911", epoch, epoch + 1, 2)


async def _supersede() -> tuple[GatedClient, RoleChangeNotifier]:
    client = GatedClient()
    n = RoleChangeNotifier(client)  # type: ignore[arg-type]
    n.notify(["a:1", "b:1"], header(1), SyncStateSet(frozenset({2}), 2))
    await asyncio.sleep(0)
    n.notify(["a:1"], header(2), SyncStateSet(frozenset({2}), 3))  # replaces the pending epoch-1 push to a:1
    n.notify(["a:1"], header(1), SyncStateSet(frozenset({2}), 2))  # stale: ignored while epoch 2 is pending
    client.gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    await n.close()
    return client, n


def test_newer_epoch_supersedes_pending_push() -> None:
    client, n = asyncio.run(_supersede())
    got = sorted((addr, int(cmd.ext_fields["masterEpoch"])) for addr, cmd in client.sent)
    assert got == [("a:1", 2), ("b:1", 1)]
    addr, cmd = client.sent[0]
    assert cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED and cmd.is_oneway
    assert SyncStateSet.from_json(cmd.body).sync_state_set == {2}
    assert n.sent == 2 and client.closed


async def _failure() -> RoleChangeNotifier:
    class Failing(GatedClient):
        async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
            raise OSError("refused")

    n = RoleChangeNotifier(Failing())  # type: ignore[arg-type]
    n.notify(["a:1"], header(3), SyncStateSet(frozenset({2}), 4))
    for _ in range(5):
        await asyncio.sleep(0)
    await n.close()
    return n


def test_failed_push_is_logged_not_raised() -> None:
    assert asyncio.run(_failure()).sent == 0
