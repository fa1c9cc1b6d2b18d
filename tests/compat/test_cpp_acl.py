"""The official C++ client (rocketmq==0.4.4) on an ACL-enabled broker, unchanged: set_session_credentials signs
its requests (HMAC-SHA1 over the sorted fields incl. OnsChannel, then the body) and our broker verifies them.

With the right secret it sends and consumes; with a wrong secret, or a topic it has no PUB permission for, every
send fails with NO_PERMISSION and the store holds nothing of them (issue 12 acceptance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orbitmq.testing.acl import APP, stored_count_sync, write_plain_acl
from orbitmq.testing.procs import Standalone

from .conftest import CPP_CLIENT_HINT, cpp_client_import_error

DRIVER = Path(__file__).with_name("cpp_acl_driver.py")

pytestmark = pytest.mark.compat


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[Standalone]:
    err = cpp_client_import_error()
    if err is not None:  # a failure, never a skip
        pytest.fail(f"C++ compatibility suite cannot run: {err}; {CPP_CLIENT_HINT}", pytrace=False)
    acl = write_plain_acl(tmp_path / "plain_acl.yml")
    s = Standalone(tmp_path / "standalone", brokerIP1="127.0.0.1", aclEnable="true", aclFilePath=str(acl))
    s.start(wait_registered=True)
    try:
        yield s
    finally:
        s.close()


def run_driver(tmp_path: Path, action: str, timeout_s: float = 120, **args: Any) -> list[dict[str, Any]]:
    env = dict(os.environ, HOME=str(tmp_path))  # librocketmq writes its logs under $HOME
    res = subprocess.run([sys.executable, str(DRIVER), action, json.dumps(args)], capture_output=True, text=True,
                         env=env, timeout=timeout_s)
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert any("done" in x for x in lines), f"{action} driver ended without a result (rc {res.returncode}):\n" \
                                             f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return lines


def test_cpp_client_with_credentials_sends_and_consumes(acl_server: Standalone, tmp_path: Path) -> None:
    s = acl_server
    creds = {"access_key": APP.access_key, "secret_key": APP.secret_key}
    out = run_driver(tmp_path, "produce", group="PG_cpp_acl", namesrv=s.namesrv_addr, topic="TopicAcl", count=10,
                     run="ok", **creds)
    errors = [x["send_error"] for x in out if "send_error" in x]
    assert not errors, errors
    assert len([x for x in out if "sent" in x]) == 10
    assert stored_count_sync(s.namesrv_addr, s.broker_addr, "TopicAcl") == 10

    out = run_driver(tmp_path, "consume", group="CG_cpp_acl", namesrv=s.namesrv_addr, topic="TopicAcl", expect=10,
                     timeout_s=60, **creds)
    got = {x["received"]["key"]: x["received"]["body"] for x in out if "received" in x}
    assert got == {f"ok-key-{i}": f"ok-body-{i}" for i in range(10)}


@pytest.mark.parametrize("case", ["wrong_secret", "no_pub_permission"])
def test_cpp_client_is_refused_and_nothing_is_stored(acl_server: Standalone, tmp_path: Path, case: str) -> None:
    s = acl_server
    if case == "wrong_secret":
        topic, secret, reason = "TopicAcl", "wrongSecret", "Check signature failed"
    else:
        topic, secret, reason = "TopicSubOnly", APP.secret_key, "No permission for topic TopicSubOnly"
    out = run_driver(tmp_path, "produce", group="PG_cpp_acl_bad", namesrv=s.namesrv_addr, topic=topic, count=2,
                     run="bad", access_key=APP.access_key, secret_key=secret, timeout_ms=3000)
    assert not [x for x in out if "sent" in x], out
    errors = [x["send_error"]["error"] for x in out if "send_error" in x]
    assert len(errors) == 2, out
    # the C++ client ends a failed send with "No route info" after its retries; the broker's answer (code and
    # remark) is in its log
    cpp_log = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*rocketmq-cpp.log*"))
    assert f"remark:{reason}" in cpp_log and "error code:16" in cpp_log, cpp_log[-2000:]
    assert stored_count_sync(s.namesrv_addr, s.broker_addr, topic) == 0
