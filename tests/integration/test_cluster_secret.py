"""clusterSecret (issue 12 item 3): a name server that only accepts broker registrations (and admin writes) signed
with the cluster secret, a master/slave group whose HA port serves only slaves that prove it, and brokers that trust
each other's signed requests on an ACL-enabled master (the slave's metadata sync) — while anyone else is refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbitmq.client import Producer
from orbitmq.client.instance import ClientInstance
from orbitmq.model import Message
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import cluster_credentials, sign_request
from orbitmq.protocol.bodies import KVTable
from orbitmq.remoting import RemotingClient
from orbitmq.testing.acl import ADMIN, APP, write_plain_acl
from orbitmq.testing.procs import LOCALHOST, REPO_ROOT, BrokerCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SECRET = "cluster-s3cret-for-tests"


async def _runtime(ns: str, addr: str) -> dict[str, str]:
    return KVTable.from_json(await _admin_body(ns, addr, RequestCode.GET_BROKER_RUNTIME_INFO) or b"{}").table


async def _admin_body(ns: str, addr: str, code: int) -> bytes:
    inst = await ClientInstance.acquire(ns, "secret-test-admin", ADMIN)
    try:
        resp = await inst.invoke(addr, RemotingCommand.request(code), 3000)
    finally:
        await inst.release()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return resp.body or b""


async def _fake_registration(ns: str, signed_with: str | None) -> RemotingCommand:
    ext = {"brokerName": "evil", "brokerAddr": "10.6.6.6:10911", "clusterName": "DefaultCluster",
           "haServerAddr": "10.6.6.6:10912", "brokerId": "0", "compressed": "false"}
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, b'{"topicConfigSerializeWrapper":{}}')
    if signed_with is not None:
        sign_request(cmd, cluster_credentials(signed_with))
    client = RemotingClient(name="attacker")
    try:
        return await client.invoke(ns, cmd, 3000)
    finally:
        await client.close()


async def _ha_intruder(ha_addr: str) -> bytes:
    """Connect to the HA port as a slave without the secret; everything the master sends until it closes."""
    host, _, port = ha_addr.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write((0).to_bytes(8, "big"))  # a plain slave's first report: "send me everything from offset 0"
    await writer.drain()
    got = b""
    async with asyncio.timeout(20):
        while chunk := await reader.read(65536):
            got += chunk
    writer.close()
    return got


def test_cluster_secret_guards_registration_ha_and_broker_trust(tmp_path: Path) -> None:
    acl = write_plain_acl(tmp_path / "plain_acl.yml")
    defaults = {"brokerIP1": LOCALHOST, "clusterSecret": SECRET, "aclEnable": "true", "aclFilePath": str(acl),
                "slaveSyncInterval": 500, "registerNameServerPeriod": 2000}
    with BrokerCluster(tmp_path / "c", broker_defaults=defaults, clusterSecret=SECRET) as cluster:
        _, master = cluster.broker("broker-a", 0, "ASYNC_MASTER")  # returns once registered: signed registration
        _, slave = cluster.broker("broker-a", 1, "SLAVE")
        ns = cluster.ns_addr

        async def run() -> None:
            p = Producer("PG_secret", ns, access_key=APP.access_key, secret_key=APP.secret_key)
            await p.start()
            try:
                for i in range(10):
                    assert (await p.send(Message("TopicAcl", f"m{i}".encode()))).status.name == "SEND_OK"
            finally:
                await p.shutdown()
            deadline = time.monotonic() + 30
            while True:  # the slave (signed HA proof) copies the CommitLog; its metadata sync (signed) works too
                m, s = await _runtime(ns, master), await _runtime(ns, slave)
                if int(m["commitLogMaxOffset"]) > 0 and m["commitLogMaxOffset"] == s["commitLogMaxOffset"]:
                    break
                assert time.monotonic() < deadline, f"slave did not catch up: {m['commitLogMaxOffset']} vs " \
                                                    f"{s['commitLogMaxOffset']}"
                await asyncio.sleep(0.1)

            deadline = time.monotonic() + 30
            while b"TopicAcl" not in await _admin_body(ns, slave, RequestCode.GET_ALL_TOPIC_CONFIG):
                # the slave learns topics only from the ACL-enabled master's GET_ALL_TOPIC_CONFIG: signed requests
                assert time.monotonic() < deadline, "the slave's metadata sync from the ACL master failed"
                await asyncio.sleep(0.1)

            for signed in (None, "a-guessed-secret"):
                resp = await _fake_registration(ns, signed)
                assert resp.code == ResponseCode.NO_PERMISSION and "clusterSecret" in (resp.remark or ""), resp

            got = await _ha_intruder(f"{LOCALHOST}:{int(master.rpartition(':')[2]) + 1}")
            assert got[:4] == b"OMQA" and len(got) == 20, got[:64]  # the challenge, then the door closes

        asyncio.run(run())

        # name-server admin writes: refused without the secret, done with it (the CLI signs with the env's)
        def cli(*args: str, secret: str | None) -> subprocess.CompletedProcess[str]:
            env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), NAMESRV_ADDR=ns)
            env.pop("ORBITMQ_CLUSTER_SECRET", None)
            if secret is not None:
                env["ORBITMQ_CLUSTER_SECRET"] = secret
            return subprocess.run([sys.executable, "-m", "orbitmq.cli.main", *args], capture_output=True,
                                  text=True, env=env, timeout=60, cwd=str(REPO_ROOT))

        res = cli("wipeWritePerm", "-b", "broker-a", secret=None)
        assert res.returncode != 0 and "NO_PERMISSION" in res.stderr, res.stderr
        res = cli("addWritePerm", "-b", "broker-a", secret=SECRET)
        assert res.returncode == 0, res.stderr
        log = (tmp_path / "c" / "broker-a-0" / "broker.log").read_text()
        assert "HA connection from" in log and "refused" in log


def test_controllers_with_a_cluster_secret(tmp_path: Path) -> None:
    """RIP-44 controller mode with a secret everywhere: the controllers' Raft (signed peer messages), the brokers'
    registration, heartbeats and election (signed), the AutoSwitch HA proof and the name server all work; an
    unsigned election request or Raft message from anyone else is refused."""
    from orbitmq.testing.controller_cluster import ControllerCluster

    keys = {"clusterSecret": SECRET}
    with ControllerCluster(tmp_path / "cc", controllers=3, group_size=2, broker_keys=keys, controller_keys=keys,
                           namesrv_keys=keys) as cluster:
        cluster.start()
        leader = cluster.controller_leader()

        async def forge() -> RemotingCommand:
            client = RemotingClient(name="attacker")
            try:
                await client.invoke_oneway(leader.addr, RemotingCommand.request(
                    RequestCode.ORBIT_RAFT_MESSAGE, {"group": "x", "from": "n9"}, b"\0" * 16, oneway=True))
                return await client.invoke(leader.addr, RemotingCommand.request(
                    RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": "c", "brokerName": "broker-a",
                                                          "brokerId": "2", "designateElect": "true"}), 3000)
            finally:
                await client.close()

        resp = asyncio.run(forge())
        assert resp.code == ResponseCode.NO_PERMISSION and "clusterSecret" in (resp.remark or ""), resp
        log_path = tmp_path / "cc" / f"controller-{leader.node}" / "controller.log"
        deadline = time.monotonic() + 10
        while f"refused request code {int(RequestCode.ORBIT_RAFT_MESSAGE)}" not in log_path.read_text():
            assert time.monotonic() < deadline, "the forged Raft message was not refused"
            time.sleep(0.05)
