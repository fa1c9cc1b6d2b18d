"""A store holding records and config entries with hostile names (written as an unvalidating old version could
have) does not stop a real broker process: it starts, logs the skips, serves sends and pulls, refuses hostile
names on the wire with a remark, and nothing is created outside its store directory."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orbitmq.model import iter_records
from orbitmq.model.properties import encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.testing.procs import LOCALHOST, ServerProcess, blocking_request, broker_conf_keys

# from consumequeue/<topic>: "../../../escaped" would land next to the broker's directory
HOSTILE_TOPICS = ["../../../escaped", "../../escaped2", "T\x00nul", "%RETRY%../../../escaped3", "T\n"]


def _write_old_store(store_dir: Path) -> None:
    """CommitLog records of hostile topics around good ones, then no ConsumeQueue and no checkpoint: start-up
    must re-dispatch every record. Config files with hostile entries next to good ones."""
    keys = broker_conf_keys(store_dir, 0, "")
    store = MessageStore(StoreConfig(str(store_dir), mapped_file_size_commitlog=keys["mappedFileSizeCommitLog"],
                                     mapped_file_size_consume_queue=keys["mappedFileSizeConsumeQueue"]))
    store.load()

    async def put(topic: str, body: bytes) -> None:
        result = await store.put_message(MessageInner(topic, 0, body, {}))
        assert result.status is PutStatus.PUT_OK

    async def fill() -> None:
        await put("GoodOld", b"before")
        for topic in HOSTILE_TOPICS:
            await put(topic, b"hostile")
        await put("GoodOld", b"after")
        await store.shutdown()

    asyncio.run(fill())
    for name in os.listdir(store_dir / "consumequeue"):
        for q in os.listdir(store_dir / "consumequeue" / name):
            for f in os.listdir(store_dir / "consumequeue" / name / q):
                os.remove(store_dir / "consumequeue" / name / q / f)
    os.remove(store_dir / "checkpoint")
    config = store_dir / "config"
    config.mkdir(exist_ok=True)
    (config / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "GoodOld": {"topicName": "GoodOld", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
        "../../../escaped4": {"topicName": "../../../escaped4", "readQueueNums": 1, "writeQueueNums": 1},
        "T\n": {"topicName": "T\n"}}}))
    (config / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        "G": {"groupName": "G"}, "../g\u0000": {"groupName": "../g\u0000"}}}))
    (config / "consumerOffset.json").write_text(json.dumps({"offsetTable": {
        "GoodOld@G": {"0": 1}, "../../../escaped5@G": {"0": 1}}}))


def _send(addr: str, topic: str, body: bytes, group: str = "PG") -> RemotingCommand:
    ext = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": encode_properties({})}
    return blocking_request(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body), 10.0)


def _pull(addr: str, topic: str, offset: int, group: str = "G") -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
           "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*"}
    return blocking_request(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 10.0)


def _paths(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root)
                  for n in dirs + files)


def _wait_for(cond: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_broker_starts_over_hostile_records_and_config(tmp_path: Path, namesrv_proc: ServerProcess,
                                                       broker_factory: Callable[..., ServerProcess]) -> None:
    broker_dir = tmp_path / "nested" / "b0"
    store_dir = broker_dir / "store"
    _write_old_store(store_dir)
    namesrv_addr = f"{LOCALHOST}:{namesrv_proc.ports[0]}"
    proc = broker_factory(namesrv_addr, name="nested/b0")  # starts, listens and registers (or raises)
    addr = f"{LOCALHOST}:{proc.ports[0]}"
    log = proc.log_path.read_text(errors="replace")
    assert "skipped" in log and "escaped4" in log  # the config entry ...
    assert _wait_for(lambda: "escaped" in proc.log_path.read_text(errors="replace"))  # ... and the records

    # the good records were re-dispatched, new sends and pulls work
    old = _pull(addr, "GoodOld", 0)
    assert old.code == ResponseCode.SUCCESS, old.remark
    assert [m.body for m in iter_records(old.body)] == [b"before", b"after"]
    sent = _send(addr, "Fresh", b"new")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    fresh = _pull(addr, "Fresh", 0)
    assert fresh.code == ResponseCode.SUCCESS and [m.body for m in iter_records(fresh.body)] == [b"new"]

    # hostile names on the wire: refused with a remark, through handlers and the service guard alike
    for topic in ["../../../escaped6", "T\n", "TBW102"]:
        r = _send(addr, topic, b"x")
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark
    r = _pull(addr, "Fresh", 0, group="../../../escaped7")
    assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (r.remark or "")
    back = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                   {"group": "../../../escaped8", "offset": "0", "delayLevel": "0"})
    r = blocking_request(addr, back, 10.0)
    assert r.code == ResponseCode.SYSTEM_ERROR and "group" in (r.remark or "")
    pop = RemotingCommand.request(RequestCode.POP_MESSAGE, {
        "consumerGroup": "G\n", "topic": "Fresh", "queueId": "-1", "maxMsgNums": "1", "invisibleTime": "1000",
        "pollTime": "0", "bornTime": str(int(time.time() * 1000)), "initMode": "0"})
    r = blocking_request(addr, pop, 10.0)
    assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (r.remark or "")

    # nothing outside the store; no hostile name inside it either
    outside = [p for p in _paths(tmp_path) if "escaped" in p]
    assert outside == [], outside
    cq = sorted(os.listdir(store_dir / "consumequeue"))
    assert "GoodOld" in cq and "Fresh" in cq and all(".." not in n and "\x00" not in n for n in cq)
    assert proc.running
