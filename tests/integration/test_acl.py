"""ACL end to end with our SDK: a standalone broker with aclEnable=true and a plain_acl.yml (issue 12 item 3).

Signed requests with the right secret and permission work (send, consume, admin); a wrong secret, a missing
signature or a topic without PUB get NO_PERMISSION and nothing is stored; a changed file applies while the broker
runs; a broken file is refused at start-up (exit 2, one line) and ignored (last good kept) at runtime.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orbitmq.client import ConsumeResult, Producer, PushConsumer, SimpleConsumer
from orbitmq.client.errors import NoPermissionError, NoRouteError
from orbitmq.client.instance import ClientInstance
from orbitmq.model import Message
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import sign_request
from orbitmq.remoting import RemotingClient
from orbitmq.testing.acl import ADMIN, APP, stored_count, write_plain_acl
from orbitmq.testing.procs import REPO_ROOT, Standalone, free_broker_port, free_port, write_standalone_conf

pytestmark = pytest.mark.integration


def _producer(s: Standalone, group: str, ak: str | None, sk: str | None) -> Producer:
    # retry_times=0: a refusal is final here (the SDK would retry another broker; there is none)
    return Producer(group, s.namesrv_addr, access_key=ak, secret_key=sk, retry_times=0, send_timeout_ms=5000)


async def _refused(p: Producer, topic: str) -> str:
    with pytest.raises(NoPermissionError) as ei:
        await p.send(Message(topic, b"must not be stored"))
    return str(ei.value)


async def _admin_request(s: Standalone, creds, code: int, ext: dict[str, str]) -> RemotingCommand:
    inst = await ClientInstance.acquire(s.namesrv_addr, f"acl-admin-{creds.access_key}", creds)
    try:
        return await inst.invoke(s.broker_addr, RemotingCommand.request(code, ext), 5000)
    finally:
        await inst.release()


@pytest.fixture
def acl_standalone(standalone_factory: Callable[..., Standalone], tmp_path: Path) -> tuple[Standalone, Path]:
    (tmp_path / "conf").mkdir()
    acl = write_plain_acl(tmp_path / "conf" / "plain_acl.yml")  # the default place: <rocketmqHome>/conf/
    return standalone_factory(brokerIP1="127.0.0.1", aclEnable="true", rocketmqHome=str(tmp_path)), acl


def test_sdk_with_credentials_sends_and_consumes_and_is_refused_otherwise(acl_standalone) -> None:
    s, _ = acl_standalone

    async def run() -> None:
        good = _producer(s, "PG_acl", APP.access_key, APP.secret_key)
        wrong = _producer(s, "PG_acl_wrong", APP.access_key, "not-the-secret")
        unsigned = _producer(s, "PG_acl_unsigned", None, None)
        for p in (good, wrong, unsigned):
            await p.start()
        try:
            for i in range(5):
                r = await good.send(Message("TopicAcl", f"acl-{i}".encode()))
                assert r.status.name == "SEND_OK"
            assert "Check signature failed for accessKey=appUser1" in await _refused(wrong, "TopicAcl")
            assert "No accessKey" in await _refused(unsigned, "TopicAcl")
            assert "No default permission for topic TopicOther" in await _refused(good, "TopicOther")
            assert "No permission for topic TopicSubOnly" in await _refused(good, "TopicSubOnly")
        finally:
            for p in (good, wrong, unsigned):
                await p.shutdown()
        assert await stored_count(s.namesrv_addr, s.broker_addr, "TopicAcl") == 5
        for topic in ("TopicOther", "TopicSubOnly"):
            assert await stored_count(s.namesrv_addr, s.broker_addr, topic) == 0

        got: list[bytes] = []
        done = asyncio.Event()

        def listener(msgs):
            got.extend(m.body for m in msgs)
            if len(got) >= 5:
                done.set()
            return ConsumeResult.SUCCESS

        c = PushConsumer("CG_acl", s.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         access_key=APP.access_key, secret_key=APP.secret_key)
        c.subscribe("TopicAcl", "*", listener)
        await c.start()
        try:
            await asyncio.wait_for(done.wait(), 40)
        finally:
            await c.shutdown()
        assert sorted(got) == [f"acl-{i}".encode() for i in range(5)]

        # POP (SimpleConsumer): SUB on topic and group
        async with SimpleConsumer("CG_acl_pop", s.namesrv_addr, "TopicAcl", access_key=APP.access_key,
                                  secret_key=APP.secret_key) as sc:
            popped: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(popped) < 5:
                assert time.monotonic() < deadline, f"popped only {popped}"
                for m in await sc.receive(16, poll_ms=1000):
                    popped.append(m.body)
                    await sc.ack(m)
            assert sorted(popped) == [f"acl-{i}".encode() for i in range(5)]

        # admin-only requests: refused for the application account, done for the admin account
        create = {"topic": "TopicByAdmin", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
                  "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
        resp = await _admin_request(s, APP, RequestCode.UPDATE_AND_CREATE_TOPIC, create)
        assert resp.code == ResponseCode.NO_PERMISSION and "Need admin permission" in (resp.remark or "")
        resp = await _admin_request(s, APP, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicAcl"})
        assert resp.code == ResponseCode.NO_PERMISSION
        resp = await _admin_request(s, ADMIN, RequestCode.UPDATE_AND_CREATE_TOPIC, create)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        async with SimpleConsumer("CG_acl_pop", s.namesrv_addr, "TopicByAdmin", access_key=APP.access_key,
                                  secret_key=APP.secret_key) as sc:  # no SUB on it: the pop is refused
            deadline = time.monotonic() + 20
            while True:
                try:
                    await sc.receive(1, poll_ms=0)
                except NoRouteError:  # the new topic's route reaches the name server with the next registration
                    assert time.monotonic() < deadline, "TopicByAdmin never got a route"
                    await asyncio.sleep(0.1)
                    continue
                except NoPermissionError:
                    break
                raise AssertionError("a pop without SUB permission was answered")

        # RocketMQ's ACL administration request (mqadmin updateAclConfig): a new account works at once
        resp = await _admin_request(s, ADMIN, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
            "accessKey": "lateUser1", "secretKey": "lateSecret1", "admin": "false", "defaultTopicPerm": "PUB"})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        late = _producer(s, "PG_late", "lateUser1", "lateSecret1")
        await late.start()
        try:
            assert (await late.send(Message("TopicLate", b"x"))).status.name == "SEND_OK"
        finally:
            await late.shutdown()

        # the VIP port (listenPort - 2) checks the same way
        raw = RemotingClient(name="acl-test")
        try:
            resp = await raw.invoke(s.vip_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
            assert resp.code == ResponseCode.NO_PERMISSION, resp
            signed = sign_request(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), APP)
            assert (await raw.invoke(s.vip_addr, signed, 5000)).code == ResponseCode.SUCCESS
        finally:
            await raw.close()

    asyncio.run(run())


def test_changed_acl_file_applies_a_broken_one_is_ignored_white_list(acl_standalone) -> None:
    s, acl = acl_standalone

    async def send_until(p: Producer, topic: str, allowed: bool, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await p.send(Message(topic, b"reload"))
                ok = True
            except NoPermissionError:
                ok = False
            if ok == allowed:
                return
            assert time.monotonic() < deadline, f"send to {topic} still {'refused' if allowed else 'accepted'}"
            await asyncio.sleep(0.1)

    async def run() -> None:
        p = _producer(s, "PG_reload", APP.access_key, APP.secret_key)
        await p.start()
        try:
            await _refused(p, "TopicLater")
            write_plain_acl(acl, "TopicLater=PUB")
            await send_until(p, "TopicLater", allowed=True)
            acl.write_text("accounts: [\n  - {accessKey: broken", encoding="utf-8")
            deadline = time.monotonic() + 20
            while "keeping the last good ACL configuration" not in s.log_path.read_text():
                assert time.monotonic() < deadline, "the broken ACL file was not noticed"
                await asyncio.sleep(0.1)
            await p.send(Message("TopicLater", b"still allowed"))  # the last good configuration stays
            write_plain_acl(acl)  # TopicLater removed again
            await send_until(p, "TopicLater", allowed=False)
            # a globally white-listed address needs no signature at all (RocketMQ semantics)
            unsigned = _producer(s, "PG_white", None, None)
            await unsigned.start()
            try:
                await _refused(unsigned, "TopicAcl")
                write_plain_acl(acl, global_white=("127.0.0.*",))
                await send_until(unsigned, "TopicWhite", allowed=True)
            finally:
                await unsigned.shutdown()
        finally:
            await p.shutdown()

    asyncio.run(run())


def test_start_up_with_a_bad_acl_file_fails_with_one_line(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123\n", encoding="utf-8")
    conf = write_standalone_conf(tmp_path / "s", free_port(), free_broker_port(), aclEnable="true",
                                 aclFilePath=str(acl))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    res = subprocess.run([sys.executable, "-m", "orbitmq.cli.main", "standalone", "-c", str(conf)],
                         capture_output=True, text=True, env=env, timeout=60, cwd=str(REPO_ROOT))
    assert res.returncode == 2, (res.returncode, res.stderr)
    errors = [line for line in res.stderr.splitlines() if line.startswith("orbitmq: error: ")]
    assert len(errors) == 1 and "longer than 6" in errors[0] and "Traceback" not in res.stderr, res.stderr


def test_cli_signs_with_the_environment_keys(acl_standalone) -> None:
    s, _ = acl_standalone

    def cli(*args: str, keys: tuple[str, str] | None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), NAMESRV_ADDR=s.namesrv_addr)
        env.pop("ORBITMQ_ACCESS_KEY", None)
        env.pop("ORBITMQ_SECRET_KEY", None)
        if keys is not None:
            env["ORBITMQ_ACCESS_KEY"], env["ORBITMQ_SECRET_KEY"] = keys
        return subprocess.run([sys.executable, "-m", "orbitmq.cli.main", *args], capture_output=True, text=True,
                              env=env, timeout=60, cwd=str(REPO_ROOT))

    args = ("updateTopic", "-t", "TopicCli", "-b", s.broker_addr, "-r", "2", "-w", "2")
    for keys in (None, (APP.access_key, APP.secret_key)):
        res = cli(*args, keys=keys)
        assert res.returncode != 0 and "NO_PERMISSION" in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = cli(*args, keys=(ADMIN.access_key, ADMIN.secret_key))
    assert res.returncode == 0, res.stderr
    res = cli(*args, keys=(ADMIN.access_key, ""))
    assert res.returncode != 0 and "ORBITMQ_SECRET_KEY" in res.stderr, res.stderr
