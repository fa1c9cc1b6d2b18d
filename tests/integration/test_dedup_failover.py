"""Producer de-duplication across a RIP-44 failover, on real processes (orbitmq/testing/controller_cluster.py: 3
controllers, a name server, one broker group of 3, allAckInSyncStateSet): a send acknowledged by the master, which
is then killed with kill -9, is re-sent with the same UNIQ_KEY to the new master and answered with the original
result (msgId, queue, offset) without being stored again; a new key is still stored."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.client import Admin
from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.testing.controller_cluster import BrokerMember, ControllerCluster, wait_until
from orbitmq.testing.failover_load import read_topic_at
from orbitmq.testing.procs import blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC = "DedupFailoverTopic"
QUEUES = 4


def _send(addr: str, uniq: str, body: str, queue_id: int = 1) -> RemotingCommand | None:
    props = encode_properties({Prop.UNIQ_KEY: uniq, Prop.WAIT: "true"})
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG_dedup_failover", "topic": TOPIC, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": str(QUEUES), "queueId": str(queue_id), "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": props, "reconsumeTimes": "0",
        "unitMode": "false", "batch": "false"}, body=body.encode())
    try:
        return blocking_request(addr, req, 3.0)
    except OSError:
        return None


def _send_ok(addr: str, uniq: str, body: str) -> tuple[str, str, str]:
    """Send until SUCCESS (a new master refuses writes until its lease and offsets are in place)."""
    def attempt() -> tuple[str, str, str] | None:
        resp = _send(addr, uniq, body)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None
        ext = resp.ext_fields or {}
        return ext["msgId"], ext["queueId"], ext["queueOffset"]

    return wait_until(f"SEND_OK from {addr}", attempt, 30.0, 0.2)


def _bodies(addr: str) -> list[str]:
    got = asyncio.run(read_topic_at(addr, TOPIC, QUEUES))
    return sorted(m.body.decode() for msgs in got.values() for m in msgs)


def _hits(c: ControllerCluster, m: BrokerMember) -> int:
    return int(c.runtime_info(m).get("dedupHits", "0"))


def test_a_retry_after_kill9_of_the_master_is_answered_by_the_new_master_and_stored_once(tmp_path: Path) -> None:
    c = ControllerCluster(tmp_path / "c")
    try:
        c.start()
        master = c.wait_master()

        async def create() -> None:
            async with Admin(c.ns_addr) as admin:
                await admin.update_topic(TOPIC, broker_addr=master.addr, read_queue_nums=QUEUES,
                                         write_queue_nums=QUEUES)

        asyncio.run(create())
        wait_until("the topic on every member", lambda: all(c.has_topic(m, TOPIC) for m in c.members()), 30.0, 0.2)
        c.wait_group_ready(None, 3, 60.0)  # allAckInSyncStateSet: the ack below means every member has the record
        original = _send_ok(master.addr, "UNIQ-FAILOVER-1", "first-copy")
        c.kill9(master)
        new = c.wait_master(not_addr=master.addr, topic=TOPIC, timeout_s=60.0)
        hits_before = _hits(c, new)
        retry = _send_ok(new.addr, "UNIQ-FAILOVER-1", "first-copy")  # the client's retry of the unanswered send
        assert retry == original, f"the retry was answered {retry}, the original send {original}"
        assert _hits(c, new) == hits_before + 1
        fresh = _send_ok(new.addr, "UNIQ-FAILOVER-2", "second-message")  # a new key is stored
        assert fresh[0] != original[0]
        assert _bodies(new.addr) == ["first-copy", "second-message"]
    except BaseException:
        print(c.logs(40))
        raise
    finally:
        c.close()
