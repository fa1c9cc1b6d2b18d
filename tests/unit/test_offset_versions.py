"""Data versions of the consumer and delay offset tables (RIP-32) and the never-roll-back merge."""

from __future__ import annotations

import copy

import pytest

from orbitmq.broker.metadata.data_version import DataVersion
from orbitmq.broker.metadata.offset_versions import (
    DelayOffsetTable,
    VersionTracker,
    merge_max_flat,
    merge_max_nested,
    needs_restamp,
)
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
from orbitmq.broker.services.delay import decode_offsets, encode_offsets
from orbitmq.protocol.bodies import ConsumerOffsetSerializeWrapper
from orbitmq.protocol.bodies.admin import DelayOffsetSerializeWrapper
from orbitmq.protocol.fastjson import loads


def test_data_version_order_is_state_then_counter_then_timestamp() -> None:
    assert DataVersion(2, 1).newer_than(DataVersion(1, 999))
    assert DataVersion(1, 5).newer_than(DataVersion(1, 4))
    assert not DataVersion(1, 5).newer_than(DataVersion(1, 5))
    assert DataVersion(0, 0, state_version=1).newer_than(DataVersion(99, 99))
    d = DataVersion(3, 7, 2)
    assert DataVersion.from_json_obj(d.to_json_obj()) == d
    assert "stateVersion" not in DataVersion(1, 1).to_json_obj()  # 4.x shape unchanged when 0


def test_tracker_advances_every_step_and_at_settle() -> None:
    t = VersionTracker(3, DataVersion(0, 0))
    t.changed()
    t.changed()
    assert t.version.counter == 0 and t.pending == 2
    t.changed()
    assert t.version.counter == 1 and t.pending == 0
    assert not t.settle()  # nothing since the last advance
    t.changed()
    assert t.settle() and t.version.counter == 2 and t.pending == 0
    assert not t.adopt(DataVersion(1, 10**13)) and t.version.counter == 2  # older: refused
    assert t.adopt(DataVersion(5, 1)) and t.version.counter == 5
    with pytest.raises(ValueError):
        VersionTracker(0)


def test_merges_take_the_larger_offset() -> None:
    merged, changed = merge_max_flat({1: 5, 2: 9}, {1: 7, 2: 3, 3: 1})
    assert merged == {1: 7, 2: 9, 3: 1} and changed
    assert merge_max_flat({1: 5}, {1: 5}) == ({1: 5}, False)
    nested, changed = merge_max_nested({"T@G": {0: 10, 1: 2}}, {"T@G": {0: 4, 1: 8}, "U@G": {0: 1}})
    assert nested == {"T@G": {0: 10, 1: 8}, "U@G": {0: 1}} and changed
    assert not merge_max_nested({"T@G": {0: 10}}, {"T@G": {0: 4}})[1]
    assert needs_restamp(adopted=True, changed=True, same_as_other=False)
    assert not needs_restamp(adopted=True, changed=True, same_as_other=True)
    assert needs_restamp(adopted=False, changed=True, same_as_other=False)
    assert not needs_restamp(adopted=False, changed=False, same_as_other=False)


def test_consumer_offsets_version_advances_every_step(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path), version_step=4)
    start = m.data_version.counter
    for i in range(9):
        m.commit("G", "T", 0, i + 1)
    m.commit("G", "T", 0, 9)  # unchanged value: not an update
    assert m.data_version.counter == start + 2
    assert m.persist()
    assert m.data_version.counter == start + 3  # the persisted change (1 pending) is stamped
    assert not m.persist() and m.data_version.counter == start + 3


def test_consumer_offsets_file_round_trip_with_version(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path), version_step=2)
    m.commit("G", "T", 0, 12)
    m.commit("G", "T", 1, 7)
    m.persist()
    raw = (tmp_path / "consumerOffset.json").read_bytes()
    assert raw.startswith(b'{"dataVersion":{"counter":') and b'"offsetTable":{"T@G":{0:12,1:7}}' in raw
    wrapper = ConsumerOffsetSerializeWrapper.from_json(raw)
    assert wrapper.offset_table == {"T@G": {0: 12, 1: 7}}
    assert wrapper.data_version is not None and wrapper.data_version.counter == m.data_version.counter
    back = ConsumerOffsetManager(str(tmp_path))
    back.load()
    assert back.table() == {"T@G": {0: 12, 1: 7}} and back.data_version == m.data_version


