"""maxFilterMessageSize (RocketMQ's bound of one filtered pull's ConsumeQueue scan, alias maxFilterMessageCount):
a tag or record filter matching nothing answers after at most max(bound, maxMsgNums * 20) / 20 entries with the
offset to go on from, and pulling on from there finds every matching entry (none is skipped)."""

from __future__ import annotations

import asyncio

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.config_file import build_configs
from orbitmq.model.tags import tag_code
from orbitmq.store import GetStatus, MessageInner, MessageStore, StoreConfig
from orbitmq.testing.sim_disk import SimDisk


def _store(**kw: int) -> MessageStore:
    cfg = StoreConfig("/s", mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                      max_message_size=4096, max_hash_slot_num=64, max_index_num=512, **kw)
    s = MessageStore(cfg, disk=SimDisk())
    s.load()
    return s


def _put(s: MessageStore, tags: list[str]) -> None:
    async def go() -> None:
        for i, t in enumerate(tags):
            r = await s.put_message(MessageInner("T", 0, b"m%d" % i, {"TAGS": t, "k": t}))
            assert r.ok
    asyncio.run(go())


def _pull_all(s: MessageStore, bound_entries: int, **filters) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Pull from 0 to the end; every scan is checked against the bound. Returns (matched queue offsets, pulls)."""
    offset, found, pulls = 0, [], 0
    scanned = 0

    def counting_tags(code: int) -> bool:
        nonlocal scanned
        scanned += 1
        return filters["tag"](code)

    while offset < s.get_max_offset_in_queue("T", 0):
        scanned = 0
        g = s.get_message("g", "T", 0, offset, 4, counting_tags if "tag" in filters else None,
                          filters.get("record"))
        pulls += 1
        assert g.next_begin_offset > offset  # always progress
        if "tag" in filters:
            assert scanned <= bound_entries
        assert g.next_begin_offset - offset <= bound_entries
        if g.status is GetStatus.FOUND:
            matched = [offset + i for i in _matched_positions(s, offset, g.next_begin_offset, filters)]
            assert len(matched) == g.msg_count
            found.extend(matched)
        else:
            assert g.status is GetStatus.NO_MATCHED_MESSAGE and not g.buffers
        offset = g.next_begin_offset
    return found, pulls


def _matched_positions(s: MessageStore, lo: int, hi: int, filters) -> list[int]:  # type: ignore[no-untyped-def]
    cq = s.cq_table.find("T", 0)
    assert cq is not None
    out = []
    for i, (phys, size, tags) in enumerate(cq.read(lo, hi - lo)):
        if "tag" in filters and not filters["tag"](tags):
            continue
        if "record" in filters:
            rec = s.commitlog.read(phys, size)
            assert rec is not None
            if not filters["record"](rec):
                continue
        out.append(i)
    return out


@pytest.mark.parametrize("bound_bytes", [16_000, 2_000])
def test_tag_filtered_pull_scans_at_most_the_bound_and_skips_nothing(bound_bytes: int) -> None:
    s = _store(max_filter_message_size=bound_bytes)
    tags = ["B"] * 2500
    for i in (0, 1500, 1501, 1777, 2499):
        tags[i] = "A"
    _put(s, tags)
    want = tag_code("A")
    # a matching entry first, then a pull over non-matching entries only: it ends at the bound with the next offset
    g = s.get_message("g", "T", 0, 1, 4, lambda c: c == want)
    bound = bound_bytes // 20
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 1 + bound
    found, pulls = _pull_all(s, bound, tag=lambda c: c == want)
    assert found == [0, 1500, 1501, 1777, 2499]
    assert pulls >= 2500 // bound


def test_sql_like_record_filter_is_bounded_the_same_way() -> None:
    s = _store(max_filter_message_size=20 * 50)
    props = ["x"] * 400
    props[123] = props[399] = "y"
    _put(s, props)
    evaluated = 0

    def keep(rec: memoryview) -> bool:
        nonlocal evaluated
        evaluated += 1
        return b"k\x01y" in bytes(rec)

    g = s.get_message("g", "T", 0, 0, 4, None, keep)
    assert (g.status, g.next_begin_offset, evaluated) == (GetStatus.NO_MATCHED_MESSAGE, 50, 50)
    found, _ = _pull_all(s, 50, record=keep)
    assert found == [123, 399]


def test_the_bound_grows_with_max_msg_nums_as_in_rocketmq() -> None:
    s = _store(max_filter_message_size=20 * 10)
    _put(s, ["B"] * 100)
    g = s.get_message("g", "T", 0, 0, 32, lambda c: False)
    assert g.next_begin_offset == 32  # max(10 entries, maxMsgNums 32)


def test_config_key_parsed_from_broker_conf_and_checked() -> None:
    _, store, warnings = build_configs({"storePathRootDir": "/s", "maxFilterMessageSize": "4000"})
    assert store.max_filter_message_size == 4000 and not warnings
    _, store, _ = build_configs({"storePathRootDir": "/s", "maxFilterMessageCount": "2000"})
    assert store.max_filter_message_size == 2000
    _, store, _ = build_configs({"storePathRootDir": "/s"})
    assert store.max_filter_message_size == 16_000  # RocketMQ's default: 800 entries
    with pytest.raises(ConfigError, match="maxFilterMessageSize"):
        build_configs({"storePathRootDir": "/s", "maxFilterMessageSize": "10"})
