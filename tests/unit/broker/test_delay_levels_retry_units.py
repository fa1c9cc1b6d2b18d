"""Delay levels and retry, pure parts: messageDelayLevel parsing, the delivery time stored as the schedule entries'
tags code (append and recovery re-dispatch), due-time correction, delayOffset.json, the schedule service's
delivery step on a simulated store, and the retry/DLQ decisions."""

import asyncio
from types import SimpleNamespace

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services.delay import ScheduleService, decode_offsets, delivery_copy, encode_offsets
from orbitmq.broker.services.retry import goes_to_dlq, retry_delay_level, schedule_rewrite
from orbitmq.model.record import decode_record
from orbitmq.model.tags import tag_code
from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.store.message_store import request_of
from orbitmq.store.schedule import (
    DEFAULT_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    corrected_due,
    delivery_time,
    level_of,
    parse_delay_levels,
)
from orbitmq.testing.sim_disk import SimDisk


def test_parse_default_levels():
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000)
    assert levels[4] == 60_000 and levels[-1] == 2 * 3_600_000


def test_parse_units_and_spacing():
    assert parse_delay_levels("  1s 2m\t3h 1d 0s ") == (1000, 120_000, 10_800_000, 86_400_000, 0)
    assert parse_delay_levels("10S") == (10_000,)


@pytest.mark.parametrize("spec", ["", "   ", "5", "5x", "s", "-1s", "1.5s", "1s 2q"])
def test_parse_rejects_bad_specs(spec):
    with pytest.raises(ConfigError):
        parse_delay_levels(spec)


def test_store_config_validates_levels():
    with pytest.raises(ConfigError):
        StoreConfig("/s", message_delay_level="1s bad").validate()


def test_level_and_delivery_time():
    spec = "1s 5s 10s"
    assert level_of({"DELAY": "2"}, 3) == 2
    assert level_of({"DELAY": "99"}, 3) == 3
    assert level_of({"DELAY": "0"}, 3) == 0 and level_of({}, 3) == 0 and level_of({"DELAY": "x"}, 3) == 0
    assert delivery_time({"DELAY": "2"}, 1_000_000, spec) == 1_005_000
    assert delivery_time({"DELAY": "7"}, 1_000_000, spec) == 1_010_000  # clamped to the last level
    assert delivery_time({}, 1_000_000, spec) == 1_000_000


def test_corrected_due():
    now = 1_000_000
    assert corrected_due(now + 5000, 5000, now) == now + 5000  # normal: wait
    assert corrected_due(now - 10, 5000, now) == now - 10  # overdue: deliver
    assert corrected_due(now + 5001, 5000, now) == now  # more than one level ahead: corrected to now


def test_delay_offset_file_round_trip():
    data = encode_offsets({2: 15, 1: 0})
    assert data == b'{"offsetTable":{1:0,2:15}}'
    assert decode_offsets(data) == {1: 0, 2: 15}
    assert decode_offsets(b'{"offsetTable":{"3":7}}') == {3: 7}
    with pytest.raises(ValueError):
        decode_offsets(b'{"other":1}')


class StepClock:
    def __init__(self, t: int = 1_700_000_000_000) -> None:
        self.t = t

    def now_ms(self) -> int:
        return self.t

    def monotonic_ms(self) -> int:
        return self.t


def _store(clock, spec="1s 5s 10s"):
    cfg = StoreConfig("/s", mapped_file_size_commitlog=64 * 1024, mapped_file_size_consume_queue=20 * 100,
                      max_message_size=4096, max_hash_slot_num=64, max_index_num=512, message_delay_level=spec)
    s = MessageStore(cfg, disk=SimDisk(), clock=clock)
    s.load()
    return s


def _scheduled(level, topic="Real", qid=1, **extra):
    props = {"DELAY": str(level), "REAL_TOPIC": topic, "REAL_QID": str(qid), "TAGS": "TagA", "KEYS": "k1",
             "UNIQ_KEY": "U1", **extra}
    return MessageInner(SCHEDULE_TOPIC, level - 1, b"body", props, flag=3, sys_flag=0, born_timestamp=123,
                        born_host="10.0.0.1:5555", reconsume_times=2)


