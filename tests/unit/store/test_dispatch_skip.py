"""Records whose topic/queue cannot name a ConsumeQueue are logged and skipped, on the write path and in recovery:
the store starts, serves the other topics, and never creates or removes a path outside its directory."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from typing import Any

import pytest

from orbitmq.store import MessageInner, MessageStore, PutStatus, StoreConfig
from orbitmq.store.dispatch import SkipLog, queue_name_error

HOSTILE = ["../evil", "../../etc/evil", "a/b", "T\x00x", "T\n", ".."]


def _config(root: str) -> StoreConfig:
    return StoreConfig(root, mapped_file_size_commitlog=1024 * 1024, max_message_size=64 * 1024,
                       mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=100, max_index_num=400)


def _put(store: MessageStore, topic: str, queue_id: int = 0) -> None:
    result = asyncio.run(store.put_message(MessageInner(topic, queue_id, b"body", {})))
    assert result.status is PutStatus.PUT_OK


def _tree(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def _all_inside_store(outer: Any) -> bool:
    """Everything under `outer` is the store (outer/inner/store/...) or the directory holding it."""
    store = os.path.join("inner", "store")
    return all(p == "inner" or p == store or p.startswith(store + os.sep) for p in _tree(str(outer)))


def test_queue_name_rule() -> None:
    assert queue_name_error("T", 0) is None and queue_name_error("%RETRY%G", 3) is None
    for topic in [*HOSTILE, "/abs", "a.b", "t" * 256]:
        assert queue_name_error(topic, 0) is not None
    assert queue_name_error("T", -1) is not None


def test_write_path_and_recovery_skip_illegal_records(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    outer = tmp_path / "outer"
    root = outer / "inner" / "store"
    store = MessageStore(_config(str(root)))
    store.load()
    with caplog.at_level(logging.WARNING):
        _put(store, "Good")
        for topic in HOSTILE:  # as an old version without validation could have written them
            _put(store, topic)
        _put(store, "Good", 1)
        _put(store, "Good", -1)  # a negative queue id: no `-1` directory
    assert store.get_max_offset_in_queue("Good", 0) == 1 and store.get_max_offset_in_queue("Good", 1) == 1
    assert "skipped" in caplog.text
    asyncio.run(store.shutdown())
    assert _all_inside_store(outer)

    shutil.rmtree(root / "consumequeue")  # force recovery to re-dispatch every record
    os.remove(root / "checkpoint")
    caplog.clear()
    store = MessageStore(_config(str(root)))
    with caplog.at_level(logging.WARNING):
        store.load()  # must not raise
    try:
        assert store.get_max_offset_in_queue("Good", 0) == 1 and store.get_max_offset_in_queue("Good", 1) == 1
        assert "skipped" in caplog.text
        assert sorted(os.listdir(root / "consumequeue")) == ["Good"]
        assert sorted(os.listdir(root / "consumequeue" / "Good")) == ["0", "1"]
        assert _all_inside_store(outer)
        _put(store, "Good")  # and it serves
        assert store.get_max_offset_in_queue("Good", 0) == 2
    finally:
        asyncio.run(store.shutdown())


def test_load_ignores_directories_with_illegal_names(tmp_path: Any) -> None:
    root = tmp_path / "store"
    store = MessageStore(_config(str(root)))
    store.load()
    _put(store, "Good")
    asyncio.run(store.shutdown())
    (root / "consumequeue" / "a.b" / "0").mkdir(parents=True)
    (root / "consumequeue" / "Good" / "-1").mkdir()
    store = MessageStore(_config(str(root)))
    store.load()
    try:
        assert set(store.cq_table.topics()) == {"Good"}
        store.delete_topics({"..", "a.b"})  # illegal names: nothing is removed
        assert (root / "consumequeue" / "a.b").is_dir() and (root / "consumequeue" / "Good").is_dir()
    finally:
        asyncio.run(store.shutdown())


def test_skip_log_names_each_name_once_and_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    skips = SkipLog("test")
    with caplog.at_level(logging.WARNING, logger="orbitmq.store.dispatch"):
        for _ in range(3):
            skips.skip("same", "bad", 1)
        for i in range(5000):
            skips.skip(f"n{i}", "bad", i)
    assert skips.skipped == 5003
    lines = caplog.records
    assert sum("same" in r.getMessage() or "(bad)" in r.getMessage() for r in lines[:1]) == 1
    assert len(lines) <= SkipLog.MAX_NAMES + 13  # one line per name up to the cap, then powers of two
