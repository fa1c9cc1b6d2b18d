"""Pure bookkeeping of the transaction check service: which half messages are finished (the op set), and how far
the half and op queues of group CID_RMQ_SYS_TRANS may advance. No I/O: transaction.py feeds it and persists the
two offsets through the broker's consumer offset table.
"""

from __future__ import annotations

from collections import OrderedDict, deque

RECENT_UNIQ_MAX = 100_000  # finished transactions remembered by UNIQ_KEY beyond the unsettled ops


class TransactionState:
    """Op set + progress.

    half_offset: next half-queue offset the check scan looks at (everything below is finished or re-appended).
    op_offset: op-queue offset below which no op is needed any more (persisted; ops from here are re-read at start).
    op_read: next op-queue offset to read (in memory only).
    A transaction is identified by its half-queue offset and, across re-appended copies, by its UNIQ_KEY.
    """

    def __init__(self, half_offset: int = 0, op_offset: int = 0) -> None:
        self.half_offset = half_offset
        self.op_offset = op_offset
        self.op_read = op_offset
        self.done: dict[int, str] = {}  # finished half offset -> UNIQ_KEY
        self.done_uniq: OrderedDict[str, int] = OrderedDict()  # finished UNIQ_KEY -> half offset of its op
        self.last_copy: dict[str, int] = {}  # UNIQ_KEY -> highest half offset known to hold it (>= half_offset)
        self._ops: deque[tuple[int, int, str]] = deque()  # unsettled ops: (op queue offset, half offset, uniq)

    # ----- queries -----
    def is_done(self, half_offset: int, uniq: str | None) -> bool:
        return half_offset in self.done or (uniq is not None and uniq in self.done_uniq)

    # ----- updates -----
    def mark_done(self, half_offset: int, uniq: str | None) -> None:
        """A commit/rollback decided now (before its op message is read back)."""
        self.done[half_offset] = uniq or ""
        if uniq:
            self.done_uniq[uniq] = half_offset
            self.done_uniq.move_to_end(uniq)
            while len(self.done_uniq) > RECENT_UNIQ_MAX:
                self.done_uniq.popitem(last=False)

    def unmark(self, half_offset: int, uniq: str | None) -> None:
        """Undo mark_done after the commit's store write failed."""
        self.done.pop(half_offset, None)
        if uniq:
            self.done_uniq.pop(uniq, None)

    def add_op(self, op_queue_offset: int, half_offsets: list[int], uniq: str | None) -> None:
        """An op message read from the op queue (op_queue_offset must increase between calls)."""
        for h in half_offsets:
            self.mark_done(h, uniq)
            self._ops.append((op_queue_offset, h, uniq or ""))
        self.op_read = max(self.op_read, op_queue_offset + 1)

    def note_half(self, half_offset: int, uniq: str | None) -> None:
        """A half message (or a re-appended copy) exists at half_offset."""
        if uniq and self.last_copy.get(uniq, -1) < half_offset:
            self.last_copy[uniq] = half_offset

    def advance_half(self, new_half_offset: int) -> None:
        """The scan passed everything below new_half_offset: settle ops and forget what can no longer matter.

        An op is settled (the persisted op_offset may pass it) once both the half offset it finishes and every
        known copy of its transaction lie below half_offset: after a restart the scan never meets them again."""
        if new_half_offset < self.half_offset:
            return
        self.half_offset = new_half_offset
        ops = self._ops
        last_copy = self.last_copy
        while ops:
            op_q, h, uniq = ops[0]
            if h >= new_half_offset or last_copy.get(uniq, -1) >= new_half_offset:
                break
            ops.popleft()
        self.op_offset = ops[0][0] if ops else self.op_read
        for h in [h for h in self.done if h < new_half_offset]:
            del self.done[h]
        for u in [u for u, h in last_copy.items() if h < new_half_offset]:
            del last_copy[u]

    def unsettled_ops(self) -> int:
        return len(self._ops)


def parse_op_body(body: bytes) -> list[int]:
    """Op message body: half queue offsets as ASCII decimal, one (4.9.x) or several separated by ',' (5.x)."""
    out: list[int] = []
    for part in body.decode("ascii", "replace").split(","):
        part = part.strip()
        if part.lstrip("-").isdigit():
            out.append(int(part))
    return out


def check_threshold_ms(props: dict[str, str], transaction_timeout_ms: int) -> int:
    """Age a half message must reach before it is checked: CHECK_IMMUNITY_TIME_IN_SECONDS if set, else
    transactionTimeOut."""
    raw = props.get("CHECK_IMMUNITY_TIME_IN_SECONDS")
    if raw:
        try:
            return max(int(raw) * 1000, 0)
        except ValueError:
            pass
    return transaction_timeout_ms