def test_schedule_entry_tags_code_is_delivery_time_on_append_and_recovery():
    clock = StepClock()
    s = _store(clock)
    r = asyncio.run(s.put_message(_scheduled(2)))
    entry = s.cq_table.find(SCHEDULE_TOPIC, 1).entry(0)
    assert entry is not None and entry[2] == r.store_timestamp + 5000
    rec = s.select_one_message_by_offset(r.phys_offset)
    assert request_of(decode_record(rec), "1s 5s 10s").tags_code == r.store_timestamp + 5000
    assert request_of(decode_record(rec), "1s 2s 10s").tags_code == r.store_timestamp + 2000
    plain = asyncio.run(s.put_message(MessageInner("Real", 0, b"x", {"TAGS": "TagA"})))
    assert s.cq_table.find("Real", 0).entry(0)[2] == tag_code("TagA") and plain.queue_offset == 0


def test_schedule_service_delivers_only_when_due(tmp_path):
    clock = StepClock()
    s = _store(clock)
    ctx = SimpleNamespace(config=SimpleNamespace(message_delay_level="1s 5s 10s", is_slave=False), store=s)
    svc = ScheduleService(ctx, SimpleNamespace(clock=clock, config_dir=str(tmp_path), writes=BackgroundWrites()))  # type: ignore[arg-type]

    async def go():
        await svc.start()
        put = await s.put_message(_scheduled(2))
        await s.put_message(_scheduled(2))
        clock.t = put.store_timestamp + 4000
        wait = await svc.deliver_due(2)
        assert wait == 1000 and svc.offsets.get(2, 0) == 0
        assert s.get_max_offset_in_queue("Real", 1) == 0
        clock.t = put.store_timestamp + 5000
        assert await svc.deliver_due(2) is None  # both due (same store ms), queue drained
        assert svc.offsets[2] == 2 and svc.delivered == 2
        assert await svc.deliver_due(1) is None and await svc.deliver_due(3) is None
        await svc.stop()

    asyncio.run(go())
    g = s.get_message("g", "Real", 1, 0, 32)
    assert g.msg_count == 2
    m = decode_record(g.buffers[0])
    assert m.topic == "Real" and m.queue_id == 1 and m.body == b"body" and m.flag == 3
    assert "DELAY" not in m.properties and m.properties["WAIT"] == "false"
    assert m.properties["REAL_TOPIC"] == "Real" and m.properties["UNIQ_KEY"] == "U1"
    assert m.reconsume_times == 2 and m.born_timestamp == 123 and m.born_host == "10.0.0.1:5555"
    assert s.cq_table.find("Real", 1).entry(0)[2] == tag_code("TagA")  # tags code recomputed from TAGS
    assert (tmp_path / "delayOffset.json").read_bytes().endswith(b'"offsetTable":{2:2}}')  # C: + dataVersion
    # a new service resumes from the persisted offset: nothing is delivered twice
    svc2 = ScheduleService(ctx, SimpleNamespace(clock=clock, config_dir=str(tmp_path), writes=BackgroundWrites()))  # type: ignore[arg-type]

    async def again():
        await svc2.start()
        assert await svc2.deliver_due(2) is None and svc2.delivered == 0

    asyncio.run(again())


def test_delivery_copy_without_real_topic_is_skipped():
    ext = SimpleNamespace(properties={"DELAY": "1"}, body=b"", flag=0, sys_flag=0, born_timestamp=0,
                          born_host="1.1.1.1:1", store_host="1.1.1.1:2", reconsume_times=0,
                          prepared_transaction_offset=0)
    assert delivery_copy(ext) is None  # type: ignore[arg-type]


def test_retry_levels_and_dlq_decision():
    assert [retry_delay_level(0, n) for n in range(4)] == [3, 4, 5, 6]
    assert retry_delay_level(7, 0) == 7
    assert goes_to_dlq(16, 16, 0) and goes_to_dlq(2, 2, 0) and not goes_to_dlq(1, 2, 0)
    assert goes_to_dlq(0, 16, -1)
    props: dict[str, str] = {}
    assert schedule_rewrite("%RETRY%G", 0, props, 20, 18) == (SCHEDULE_TOPIC, 17)
    assert props == {"DELAY": "18", "REAL_TOPIC": "%RETRY%G", "REAL_QID": "0"}
    props = {"DELAY": "3"}
    assert schedule_rewrite("%RETRY%G", 0, props, 0, 18) == ("%RETRY%G", 0) and "DELAY" not in props
