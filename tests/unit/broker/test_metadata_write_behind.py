"""Issue 12.2: topic and group tables are written off the event loop, coalesced, and never overwritten by an
older snapshot; without a running loop a change is written at once."""

from __future__ import annotations

import asyncio
import json
import threading

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.metadata import SubscriptionGroupManager, TopicConfigManager
from orbitmq.broker.metadata import versioned as versioned_mod
from orbitmq.model.topic import TopicConfig


def _cfg() -> BrokerConfig:
    return BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")


def test_ten_thousand_groups_are_written_off_loop_in_a_few_coalesced_writes(tmp_path, monkeypatch) -> None:
    groups = SubscriptionGroupManager(str(tmp_path), _cfg())
    writer_threads: set[int] = set()
    real = versioned_mod.atomic_write

    def spy(path, data):
        writer_threads.add(threading.get_ident())
        real(path, data)

    monkeypatch.setattr(versioned_mod, "atomic_write", spy)
    ticks = 0

    async def other_client() -> None:  # a concurrent client: the loop must keep turning
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    async def main() -> None:
        loop_thread = threading.get_ident()
        t = asyncio.create_task(other_client())
        for i in range(10_000):
            groups.find_or_create(f"G{i}")
            if i % 100 == 0:
                await asyncio.sleep(0)
        await groups.flushed()
        t.cancel()
        assert loop_thread not in writer_threads

    asyncio.run(main())
    assert 1 <= groups.writes == groups.background_writes < 1000  # coalesced: far fewer writes than changes
    assert ticks >= 100
    on_disk = json.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert {f"G{i}" for i in range(10_000)} <= set(on_disk["subscriptionGroupTable"])
    assert on_disk["dataVersion"]["counter"] == groups.data_version.counter


def test_without_a_loop_a_change_is_written_at_once(tmp_path) -> None:
    topics = TopicConfigManager(str(tmp_path), _cfg())
    topics.create_or_update(TopicConfig("T1", 2, 2, 6))
    assert "T1" in json.loads((tmp_path / "topics.json").read_bytes())["topicConfigTable"]
    assert topics.background_writes == 0 and topics.writes == 1


def test_an_older_snapshot_never_overwrites_a_newer_one(tmp_path) -> None:
    topics = TopicConfigManager(str(tmp_path), _cfg())
    old = topics.encode(pretty=True)
    old_seq = next(topics._seq)
    topics.create_or_update(TopicConfig("New", 1, 1, 6))  # written at once (no loop), a later sequence number
    topics._write(old_seq, old)  # a worker thread that lost the race for the file lock
    assert "New" in json.loads((tmp_path / "topics.json").read_bytes())["topicConfigTable"]


def test_changes_during_a_write_are_written_by_the_same_writer_and_stop_persist_wins(tmp_path) -> None:
    topics = TopicConfigManager(str(tmp_path), _cfg())

    async def main() -> None:
        topics.create_or_update(TopicConfig("A", 1, 1, 6))
        await asyncio.sleep(0)  # the writer has taken its snapshot and is in its thread
        topics.create_or_update(TopicConfig("B", 1, 1, 6))
        await topics.flushed()
        on_disk = json.loads((tmp_path / "topics.json").read_bytes())["topicConfigTable"]
        assert {"A", "B"} <= set(on_disk)
        topics.create_or_update(TopicConfig("C", 1, 1, 6))
        topics.persist()  # stop: synchronous, the newest state
        await topics.flushed()  # the writer's own (older or equal) snapshot must not undo it

    asyncio.run(main())
    assert {"A", "B", "C"} <= set(json.loads((tmp_path / "topics.json").read_bytes())["topicConfigTable"])
