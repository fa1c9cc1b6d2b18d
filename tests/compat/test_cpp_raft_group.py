"""The official RocketMQ C++ client (PyPI rocketmq==0.4.4) against a 3-node Raft broker group (issue 14), unchanged:
it sends through the leader (brokerId 0 in the route) and pulls everything back; with slaveReadEnable and
accessMessageInMemoryMaxRatio=0 the leader sends the pulls to a follower, which serves them (slave read)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orbitmq.testing.raft_group import RaftGroup

from .conftest import cpp_client_import_error

pytestmark = [pytest.mark.compat, pytest.mark.timeout(240)]


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RaftGroup]:
    err = cpp_client_import_error()
    if err is not None:  # a failure, never a skip
        pytest.fail(f"C++ compatibility suite cannot run: {err}", pytrace=False)
    g = RaftGroup(tmp_path / "group", slaveReadEnable=True, accessMessageInMemoryMaxRatio=0)
    try:
        g.start()
        yield g
    finally:
        g.close()


def test_cpp_client_sends_and_pulls_with_slave_read(group: RaftGroup, cpp) -> None:  # type: ignore[no-untyped-def]
    g = group
    leader = g.leader()
    topic = "Compat_raft"
    prod = cpp("produce", group="PG_raft", namesrv=g.ns_addr, topic=topic, count=60, mode="sync", run="r")
    prod.finish()
    sent = prod.sent()
    assert len(sent) == 60 and all(s.get("status", 0) == 0 for s in sent), sent[:3]
    # batches of 8 (a queue holds ~15): the leader serves a queue's first batch and suggests a follower (the
    # messages left behind it exceed 0 % of memory), so the rest of that queue comes from the follower. With the
    # default 32 the leader's first pull emptied every queue and no follower ever had anything to serve.
    cons = cpp("pull", group="CG_raft", namesrv=g.ns_addr, topic=topic, expect=60, timeout_s=60, batch=8)
    cons.finish()
    got = {r["key"] if "key" in r else r["keys"]: r for r in cons.received()}
    assert set(got) == {s["key"] for s in sent}
    assert all(got[s["key"]]["body"] == s["body"] for s in sent)
    served = {i: int(g.runtime(i).get("msgGetTotalTodayNow", "0")) for i in range(g.size)}
    followers = [i for i in range(g.size) if i != leader]
    print(f"leader n{leader}; messages served per member {served}")
    assert sum(served[i] for i in followers) > 0, f"no follower served a pull (slave read): {served}"
