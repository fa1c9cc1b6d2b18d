"""The cluster secret: name-server guard of broker registrations, broker-to-broker trust under ACL, HA proof."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from orbitmq.acl.cluster import ClusterSecretGuard, cluster_guarded, cluster_signer
from orbitmq.acl.config import parse_plain_acl
from orbitmq.acl.validator import AclDenied, PlainAclValidator
from orbitmq.client.instance import ClientInstance
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import SessionCredentials, cluster_credentials, sign_request, signed_with
from orbitmq.replication import ha_auth

CONN = SimpleNamespace(remote_addr="127.0.0.1:5555")


def _handler(conn: object, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, "handled")


def test_name_server_guard_needs_the_cluster_signature_for_registrations() -> None:
    guard = cluster_guarded(_handler, "s3cret-cluster")
    assert isinstance(guard, ClusterSecretGuard) and cluster_guarded(_handler, "") is _handler
    sign = cluster_signer("s3cret-cluster")
    assert sign is not None and cluster_signer("") is None
    for code in (RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION):
        unsigned = RemotingCommand.request(code, {"brokerName": "fake"}, b"{}")
        resp = guard(CONN, unsigned)
        assert resp.code == ResponseCode.NO_PERMISSION and "clusterSecret" in (resp.remark or "")
        wrong = sign_request(RemotingCommand.request(code, {"brokerName": "fake"}, b"{}"),
                             cluster_credentials("other-secret"))
        assert guard(CONN, wrong).code == ResponseCode.NO_PERMISSION
        ok = RemotingCommand.request(code, {"brokerName": "real"}, b"{}")
        sign(ok)
        assert guard(CONN, ok).remark == "handled"
    assert guard(CONN, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {}, oneway=True)) is None  # dropped
    # anything else (clients asking for routes) passes unsigned
    assert guard(CONN, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).remark == "handled"
    wipe = RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert guard(CONN, wipe).code == ResponseCode.NO_PERMISSION  # admin writes too
    assert guard.refused == 8


def test_client_instance_signs_name_server_requests_with_the_namesrv_credentials() -> None:
    app, cluster = SessionCredentials("appUser1", "appSecret1"), cluster_credentials("s3cret-cluster")
    inst = ClientInstance("127.0.0.1:9876;127.0.0.1:9877", "t", credentials=app, namesrv_credentials=cluster)
    to_ns = inst.sign(RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b"}),
                      "127.0.0.1:9877")
    assert signed_with(to_ns, cluster)
    assert signed_with(inst.sign(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})),
                       cluster)  # invoke_namesrv: no address
    to_broker = inst.sign(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"}), "127.0.0.1:10911")
    assert signed_with(to_broker, app) and not signed_with(to_broker, cluster)
    plain = ClientInstance("127.0.0.1:9876", "t2")
    assert plain.sign(RemotingCommand.request(RequestCode.HEART_BEAT), "127.0.0.1:10911").ext_fields is None


def test_acl_broker_trusts_requests_signed_with_the_cluster_secret() -> None:
    v = PlainAclValidator(parse_plain_acl("accounts: []"), cluster_credentials("s3cret-cluster"))
    cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "T", "consumerGroup": "G"})
    sign_request(cmd, cluster_credentials("s3cret-cluster"))
    assert v.validate("10.0.0.2:1234", cmd) is None
    forged = sign_request(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}),
                          cluster_credentials("guessed-secret"))
    with pytest.raises(AclDenied, match="cluster secret"):
        v.validate("10.0.0.2:1234", forged)
    with pytest.raises(AclDenied, match="No acl config"):  # without a configured secret: an unknown account
        PlainAclValidator(parse_plain_acl("accounts: []")).validate("10.0.0.2:1234", cmd)


async def _ha_pair(master_secret: str, slave_secret: str | None) -> tuple[bool, BaseException | None]:
    """Run challenge/prove over a real socket; (master accepted, slave's exception)."""
    accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(await ha_auth.authenticated(reader, writer, master_secret, "peer"))
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    slave_error: BaseException | None = None
    try:
        if slave_secret is None:
            writer.write(b"\0" * 8)  # a plain HA slave: its first offset report
            await writer.drain()
        else:
            await ha_auth.prove(reader, writer, slave_secret)
    except Exception as e:  # noqa: BLE001 - returned for the assertions
        slave_error = e
    ok = await asyncio.wait_for(accepted, 5)
    writer.close()
    server.close()
    return ok, slave_error


def test_ha_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ha_auth, "AUTH_TIMEOUT_S", 0.3)
    assert asyncio.run(_ha_pair("s3cret-cluster", "s3cret-cluster")) == (True, None)
    ok, err = asyncio.run(_ha_pair("s3cret-cluster", "other"))
    assert not ok and err is None  # the master refuses (and closes) after the wrong answer
    ok, err = asyncio.run(_ha_pair("s3cret-cluster", None))
    assert not ok  # an unauthenticated slave's report is not an answer
    assert ha_auth.proof("a", b"n" * 16) != ha_auth.proof("b", b"n" * 16) != ha_auth.proof("a", b"m" * 16)
