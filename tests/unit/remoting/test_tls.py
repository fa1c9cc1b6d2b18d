"""TLS on remoting links (asyncio and uvloop): enforcing serves TLS only, permissive serves plain and TLS on one
port, client certificates when the server requires them, server verification by the client, clear errors."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError, RemotingConnectError
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.remoting import Connection, RemotingClient, RemotingServer
from orbitmq.remoting.tls import TlsClientConfig, TlsServerConfig, client_context, server_context
from orbitmq.testing.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(remark="ok", body=cmd.body)


def srv_cfg(pki: Pki, mode: str, auth: str = "none") -> TlsServerConfig:
    return TlsServerConfig(mode, str(pki.server_cert), str(pki.server_key), str(pki.ca_cert), auth)


async def ask(client: RemotingClient, port: int, body: bytes = b"hello") -> bytes:
    resp = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {}, body),
                               5000)
    return resp.body


def test_enforcing_serves_tls_and_refuses_plain(run, pki):
    async def main():
        server = RemotingServer(echo, "127.0.0.1", 0, ssl_context=server_context(srv_cfg(pki, "enforcing")))
        await server.start()
        tls = RemotingClient(ssl_context=client_context(TlsClientConfig(True, trust_cert_path=str(pki.ca_cert),
                                                                        auth_server=True)))
        plain = RemotingClient(connect_timeout_ms=2000)
        try:
            assert await ask(tls, server.port) == b"hello"
            with pytest.raises(RemotingConnectError):  # a plain frame is no ClientHello: closed, no answer
                await ask(plain, server.port)
        finally:
            await tls.close()
            await plain.close()
            await server.stop()

    run(main())


def test_permissive_serves_plain_and_tls_on_one_port(run, pki):
    async def main():
        server = RemotingServer(echo, "127.0.0.1", 0, ssl_context=server_context(srv_cfg(pki, "permissive")),
                                tls_mode="permissive")
        await server.start()
        tls = RemotingClient(ssl_context=client_context())
        plain = RemotingClient()
        try:
            for _ in range(3):
                assert await ask(tls, server.port, b"t") == b"t"
                assert await ask(plain, server.port, b"p") == b"p"
            assert server.tls_accepted == 1 and server.plain_accepted == 1
            assert len(server.connections) == 2
            # a peer that connects and says nothing is dropped at the handshake timeout, not kept; one that
            # closes at once costs nothing
            s = socket.create_connection(("127.0.0.1", server.port))
            s.close()
        finally:
            await tls.close()
            await plain.close()
            await server.stop()
        assert not server.connections

    run(main())


def test_required_client_certificate(run, pki):
    async def main():
        server = RemotingServer(echo, "127.0.0.1", 0,
                                ssl_context=server_context(srv_cfg(pki, "enforcing", "require")))
        await server.start()
        with_cert = RemotingClient(ssl_context=client_context(TlsClientConfig(
            True, str(pki.client_cert), str(pki.client_key), str(pki.ca_cert), True)))
        without = RemotingClient(ssl_context=client_context(), connect_timeout_ms=3000)
        try:
            assert await ask(with_cert, server.port) == b"hello"
            with pytest.raises(RemotingConnectError):  # TLS 1.3: refused right after the handshake
                await ask(without, server.port)
        finally:
            await with_cert.close()
            await without.close()
            await server.stop()

    run(main())


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other"), "other")


def test_client_verifying_the_server_refuses_a_foreign_ca(run, pki, other):

    async def main():
        server = RemotingServer(echo, "127.0.0.1", 0, ssl_context=server_context(srv_cfg(pki, "enforcing")))
        await server.start()
        strict = RemotingClient(ssl_context=client_context(TlsClientConfig(True, trust_cert_path=str(other.ca_cert),
                                                                           auth_server=True)))
        try:
            with pytest.raises(RemotingConnectError, match="TLS handshake"):
                await ask(strict, server.port)
        finally:
            await strict.close()
            await server.stop()

    run(main())


def test_config_errors_are_one_line(pki, tmp_path: Path):
    with pytest.raises(ConfigError, match="tls.server.mode"):
        server_context(TlsServerConfig("sometimes"))
    with pytest.raises(ConfigError, match="needs tls.server.certPath"):
        server_context(TlsServerConfig("enforcing"))
    with pytest.raises(ConfigError, match="cannot load certificate"):
        server_context(TlsServerConfig("enforcing", str(tmp_path / "nope.pem"), str(pki.server_key)))
    with pytest.raises(ConfigError, match="trustCertPath"):
        server_context(TlsServerConfig("enforcing", str(pki.server_cert), str(pki.server_key), "", "require"))
    with pytest.raises(ConfigError, match="authServer"):
        client_context(TlsClientConfig(True, auth_server=True))
    assert server_context(TlsServerConfig()) is None


def test_permissive_counts_silent_sockets_against_the_connection_cap(run, pki):
    from orbitmq.remoting.limits import LIMIT_MAX_CONNECTIONS, ServerLimits

    async def main():
        hits: list[str] = []
        server = RemotingServer(echo, "127.0.0.1", 0, ssl_context=server_context(srv_cfg(pki, "permissive")),
                                tls_mode="permissive", limits=ServerLimits(max_connections=1),
                                on_limit=hits.append)
        await server.start()
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", server.port)  # says nothing: being sniffed
            deadline = asyncio.get_running_loop().time() + 10
            while not server._sniffing:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)
            assert await asyncio.wait_for(r2.read(1), 10) == b""
            assert hits == [LIMIT_MAX_CONNECTIONS]
            w1.close()
            w2.close()
        finally:
            await server.stop()

    run(main())
