"""bindAddress (issue 12 item 3): every listener of a standalone process (name server, broker main and VIP ports,
HA port) binds the given interface instead of all of them, and clients still work through it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psutil

from orbitmq.client import Producer
from orbitmq.model import Message
from orbitmq.testing.procs import Standalone


def _listening(pid: int) -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN}


def test_every_listener_binds_the_bind_address(standalone_factory: Callable[..., Standalone]) -> None:
    s = standalone_factory(brokerIP1="127.0.0.1", bindAddress="127.0.0.1")
    assert s.proc.pid is not None
    listening = _listening(s.proc.pid)
    ports = {s.namesrv_port, s.broker_port, s.broker_port - 2, s.broker_port + 1}  # name server, main, VIP, HA
    assert ports <= {port for _, port in listening}, listening
    assert {ip for ip, port in listening if port in ports} == {"127.0.0.1"}, listening

    async def send() -> str:
        p = Producer("PG_bind", s.namesrv_addr)
        await p.start()
        try:
            return (await p.send(Message("TopicBind", b"x"))).status.name
        finally:
            await p.shutdown()

    assert asyncio.run(send()) == "SEND_OK"
