"""Admission control on the wire (issue 12 item 4): while the disk is too slow a send is answered SYSTEM_BUSY (2)
with RocketMQ's flow-control remark and nothing is stored; once the disk catches up sends succeed again."""

from __future__ import annotations

import asyncio
import time

from orbitmq.broker.client_registry import ClientRegistry
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.broker.metadata.groups import SubscriptionGroupManager
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.metadata.topics import TopicConfigManager
from orbitmq.broker.stats import BrokerStats
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, to_send_v2
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.testing.sim_disk import SimDisk


def _send(topic: str) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": ""}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, to_send_v2(ext), b"body")


class Conn:
    remote_addr = "127.0.0.1:5555"
    closed = False
    attrs: dict[str, object] = {}


def test_slow_disk_send_gets_system_busy_then_recovers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    disk = SimDisk()
    disk.flush_in_thread = True  # type: ignore[misc]
    store = MessageStore(StoreConfig("/s", mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=20 * 100,
                                     max_hash_slot_num=64, max_index_num=256, max_message_size=64 * 1024,
                                     flush_disk_type="SYNC_FLUSH", wait_time_ms_in_send_queue=100), disk=disk)
    store.load()
    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    config_dir = str(tmp_path / "config")
    ctx = BrokerContext(cfg, store, TopicConfigManager(config_dir, cfg), SubscriptionGroupManager(config_dir, cfg),
                        ConsumerOffsetManager(config_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    proc = SendProcessor(ctx)

    async def main() -> None:
        ok = await proc.handle(Conn(), _send("T1"))  # creates the topic while the disk is fast
        assert ok.code == ResponseCode.SUCCESS
        disk.flush_delay_s = 0.5
        slow = asyncio.ensure_future(store.put_message(MessageInner("T1", 0, b"x", {})))
        deadline = time.monotonic() + 10
        while store.admission_remark() is None:
            assert time.monotonic() < deadline, "admission control never engaged"
            await asyncio.sleep(0.01)
        end = store.max_phys_offset
        busy = await proc.handle(Conn(), _send("T1"))
        assert busy.code == ResponseCode.SYSTEM_BUSY == 2
        assert busy.remark is not None and busy.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy")
        assert store.max_phys_offset == end  # nothing stored
        await slow
        disk.flush_delay_s = 0
        again = await proc.handle(Conn(), _send("T1"))
        assert again.code == ResponseCode.SUCCESS
        await store.shutdown()

    asyncio.run(main())