def test_consumer_offsets_4x_file_loads_as_oldest(tmp_path) -> None:
    (tmp_path / "consumerOffset.json").write_bytes(b'{"offsetTable":{"T@G":{0:3}}}')
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    assert m.table() == {"T@G": {0: 3}}
    assert m.data_version == DataVersion(0, 0, 0)
    assert DataVersion(0, 1).newer_than(m.data_version)


def test_merge_from_never_lowers_and_keeps_the_newer_version(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.commit("G", "T", 0, 100)
    m.commit("G", "T", 1, 5)
    mine = m.data_version.copy()
    newer = DataVersion(mine.counter + 3, mine.timestamp)
    # a newer copy with a lower offset on queue 0 (e.g. it missed the last commits): queue 0 stays at 100
    assert m.merge_from({"T@G": {0: 90, 1: 50}, "U@G": {2: 4}}, newer)
    assert m.table() == {"T@G": {0: 100, 1: 50}, "U@G": {2: 4}}
    assert m.data_version.counter == newer.counter
    m.persist()  # our content is in neither copy: the persist stamps a version newer than both
    assert m.data_version.newer_than(newer)
    # an older copy never replaces anything, not even the version
    before = m.data_version.copy()
    assert not m.merge_from({"T@G": {0: 1, 1: 1}}, DataVersion(0, 0))
    assert m.table()["T@G"] == {0: 100, 1: 50} and m.data_version == before
    # a 4.x copy (no version) still raises what it can
    assert m.merge_from({"T@G": {0: 101}}, None) and m.query("G", "T", 0) == 101


def test_get_all_consumer_offset_body_parses_with_and_without_version() -> None:
    five = ConsumerOffsetSerializeWrapper.from_json(
        b'{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":17},"offsetTable":{"T@G":{0:1}}}')
    assert five.data_version is not None and (five.data_version.counter, five.data_version.timestamp) == (3, 17)
    four = ConsumerOffsetSerializeWrapper.from_json(b'{"offsetTable":{"T@G":{"0":1}}}')
    assert four.data_version is None and four.offset_table == {"T@G": {0: 1}}
    assert b"dataVersion" not in four.to_json()
    assert b'"dataVersion":{"counter":3' in five.to_json()


def test_delay_table_counts_changes_and_encodes_its_version() -> None:
    t = DelayOffsetTable({1: 0}, DataVersion(0, 0), step=2)
    t[1] = 0  # unchanged
    t[1] = 1
    assert t.data_version.counter == 0
    t[2] = 5
    assert t.data_version.counter == 1
    t[2] = 6
    body = t.encode(settle=True)
    assert t.data_version.counter == 2
    obj = loads(body)
    assert obj["offsetTable"] == {1: 1, 2: 6} and obj["dataVersion"]["counter"] == 2
    assert body.index(b"dataVersion") < body.index(b"offsetTable")
    back = decode_offsets(body)
    assert isinstance(back, DelayOffsetTable) and dict(back) == {1: 1, 2: 6} and back.data_version.counter == 2
    assert encode_offsets(back) == back.encode()
    wrapper = DelayOffsetSerializeWrapper.from_json(body)
    assert wrapper.offset_table == {1: 1, 2: 6} and wrapper.data_version is not None
    assert wrapper.data_version.counter == 2
    clone = copy.copy(back)
    assert isinstance(clone, DelayOffsetTable) and clone.data_version == back.data_version


def test_delay_table_4x_body_and_merge() -> None:
    old = decode_offsets(b'{"offsetTable":{"3":7,1:2}}')
    assert dict(old) == {3: 7, 1: 2} and old.data_version == DataVersion(0, 0, 0)
    assert encode_offsets({2: 15, 1: 0}) == b'{"offsetTable":{1:0,2:15}}'  # a plain dict: 4.x shape
    with pytest.raises(ValueError):
        decode_offsets(b'{"other":1}')
    t = DelayOffsetTable({1: 10, 2: 3}, DataVersion(4, 1), step=100)
    assert t.merge_from({1: 8, 2: 9, 3: 1}, DataVersion(6, 1))
    assert dict(t) == {1: 10, 2: 9, 3: 1} and t.data_version.counter == 6
    assert t.tracker.pending == 1  # content differs from the adopted copy: the next persist stamps it
    assert not t.merge_from({1: 1}, DataVersion(1, 1)) and dict(t)[1] == 10 and t.data_version.counter == 6
