"""The recovery decision table over every combination, record classification and tail classification."""

import itertools

import pytest

from orbitmq.model.record import BLANK_MAGIC, encode_record, pack_host, patch_record
from orbitmq.store.layout import BLANK
from orbitmq.store.recovery import (
    DECISION_TABLE,
    CheckpointState,
    RecordKind,
    RedispatchFrom,
    ScanStart,
    TailAction,
    TailState,
    check_record,
    choose_checkpoint_file,
    classify_tail,
    decide,
)

COMBOS = list(itertools.product((False, True), CheckpointState, TailState))


def test_table_covers_every_combination():
    assert set(DECISION_TABLE) == set(COMBOS) and len(COMBOS) == 18


@pytest.mark.parametrize(("abort", "cp", "tail"), COMBOS)
def test_decision_for_every_combination(abort, cp, tail):
    d = decide(abort, cp, tail)
    # scan start: trusted checkpoint + clean exit -> last 3 files; trusted checkpoint + crash -> checkpoint file;
    # untrusted checkpoint -> everything
    if cp is not CheckpointState.VALID:
        assert d.scan_start is ScanStart.FIRST_FILE
    elif abort:
        assert d.scan_start is ScanStart.CHECKPOINT_FILE
    else:
        assert d.scan_start is ScanStart.THIRD_LAST_FILE
    # re-dispatch: only a clean exit with a valid checkpoint can trust the derived stores' end
    expect_redispatch = RedispatchFrom.CQ_END if (not abort and cp is CheckpointState.VALID) else RedispatchFrom.SCAN_START
    assert d.redispatch_from is expect_redispatch
    expect_action = {TailState.CLEAN: TailAction.ACCEPT, TailState.TORN: TailAction.TRUNCATE,
                     TailState.CORRUPT_MIDDLE: TailAction.REFUSE}[tail]
    assert d.tail_action is expect_action
    assert ("crash" in d.mark) == abort and cp.value in d.mark


def test_classify_tail():
    E, I = RecordKind.END, RecordKind.INVALID  # noqa: E741
    assert classify_tail(E, 100, 50, False) is TailState.CLEAN
    assert classify_tail(I, 100, 50, False) is TailState.TORN
    assert classify_tail(I, 100, 50, True) is TailState.TORN  # later data was never flushed
    assert classify_tail(I, 10, 50, False) is TailState.TORN  # flushed tail record damaged, nothing after
    assert classify_tail(I, 10, 50, True) is TailState.CORRUPT_MIDDLE
    assert classify_tail(E, 10, 50, True) is TailState.CORRUPT_MIDDLE  # a zeroed hole inside flushed data


def test_choose_checkpoint_file():
    assert choose_checkpoint_file([100, 200, 300], 250) == 1
    assert choose_checkpoint_file([100, 200, 300], 300) == 2
    assert choose_checkpoint_file([100, 200, 300], 50) == 0
    assert choose_checkpoint_file([100, None, 300], 250) == 0
    assert choose_checkpoint_file([], 5) == 0


def _rec(phys=0, body=b"hello"):
    r = bytearray(encode_record(topic=b"T", body=body, properties=b"", queue_id=0, flag=0, sys_flag=0,
                                born_timestamp=1, born_host=pack_host("127.0.0.1", 1),
                                store_host=pack_host("127.0.0.1", 2)))
    patch_record(r, 0, 0, phys, 5)
    return r


def test_check_record_kinds():
    r = _rec(phys=1000)
    buf = bytes(r) + bytes(64)
    assert check_record(buf, 0, 1000, True) == (RecordKind.RECORD, len(r))
    assert check_record(buf, 0, 999, True)[0] is RecordKind.INVALID  # wrong place: stale or garbage
    assert check_record(buf, len(r), 1000 + len(r), True) == (RecordKind.END, 0)
    assert check_record(buf[:4], 0, 1000, True) == (RecordKind.END, 0)
    body_pos = len(r) - 2 - 1 - 1 - 5  # props len(2) + topic(1) + topic len(1) + body(5)
    crc_bad = bytearray(buf)
    crc_bad[body_pos] ^= 0x40
    assert check_record(crc_bad, 0, 1000, True)[0] is RecordKind.INVALID
    assert check_record(crc_bad, 0, 1000, False)[0] is RecordKind.RECORD
    size_bad = bytearray(buf)
    size_bad[3] += 1
    assert check_record(size_bad, 0, 1000, False)[0] is RecordKind.INVALID
    magic_bad = bytearray(buf)
    magic_bad[5] ^= 1
    assert check_record(magic_bad, 0, 1000, False)[0] is RecordKind.INVALID
    torn = bytes(r[:50]) + bytes(200)
    assert check_record(torn, 0, 1000, False)[0] is RecordKind.INVALID


def test_check_record_blank():
    buf = bytearray(100)
    BLANK.pack_into(buf, 60, 40, BLANK_MAGIC)
    assert check_record(buf, 60, 60, True) == (RecordKind.BLANK, 40)
    BLANK.pack_into(buf, 60, 39, BLANK_MAGIC)
    assert check_record(buf, 60, 60, True)[0] is RecordKind.INVALID
