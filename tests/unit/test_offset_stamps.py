"""Commit stamps of consumer offsets (issue 17 item 2): merges and forwarded commits keep, per queue, the newer
commit, so an offset never rolls back across members, yet an admin reset to a lower value, made later, wins."""

from __future__ import annotations

from pathlib import Path

from orbitmq.broker.metadata.data_version import DataVersion, loads_lenient
from orbitmq.broker.metadata.offset_versions import merge_newest_nested, newer_entry
from orbitmq.broker.metadata.offsets import ConsumerOffsetManager, decode_offset_stamps


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def manager(tmp_path: Path, name: str, clock: Clock) -> ConsumerOffsetManager:
    d = tmp_path / name
    d.mkdir()
    return ConsumerOffsetManager(str(d), clock=clock)


def test_newer_entry_rule() -> None:
    assert newer_entry(None, (5, 0))
    assert newer_entry((10, 100), (5, 200))  # a later reset wins
    assert not newer_entry((10, 200), (50, 100))  # an older, larger value does not
    assert newer_entry((10, 100), (11, 100)) and not newer_entry((11, 100), (10, 100))  # same stamp: larger
    assert not newer_entry((10, 0), (5, 200)) and newer_entry((10, 0), (11, 5))  # unstamped: larger offset wins
    assert not newer_entry((10, 300), (5, 0))


def test_merge_newest_nested_keeps_stamps() -> None:
    local, local_stamps = {"T@G": {0: 90, 1: 5}}, {"T@G": {0: 100, 1: 100}}
    other, other_stamps = {"T@G": {0: 10, 1: 3, 2: 7}, "U@G": {0: 1}}, {"T@G": {0: 200, 1: 50, 2: 60}}
    merged, stamps, changed = merge_newest_nested(local, local_stamps, other, other_stamps)
    assert changed
    assert merged == {"T@G": {0: 10, 1: 5, 2: 7}, "U@G": {0: 1}}
    assert stamps == {"T@G": {0: 200, 1: 100, 2: 60}}  # U@G came unstamped
    assert not merge_newest_nested(merged, stamps, {"T@G": {0: 10}}, {"T@G": {0: 200}})[2]


def test_stamps_never_go_back_even_when_the_clock_does(tmp_path: Path) -> None:
    clock = Clock(1000)
    m = manager(tmp_path, "m", clock)
    m.commit("G", "T", 0, 1)
    assert m.stamp("G", "T", 0) == 1000
    clock.ms = 500
    m.commit("G", "T", 0, 2)
    assert m.stamp("G", "T", 0) == 1001
    m.commit("G", "T", 0, 2)  # the same value again: nothing changes
    assert m.stamp("G", "T", 0) == 1001 and m.stamp("G", "T", 9) == 0


def test_slave_sync_never_takes_the_masters_older_table(tmp_path: Path) -> None:
    """The master went down at 10 (stamp 100); the group committed 40 on the slave (stamp 200). The master's table
    arrives again (slave sync, pre-online the other way round): 40 stays on the slave, 40 wins on the master."""
    master, slave = manager(tmp_path, "m", Clock(100)), manager(tmp_path, "s", Clock(200))
    master.commit("G", "T", 0, 10)
    slave.merge_from(master.table(), master.data_version.copy(), decode_offset_stamps(loads_lenient(master.encode())))
    slave.commit("G", "T", 0, 40)
    body = loads_lenient(master.encode())
    assert not slave.merge_from(master.table(), master.data_version.copy(), decode_offset_stamps(body))
    assert slave.query("G", "T", 0) == 40
    assert master.merge_from(slave.table(), slave.data_version.copy(),
                             decode_offset_stamps(loads_lenient(slave.encode())))
    assert master.query("G", "T", 0) == 40 and master.stamp("G", "T", 0) == 200


def test_admin_reset_to_a_lower_offset_survives_the_merge(tmp_path: Path) -> None:
    master, slave = manager(tmp_path, "m", Clock(100)), manager(tmp_path, "s", Clock(100))
    master.commit("G", "T", 0, 90)
    slave.merge_from(master.table(), None, decode_offset_stamps(loads_lenient(master.encode())))
    slave_clock = Clock(300)
    slave._clock = slave_clock  # noqa: SLF001 - the reset happens later
    slave.commit("G", "T", 0, 0)  # reset while the master is down
    assert master.merge_from(slave.table(), None, decode_offset_stamps(loads_lenient(slave.encode())))
    assert master.query("G", "T", 0) == 0
    # an unstamped (RocketMQ 4.x) copy cannot tell: the larger offset wins, never a rollback
    assert master.merge_from({"T@G": {0: 50}}, DataVersion(0, 0))
    assert master.query("G", "T", 0) == 50


def test_forwarded_commits_out_of_order(tmp_path: Path) -> None:
    m = manager(tmp_path, "m", Clock(100))
    assert m.commit_if_newer("G", "T", 0, 50, 200)
    assert not m.commit_if_newer("G", "T", 0, 40, 150)  # arrived late: older
    assert m.query("G", "T", 0) == 50 and m.stamp("G", "T", 0) == 200
    assert m.commit_if_newer("G", "T", 0, 50, 250) and m.stamp("G", "T", 0) == 250  # same value, newer stamp
    assert m.commit_if_newer("G", "T", 0, 45, 0) and m.query("G", "T", 0) == 45  # unstamped: a plain commit


def test_stamps_persist_and_a_4x_file_loads_unstamped(tmp_path: Path) -> None:
    m = manager(tmp_path, "m", Clock(1234))
    m.commit("G", "T", 3, 7)
    m.persist()
    again = ConsumerOffsetManager(str(tmp_path / "m"))
    again.load()
    assert again.query("G", "T", 3) == 7 and again.stamp("G", "T", 3) == 1234
    old = tmp_path / "old"
    old.mkdir()
    (old / "consumerOffset.json").write_text('{"offsetTable":{"T@G":{3:9}}}')
    legacy = ConsumerOffsetManager(str(old))
    legacy.load()
    assert legacy.query("G", "T", 3) == 9 and legacy.stamp("G", "T", 3) == 0
    m.remove_group("G")
    assert m.stamp("G", "T", 3) == 0 and b'"offsetStamps":{}' in m.encode()
