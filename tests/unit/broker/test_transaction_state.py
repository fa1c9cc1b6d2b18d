"""Transaction check bookkeeping (op set, half/op progress) and the half-message send hook, without I/O."""

from __future__ import annotations

from orbitmq.broker.metadata.topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from orbitmq.broker.services.transaction import TransactionSendHook
from orbitmq.broker.services.transaction_state import (
    RECENT_UNIQ_MAX,
    TransactionState,
    check_threshold_ms,
    parse_op_body,
)
from orbitmq.store import MessageInner


def test_op_body_one_or_many_offsets():
    assert parse_op_body(b"17") == [17]
    assert parse_op_body(b"3,5, 9") == [3, 5, 9]
    assert parse_op_body(b"") == [] and parse_op_body(b"x,4") == [4]


def test_check_threshold_immunity_overrides_timeout():
    assert check_threshold_ms({}, 6000) == 6000
    assert check_threshold_ms({"CHECK_IMMUNITY_TIME_IN_SECONDS": "20"}, 6000) == 20_000
    assert check_threshold_ms({"CHECK_IMMUNITY_TIME_IN_SECONDS": "bad"}, 6000) == 6000


def test_ops_mark_offsets_and_uniq_keys_done():
    st = TransactionState(0, 0)
    st.add_op(0, [2], "U2")
    assert st.is_done(2, "U2") and st.is_done(9, "U2")  # any copy of U2 is finished
    assert not st.is_done(3, "U3") and not st.is_done(3, None)
    assert st.op_read == 1


def test_op_progress_waits_for_every_copy_of_a_finished_transaction():
    st = TransactionState(0, 0)
    st.note_half(0, "A")
    st.note_half(1, "B")
    st.note_half(2, "A")  # a re-appended copy of A
    st.add_op(0, [0], "A")  # A finished through its first copy
    st.add_op(1, [1], "B")
    st.advance_half(2)
    # op 0 (A) must stay: its copy at half offset 2 is not passed yet; after a restart it is re-read
    assert st.op_offset == 0 and st.unsettled_ops() == 2
    st.advance_half(3)
    assert st.op_offset == 2 and st.unsettled_ops() == 0
    assert st.done == {} and st.last_copy == {}
    assert st.is_done(2, "A")  # still remembered by UNIQ_KEY for late repeats of END_TRANSACTION


def test_op_progress_stops_at_first_unsettled_op_in_queue_order():
    st = TransactionState(0, 0)
    st.add_op(0, [5], "X")  # finishes a half message beyond the progress
    st.add_op(1, [0], "Y")
    st.advance_half(1)
    assert st.op_offset == 0  # op 1 is settled but op 0 before it is not
    st.advance_half(6)
    assert st.op_offset == 2


def test_half_progress_never_moves_back():
    st = TransactionState(10, 4)
    st.advance_half(7)
    assert st.half_offset == 10 and st.op_offset == 4


def test_unmark_after_failed_commit_write():
    st = TransactionState()
    st.mark_done(4, "U")
    st.unmark(4, "U")
    assert not st.is_done(4, "U")


def test_recent_uniq_keys_are_bounded():
    st = TransactionState()
    for i in range(RECENT_UNIQ_MAX + 5):
        st.mark_done(i, f"u{i}")
    assert len(st.done_uniq) == RECENT_UNIQ_MAX
    assert "u0" not in st.done_uniq and f"u{RECENT_UNIQ_MAX + 4}" in st.done_uniq


def _msg(topic: str, queue_id: int, props: dict[str, str], sys_flag: int = 4) -> MessageInner:
    return MessageInner(topic, queue_id, b"x", props, 0, sys_flag)


def test_send_hook_turns_prepared_message_into_half_message():
    m = _msg("Orders", 3, {"TRAN_MSG": "true", "PGROUP": "pg"}, sys_flag=4 | 1)
    plain = _msg("Orders", 1, {}, sys_flag=0)
    hook = TransactionSendHook()
    assert hook.before_put(None, None, [m]) is None and hook.before_put(None, None, [plain]) is None
    assert (m.topic, m.queue_id, m.sys_flag) == (TRANS_HALF_TOPIC, 0, 1)  # transaction bits reset, compressed kept
    assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "3"
    assert (plain.topic, plain.queue_id, plain.properties) == ("Orders", 1, {})


def test_send_hook_undoes_a_delay_rewrite_of_a_transactional_message():
    m = _msg(SCHEDULE_TOPIC, 2, {"TRAN_MSG": "true", "DELAY": "3", "REAL_TOPIC": "Orders", "REAL_QID": "1"}, 0)
    TransactionSendHook().before_put(None, None, [m])
    assert (m.topic, m.queue_id) == (TRANS_HALF_TOPIC, 0)
    assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "1"
    assert "DELAY" not in m.properties
