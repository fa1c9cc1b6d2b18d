"""Controller mode keeps topics proven by data (replicas_manager._to_master, metadata/topics.py
adopt_topics_with_data, services/metadata_sync.py keep/offer_topics): a broker becoming master adds a config for
every topic its real store holds ConsumeQueue data of; a slave's sync keeps such a topic and offers it to a master
that holds its data too, never one the master deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.controller_mode.rules import RoleInfo
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.services.metadata_sync import offer_topics, sync_metadata_from
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.store import MessageInner
from tests.unit.broker.test_replicas_manager import make


def test_a_new_master_adds_the_topics_its_store_holds_data_of(tmp_path: Path) -> None:
    rm, ctx, clock, _ = make(tmp_path)
    ctx.topics.create_or_update(TopicConfig("Known", 2, 2))
    ctx.store.put_messages_nowait([MessageInner("Lost", 0, b"a", {}), MessageInner("Lost", 2, b"b", {}),
                                   MessageInner("Known", 1, b"c", {})])
    assert ctx.topics.get("Lost") is None

    async def scenario() -> None:
        await rm.source.heartbeat_all()  # type: ignore[attr-defined]
        await rm.apply(RoleInfo(1, "127.0.0.1:10911", 1, frozenset({1}), 1), clock.monotonic_ms(), "register")
        await rm.stop()

    asyncio.run(scenario())
    lost = ctx.topics.get("Lost")
    assert lost is not None and (lost.read_queue_nums, lost.write_queue_nums, lost.perm) == (3, 3, 6)
    assert ctx.topics.get("Known") == TopicConfig("Known", 2, 2)  # an existing config is left alone
    reloaded = TopicConfigManager(str(tmp_path / "config"), ctx.config)
    reloaded.load()
    assert reloaded.get("Lost") == lost  # persisted


class MasterClient:
    """A master as the slave's sync sees it: its topic table, max offsets per queue, topic creations recorded."""

    def __init__(self, topics: TopicConfigManager, maxes: dict[tuple[str, int], int]) -> None:
        self.topics, self.maxes = topics, maxes
        self.created: list[dict[str, str]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        if cmd.code == RequestCode.GET_ALL_TOPIC_CONFIG:
            return cmd.response(body=self.topics.encode())
        if cmd.code == RequestCode.GET_MAX_OFFSET:
            return cmd.response(ext_fields={"offset": str(self.maxes.get((ext["topic"], int(ext["queueId"])), 0))})
        if cmd.code == RequestCode.UPDATE_AND_CREATE_TOPIC:
            self.created.append(dict(ext))
            return cmd.response()
        return cmd.response(ResponseCode.SYSTEM_ERROR, "not here")


def test_a_slave_keeps_topics_it_holds_data_of_and_offers_only_those_the_master_has_data_of(
        tmp_path: Path) -> None:
    cfg = BrokerConfig(broker_ip1="127.0.0.1")
    master = TopicConfigManager(str(tmp_path / "master"), cfg)
    master.create_or_update(TopicConfig("Shared", 4, 4))
    slave = TopicConfigManager(str(tmp_path / "slave"), cfg)
    for name in ("Shared", "Lost", "Deleted", "NoData"):
        slave.create_or_update(TopicConfig(name, 2, 2))
    ctx: Any = type("Ctx", (), {"topics": slave, "offsets": None, "groups": None})()
    client = MasterClient(master, {("Lost", 1): 7})  # the master holds Lost's data, not Deleted's
    with_data = {"Shared", "Lost", "Deleted"}

    async def scenario() -> list[str]:
        # offsets and groups: the fake master answers SYSTEM_ERROR, so the sync skips them
        kept = await sync_metadata_from(ctx, client, "m", keep=with_data.__contains__)  # type: ignore[arg-type]
        assert sorted(tc.topic_name for tc in kept) == ["Deleted", "Lost"]
        return await offer_topics(client, "m", kept)  # type: ignore[arg-type]

    offered = asyncio.run(scenario())
    assert set(slave.all()) >= {"Shared", "Lost", "Deleted"} and slave.get("NoData") is None
    assert slave.get("Shared") == TopicConfig("Shared", 4, 4)  # the master's config wins for its topics
    assert offered == ["Lost"] and [c["topic"] for c in client.created] == ["Lost"]
