"""TLS against a real standalone process (issue 12 item 3): permissive serves TLS and plain SDK clients on the
same ports; enforcing (with tlsEnable: the broker's own registration over TLS) serves TLS only, and a plain
client gets a connection error, not an answer."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

import pytest

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Producer, PullConsumer, PullStatus, SendStatus
from orbitmq.client.errors import NoRouteError
from orbitmq.model import Message
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.remoting.tls import TlsClientConfig, client_context
from orbitmq.testing.certs import Pki, make_pki
from orbitmq.testing.procs import LOCALHOST, BrokerCluster, Standalone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _tls_keys(pki: Pki, mode: str) -> dict[str, str]:
    return {"tls.server.mode": mode, "tls.server.certPath": str(pki.server_cert),
            "tls.server.keyPath": str(pki.server_key)}


async def _roundtrip(sa: Standalone, topic: str, n: int, tls) -> None:
    async with Producer("tls_p", namesrv=sa.namesrv_addr, tls=tls) as p:
        deadline = time.monotonic() + 30
        while True:  # the broker's registration (over TLS in enforcing mode) may still be on its way
            try:
                r = await p.send(Message(topic, b"m0", {}))
                break
            except NoRouteError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        assert r.status == SendStatus.SEND_OK
        for i in range(1, n):
            r = await p.send(Message(topic, f"m{i}".encode(), {}))
            assert r.status == SendStatus.SEND_OK
    deadline = time.monotonic() + 30
    async with PullConsumer("tls_c", namesrv=sa.namesrv_addr, tls=tls) as c:
        while True:
            got = 0
            try:
                for mq in await c.fetch_queues(topic):
                    r = await c.pull(mq, 0, 32)
                    got += len(r.msgs) if r.status == PullStatus.FOUND else 0
            except NoRouteError:
                pass
            if got >= n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    assert got == n


def test_permissive_serves_tls_and_plain_clients(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    sa = Standalone(tmp_path / "sa", **_tls_keys(pki, "permissive")).start()
    try:
        verify = client_context(TlsClientConfig(True, trust_cert_path=str(pki.ca_cert), auth_server=True))
        asyncio.run(_roundtrip(sa, "TlsT", 3, verify))
        asyncio.run(_roundtrip(sa, "PlainT", 3, None))
    finally:
        sa.close()


def test_enforcing_refuses_plain_clients(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    # the harness's registration check speaks plain: the first TLS send waits for the route instead
    sa = Standalone(tmp_path / "sa", tlsEnable="true", **_tls_keys(pki, "enforcing")).start(wait_registered=False)
    try:
        asyncio.run(_roundtrip(sa, "TlsOnly", 3, True))

        async def plain_send() -> None:
            async with Producer("plain_p", namesrv=sa.namesrv_addr, send_timeout_ms=2000) as p:
                await p.send(Message("TlsOnly", b"x", {}))

        with pytest.raises(OrbitMQError):
            asyncio.run(plain_send())
        with socket.create_connection((LOCALHOST, sa.broker_port), timeout=5) as s:  # a plain frame: closed
            s.settimeout(15)
            s.sendall(struct.pack(">ii", 8, 4) + b"{}{}")
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        sa.close()


def test_master_slave_over_tls_replicates(tmp_path: Path) -> None:
    """Brokers enforcing TLS with tlsEnable: registration, slave metadata sync and the HA stream all over TLS (the
    name server permissive, so the harness's plain registration check still works)."""
    pki = make_pki(tmp_path / "pki")
    tls_keys = {**_tls_keys(pki, "enforcing"), "tlsEnable": "true"}
    with BrokerCluster(tmp_path / "c", broker_defaults=tls_keys, **_tls_keys(pki, "permissive")) as cluster:
        _, m = cluster.broker("broker-a", 0, "ASYNC_MASTER")
        _, s = cluster.broker("broker-a", 1, "SLAVE")
        ctx = client_context()

        async def runtime(addr: str) -> dict[str, str]:
            client = RemotingClient(name="tls-test", ssl_context=ctx)
            try:
                resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}),
                                           3000)
            finally:
                await client.close()
            return KVTable.from_json(resp.body).table

        async def main() -> None:
            async with Producer("tls_ha", namesrv=cluster.ns_addr, tls=True) as p:
                for i in range(5):
                    r = await p.send(Message("TlsHa", f"m{i}".encode(), {}))
                    assert r.status == SendStatus.SEND_OK
            deadline = time.monotonic() + 30
            while True:
                mr, sr = await runtime(m), await runtime(s)
                if int(mr["commitLogMaxOffset"]) > 0 and mr["commitLogMaxOffset"] == sr["commitLogMaxOffset"]:
                    break
                assert time.monotonic() < deadline, f"slave not caught up over TLS: {mr} / {sr}"
                await asyncio.sleep(0.1)

        asyncio.run(main())
        with socket.create_connection((LOCALHOST, cluster.procs[1].ports[0] + 1), timeout=5) as raw:
            raw.settimeout(15)  # the master's HA port: a plain byte stream is no handshake, closed
            raw.sendall(b"\0" * 64)
            try:
                assert raw.recv(100) == b""
            except ConnectionResetError:
                pass
