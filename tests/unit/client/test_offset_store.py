"""Offset stores: remote store over fake broker calls, local JSON file round trip and backup fallback."""

from __future__ import annotations

import asyncio

from orbitmq.client.offset_store import (
    LocalFileOffsetStore,
    RemoteOffsetStore,
    decode_offsets_file,
    encode_offsets_file,
)
from orbitmq.model import MessageQueue

MQ0 = MessageQueue("T", "b", 0)
MQ1 = MessageQueue("T", "b", 1)


def test_remote_store_reads_broker_and_commits_changed_offsets():
    commits: list[tuple[MessageQueue, int, bool]] = []
    stored = {MQ0: 7}

    async def fetch(mq):
        return stored.get(mq, -1)

    async def commit(mq, off, oneway):
        commits.append((mq, off, oneway))

    async def main():
        s = RemoteOffsetStore(fetch, commit)
        assert await s.read(MQ0) == 7
        assert await s.read(MQ1) == -1
        s.update(MQ0, 9)
        s.update(MQ0, 8, increase_only=True)
        assert s.read_memory(MQ0) == 9
        s.update(MQ1, -1)
        assert s.read_memory(MQ1) == -1
        await s.persist_all([MQ0, MQ1])
        await s.persist(MQ0)
        s.remove(MQ0)
        assert s.read_memory(MQ0) == -1

    asyncio.run(main())
    assert commits == [(MQ0, 9, True), (MQ0, 9, False)]


def test_remote_store_persist_all_survives_one_failing_broker():
    done = []

    async def fetch(mq):
        return -1

    async def commit(mq, off, oneway):
        if mq == MQ0:
            raise OSError("down")
        done.append(mq)

    async def main():
        s = RemoteOffsetStore(fetch, commit)
        s.update(MQ0, 1)
        s.update(MQ1, 2)
        await s.persist_all([MQ0, MQ1])

    asyncio.run(main())
    assert done == [MQ1]


def test_local_store_round_trips_through_file(tmp_path):
    async def main():
        s = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
        s.update(MQ0, 5)
        s.update(MQ1, 6)
        await s.persist_all([MQ0, MQ1])
        assert s.path == tmp_path / "10.0.0.1@x" / "G" / "offsets.json"
        s2 = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
        s2.load()
        assert await s2.read(MQ0, from_store=True) == 5 and await s2.read(MQ1) == 6
        s.update(MQ0, 50)
        await s.persist(MQ0)
        s.path.write_bytes(b"{garbage")  # torn file: the .bak copy is used
        s3 = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
        s3.load()
        assert s3.read_memory(MQ0) == 5

    asyncio.run(main())


def test_offsets_file_uses_fastjson_message_queue_keys():
    raw = encode_offsets_file({MQ1: 3, MQ0: 2})
    assert raw == (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:2,'
                   b'{"brokerName":"b","queueId":1,"topic":"T"}:3}}')
    assert decode_offsets_file(raw) == {MQ0: 2, MQ1: 3}
