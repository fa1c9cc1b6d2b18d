"""CommitLog: the single append-only log of all topics over a SegmentList.

Assigns phys offsets, queue offsets ("topic-queueId" -> next), store timestamps and writes records straight into
the segment buffer; writes the end-of-file blank filler; validates and scans records for recovery. Single writer:
every call runs on the event-loop thread. Flushing is flush.py's job, visibility/dispatch message_store.py's.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orbitmq.base import marks
from orbitmq.base.clock import Clock
from orbitmq.base.invariant import check
from orbitmq.base.native import speedups
from orbitmq.model.enums import TRANSACTION_MASK
from orbitmq.model.properties import (
    MAX_PROPERTIES_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Prop,
    encode_properties,
)
from orbitmq.model.record import (
    BORNHOST_V6_FLAG,
    STOREHOST_V6_FLAG,
    encode_record_into,
    encode_run_into,
    pack_host_port,
    record_size,
)
from orbitmq.model.tags import tag_code
from orbitmq.store.config import StoreConfig
from orbitmq.store.disk import Disk
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.layout import BLANK, BLANK_MAGIC, BLANK_SIZE, COMMITLOG_DIR, SIZE_MAGIC
from orbitmq.store.recovery import RecordKind, check_record
from orbitmq.store.results import MessageInner, PutResult, PutStatus
from orbitmq.store.schedule import SCHEDULE_TOPIC, delivery_time
from orbitmq.store.segment import Segment
from orbitmq.store.segment_list import SegmentList

log = logging.getLogger(__name__)
_Q = struct.Struct(">q")
_I32_MIN, _I32_MAX, _I64_MIN, _I64_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1
_PREPARED = 0x4
_ROLLBACK = 0xC
_MAGIC_BYTES = struct.pack(">i", -626843481)
_HOST_CACHE_MAX = 4096
_NOT_V6 = ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
_join_props = PROPERTY_SEPARATOR.join
_join_pair = NAME_VALUE_SEPARATOR.join
_native = speedups()
_append_singles_native = None if _native is None else _native.append_singles  # twin: append_singles_py
_Parts = tuple[bytes, bytes, bytes, bytes, int]  # topic, properties (UTF-8), born host, store host, record size


@dataclass(slots=True)
class Appended:
    """Outcome of one append: the facade's PutResult plus what to dispatch once visible."""

    result: PutResult
    end_offset: int
    requests: list[DispatchRequest]


class CommitLog:
    def __init__(self, root_dir: str, config: StoreConfig, disk: Disk, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        directory = config.store_path_commitlog or os.path.join(root_dir, COMMITLOG_DIR)  # storePathCommitLog
        self.segments = SegmentList(directory, config.mapped_file_size_commitlog, disk)
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0
        self._hosts: dict[str, bytes] = {}
        self._max_record = config.max_message_size + 64 * 1024
        # once the last segment is half written, the next one is created ahead off the event loop (allocate.py)
        self._prepare_at = config.mapped_file_size_commitlog // 2

    # ---- lifecycle -----------------------------------------------------------------------------------
    def load(self) -> None:
        self.segments.load()

    def close(self) -> None:
        self.segments.close()

    @property
    def max_offset(self) -> int:
        return self.segments.max_offset

    @property
    def min_offset(self) -> int:
        """Offset of the first byte still stored (start of the first segment; 0 for an empty log)."""
        return self.segments.min_offset

    # ---- append --------------------------------------------------------------------------------------
    def _host(self, host_port: str) -> bytes:
        raw = self._hosts.get(host_port)
        if raw is None:
            raw = pack_host_port(host_port)
            if len(self._hosts) >= _HOST_CACHE_MAX:
                self._hosts.clear()
            self._hosts[host_port] = raw
        return raw

    def _encode(self, msg: MessageInner) -> _Parts | PutStatus:
        """The checked, encoded variable parts of one record (written later, in place, at its final offset)."""
        topic = msg.topic.encode("utf-8")
        if not topic or len(topic) > 127:
            return PutStatus.MESSAGE_ILLEGAL
        if len(msg.body) > self.config.max_message_size:
            return PutStatus.MESSAGE_ILLEGAL
        props = encode_properties(msg.properties).encode("utf-8")
        if len(props) > MAX_PROPERTIES_SIZE:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED
        hosts = self._hosts  # memo hit inline (packed hosts are never empty); a miss packs and caches
        try:
            born = hosts.get(msg.born_host) or self._host(msg.born_host)
            store = hosts.get(msg.store_host) or self._host(msg.store_host)
        except ValueError:
            return PutStatus.MESSAGE_ILLEGAL
        size = record_size(len(msg.body), len(topic), len(props), len(born), len(store))
        if size > self._max_record:
            return PutStatus.MESSAGE_ILLEGAL
        return topic, props, born, store, size

    def _writable_segment(self, need: int) -> Segment:
        """The segment that will take `need` bytes, writing the blank filler and rolling when needed."""
        seg = self.segments.last
        if seg is None:
            return self.segments.roll(0)
        if seg.free_bytes >= need + BLANK_SIZE:
            if seg.wrote_position >= self._prepare_at and self.segments.ahead_of != seg.start_offset:
                self.segments.prepare_next()
            return seg
        if seg.free_bytes >= BLANK_SIZE:
            free = seg.free_bytes
            seg.append(BLANK.pack(free, BLANK_MAGIC))
            seg.wrote_position = seg.size  # the filler covers the whole remainder
            marks.hit("commitlog blank filler written")
        else:
            seg.wrote_position = seg.size
        return self.segments.roll()

    def _begin_write(self, total: int) -> tuple[Segment, int]:
        """The segment taking `total` bytes and the store timestamp of the records (never going backwards)."""
        segs = self.segments.segments
        seg = segs[-1] if segs else None
        if (seg is None or seg.size - seg.wrote_position < total + BLANK_SIZE
                or (seg.wrote_position >= self._prepare_at and self.segments.ahead_of != seg.start_offset)):
            seg = self._writable_segment(total)  # roll, filler or prepare-ahead: the general segment pick
        now = self.clock.now_ms()
        store_ts = now if now > self.last_store_timestamp else self.last_store_timestamp
        self.last_store_timestamp = store_ts
        return seg, store_ts

    def append(self, msgs: list[MessageInner]) -> Appended:
        """Append one message or one batch (all records land in one segment, consecutive queue offsets). A new
        segment that cannot be created (ENOSPC at its allocation, EMFILE, ...) refuses the put with
        CREATE_MAPPED_FILE_FAILED before anything is written or taken; the next put tries again."""
        try:
            if msgs:
                fast = self._append_run(msgs)
                if fast is not None:
                    return fast
            return self._append_general(msgs)
        except OSError as e:  # only the roll to a new segment does I/O here
            marks.hit("commitlog segment creation failed")
            log.error("cannot create a CommitLog segment (%s): put refused", e)
            return Appended(PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED), -1, [])

    def _append_run(self, msgs: list[MessageInner]) -> Appended | None:
        """append() for the common input: every message of one topic and queue, from one born host to one store
        host, none a PREPARED/ROLLBACK half (a SEND_BATCH_MESSAGE, a plain single send). The batch invariants are
        checked and encoded once; the queue offset is taken and the queue table updated once. None (nothing
        written, nothing taken) when the input is not such a run or a check fails: the general path then
        produces the same records or the same refusal."""
        first = msgs[0]
        if len(msgs) == 1:
            if _append_singles_native is not None:  # the native loop for one; a decline gets _append_one's answer
                done = self._native_singles(msgs)
                if type(done) is tuple:
                    return Appended(done[0][0], done[1], done[2])
            return self._append_one(first)
        topic_s, queue_id, born_s, store_s = first.topic, first.queue_id, first.born_host, first.store_host
        if _append_singles_native is not None:
            for m in msgs:  # a run: one queue's (append_singles takes any mix, with a queue offset each)
                tx = m.sys_flag & TRANSACTION_MASK
                if (tx == _PREPARED or tx == _ROLLBACK or m.topic != topic_s or m.queue_id != queue_id
                        or m.born_host != born_s or m.store_host != store_s):
                    return None
            done = self._native_singles(msgs)  # one queue's singles in a row: the run's records and requests
            if type(done) is tuple:
                results, end, requests = done
                head = results[0]
                return Appended(PutResult(PutStatus.PUT_OK, head.phys_offset, end - head.phys_offset,
                                          [r.msg_ids[0] for r in results], head.queue_offset, len(msgs),
                                          head.store_timestamp), end, requests)
            # declined (nothing written, nothing taken): the loop below gives the same records or refusal
        topic = topic_s.encode("utf-8")
        hosts = self._hosts
        born = hosts.get(born_s)
        store = hosts.get(store_s)
        if not topic or len(topic) > 127 or born is None or store is None:
            return None  # first sight of a host (packed and cached by the general path) or an illegal topic
        fixed = record_size(0, len(topic), 0, len(born), len(store))
        max_body = self.config.max_message_size
        max_record = self._max_record
        props_list: list[bytes] = []
        sizes: list[int] = []
        total = 0
        for m in msgs:
            tx = m.sys_flag & TRANSACTION_MASK
            if (tx == _PREPARED or tx == _ROLLBACK or m.topic != topic_s or m.queue_id != queue_id
                    or m.born_host != born_s or m.store_host != store_s):
                return None
            try:  # encode_properties' own fast path, without its call (the same text)
                props_b = _join_props(map(_join_pair, m.properties.items())).encode("utf-8")
            except (TypeError, AttributeError):  # a None or non-str value, or no properties at all
                props_b = encode_properties(m.properties).encode("utf-8")
            size = fixed + len(m.body) + len(props_b)
            if len(m.body) > max_body or len(props_b) > MAX_PROPERTIES_SIZE or size > max_record:
                return None
            props_list.append(props_b)
            sizes.append(size)
            total += size
        if total + BLANK_SIZE > self.segments.segment_size:
            return None
        seg, buf, start_pos, base, store_ts = self._begin_parts(total)
        pos = start_pos
        table = self.topic_queue_table
        key = f"{topic_s}-{queue_id}"
        first_queue_offset = queue_offset = table.get(key, 0)
        schedule = topic_s == SCHEDULE_TOPIC
        delay_levels = self.config.message_delay_level
        try:
            msg_ids = encode_run_into(buf, pos, topic, born, store, queue_id, queue_offset, base, store_ts, msgs,
                                      props_list, store.hex().upper())  # (store host + phys as >q).hex().upper()
        except (struct.error, OverflowError, ValueError, TypeError):  # a header field out of its Java range
            return Appended(PutResult(PutStatus.MESSAGE_ILLEGAL), -1, [])  # no queue offset taken yet
        phys = base + pos
        requests: list[DispatchRequest] = []
        add_request = requests.append
        for m, size in zip(msgs, sizes, strict=True):
            props = m.properties
            add_request(DispatchRequest(
                topic_s, queue_id, phys, size,
                delivery_time(props, store_ts, delay_levels) if schedule else tag_code(props.get(Prop.TAGS)),
                store_ts, queue_offset, props.get(Prop.KEYS), props.get(Prop.UNIQ_KEY), m.sys_flag,
                m.prepared_transaction_offset, props,
            ))
            queue_offset += 1
            phys += size
        pos += total
        table[key] = queue_offset
        seg.backing.mark_written(start_pos, pos)
        seg.wrote_position = pos
        result = PutResult(PutStatus.PUT_OK, base + start_pos, total, msg_ids, first_queue_offset, len(msgs),
                           store_ts)
        return Appended(result, base + pos, requests)

    def _append_one(self, m: MessageInner) -> Appended | None:
        """_append_run of a single message (every plain single send): the same checks, record, result and dispatch
        request, without the run's lists, loops and zip; the common segment case (room left, the next segment
        already prepared or not yet due) read inline. None exactly where _append_run declines."""
        tx = m.sys_flag & TRANSACTION_MASK
        if tx == _PREPARED or tx == _ROLLBACK:
            return None
        topic_s = m.topic
        topic = topic_s.encode("utf-8")
        hosts = self._hosts
        born = hosts.get(m.born_host)
        store = hosts.get(m.store_host)
        if not topic or len(topic) > 127 or born is None or store is None:
            return None
        props = m.properties
        try:  # encode_properties' own fast path, without its call (the same text)
            props_b = _join_props(map(_join_pair, props.items())).encode("utf-8")
        except (TypeError, AttributeError):  # a None or non-str value, or no properties at all
            props_b = encode_properties(props).encode("utf-8")
        body_len = len(m.body)
        props_len = len(props_b)
        size = 75 + len(born) + len(store) + body_len + len(topic) + props_len  # record_size, inlined
        if body_len > self.config.max_message_size or props_len > MAX_PROPERTIES_SIZE or size > self._max_record:
            return None
        segments = self.segments
        if size + BLANK_SIZE > segments.segment_size:
            return None
        seg, store_ts = self._begin_write(size)
        pos = seg.wrote_position
        base = seg.start_offset
        table = self.topic_queue_table
        queue_id = m.queue_id
        key = f"{topic_s}-{queue_id}"
        queue_offset = table.get(key, 0)
        try:
            msg_ids = encode_run_into(seg.buf, pos, topic, born, store, queue_id, queue_offset, base, store_ts, [m],
                                      [props_b], store.hex().upper())
        except (struct.error, OverflowError, ValueError, TypeError):  # a header field out of its Java range
            return Appended(PutResult(PutStatus.MESSAGE_ILLEGAL), -1, [])  # no queue offset taken yet
        phys = base + pos
        request = DispatchRequest(
            topic_s, queue_id, phys, size,
            delivery_time(props, store_ts, self.config.message_delay_level) if topic_s == SCHEDULE_TOPIC
            else tag_code(props.get(Prop.TAGS)),
            store_ts, queue_offset, props.get(Prop.KEYS), props.get(Prop.UNIQ_KEY), m.sys_flag,
            m.prepared_transaction_offset, props,
        )
        table[key] = queue_offset + 1
        end = pos + size
        seg.backing.mark_written(pos, end)
        seg.wrote_position = end
        return Appended(PutResult(PutStatus.PUT_OK, phys, size, msg_ids, queue_offset, 1, store_ts), base + end,
                        [request])

    def append_singles(self, msgs: list[MessageInner]) -> tuple[list[PutResult], int, list[DispatchRequest]] | None:
        """Several independent single-message puts (any topics and queues) written in one pass: one segment pick,
        one store timestamp, one range marked written. results[i] is what append([msgs[i]]) answers when the
        puts are made one after another in this order (the same records, queue offsets and ids), except that all
        the records go into one segment: when the last one's room takes only some of them, it gets its filler and
        they all go into the next (as a batch does). None, with no queue offset taken and nothing marked written,
        when any message is not what _append_one accepts, they do not fit in one segment, or a header field is out
        of its Java range (checked before the segment pick): the caller then puts them one by one.
        The native loop (_speedups.append_singles) does it when built; it hands what it does not take (non-str
        properties, SCHEDULE_TOPIC records, ...) to the Python twin, append_singles_py, before taking anything."""
        if _append_singles_native is not None:
            done = self._native_singles(msgs)
            if done is not NotImplemented:
                return done
        return self.append_singles_py(msgs)

    def _native_singles(self, msgs: list[MessageInner]) -> Any:
        """append_singles by the native loop: its answer (the tuple or None), or NotImplemented (nothing taken)
        for the Python twin."""
        assert _append_singles_native is not None
        done = _append_singles_native(msgs, self._hosts, self.config.max_message_size, self._max_record,
                                      self.segments.segment_size - BLANK_SIZE, self._begin_parts,
                                      self.topic_queue_table, SCHEDULE_TOPIC, DispatchRequest, PutResult,
                                      PutStatus.PUT_OK)
        if done is None or done is NotImplemented:
            return done
        seg, start_pos, end, results, requests = done
        seg.backing.mark_written(start_pos, end)
        seg.wrote_position = end
        return results, seg.start_offset + end, requests

    def _begin_parts(self, total: int) -> tuple[Segment, memoryview, int, int, int]:
        """_begin_write, unpacked for a run's writer (the native append_singles and the Python loops): the segment,
        its buffer, write position and base offset, the store timestamp."""
        seg, store_ts = self._begin_write(total)
        return seg, seg.buf, seg.wrote_position, seg.start_offset, store_ts

    def append_singles_py(self, msgs: list[MessageInner]
                          ) -> tuple[list[PutResult], int, list[DispatchRequest]] | None:
        """append_singles in Python (the reference of the native loop)."""
        hosts = self._hosts
        max_body = self.config.max_message_size
        max_record = self._max_record
        parts: list[tuple[bytes, bytes, bytes, bytes, int]] = []
        total = 0
        for m in msgs:
            tx = m.sys_flag & TRANSACTION_MASK
            if tx == _PREPARED or tx == _ROLLBACK:
                return None
            topic = m.topic.encode("utf-8")
            born = hosts.get(m.born_host)
            store = hosts.get(m.store_host)
            if not topic or len(topic) > 127 or born is None or store is None:
                return None
            try:  # encode_properties' own fast path, without its call (the same text)
                props_b = _join_props(map(_join_pair, m.properties.items())).encode("utf-8")
            except (TypeError, AttributeError):
                props_b = encode_properties(m.properties).encode("utf-8")
            size = 75 + len(born) + len(store) + len(m.body) + len(topic) + len(props_b)  # record_size, inlined
            if len(m.body) > max_body or len(props_b) > MAX_PROPERTIES_SIZE or size > max_record:
                return None
            try:  # a header field out of its Java range (or not a number): declined before the segment pick
                if not (_I32_MIN <= m.queue_id <= _I32_MAX and _I32_MIN <= m.flag <= _I32_MAX
                        and _I64_MIN <= m.born_timestamp <= _I64_MAX and _I32_MIN <= m.reconsume_times <= _I32_MAX
                        and _I64_MIN <= m.prepared_transaction_offset <= _I64_MAX):
                    return None
            except TypeError:
                return None
            parts.append((topic, props_b, born, store, size))
            total += size
        if not parts or total + BLANK_SIZE > self.segments.segment_size:
            return None
        seg, buf, start_pos, base, store_ts = self._begin_parts(total)
        pos = start_pos
        table = self.topic_queue_table
        delay_levels = self.config.message_delay_level
        results: list[PutResult] = []
        requests: list[DispatchRequest] = []
        taken: list[tuple[str, int | None]] = []  # queue table entries before this pass, to undo a refusal
        last_store = b""
        store_hex = ""
        for m, (topic, props_b, born, store, size) in zip(msgs, parts, strict=True):
            if store is not last_store:
                last_store, store_hex = store, store.hex().upper()
            topic_s = m.topic
            queue_id = m.queue_id
            key = f"{topic_s}-{queue_id}"
            prior = table.get(key)
            queue_offset = prior or 0
            try:
                msg_ids = encode_run_into(buf, pos, topic, born, store, queue_id, queue_offset, base, store_ts, [m],
                                          [props_b], store_hex)
            except (struct.error, OverflowError, ValueError, TypeError):  # a header field out of its Java range
                for k, v in reversed(taken):  # nothing is marked written: the bytes past wrote_position are free
                    if v is None:
                        del table[k]
                    else:
                        table[k] = v
                return None
            taken.append((key, prior))
            props = m.properties
            phys = base + pos
            requests.append(DispatchRequest(
                topic_s, queue_id, phys, size,
                delivery_time(props, store_ts, delay_levels) if topic_s == SCHEDULE_TOPIC
                else tag_code(props.get(Prop.TAGS)),
                store_ts, queue_offset, props.get(Prop.KEYS), props.get(Prop.UNIQ_KEY), m.sys_flag,
                m.prepared_transaction_offset, props,
            ))
            results.append(PutResult(PutStatus.PUT_OK, phys, size, msg_ids, queue_offset, 1, store_ts))
            table[key] = queue_offset + 1
            pos += size
        seg.backing.mark_written(start_pos, pos)
        seg.wrote_position = pos
        return results, base + pos, requests

    def _append_general(self, msgs: list[MessageInner]) -> Appended:
        """append() for any input (mixed topics/queues/hosts, transaction halves): per-message checks."""
        encoded: list[_Parts] = []
        total = 0
        for m in msgs:
            parts = self._encode(m)
            if isinstance(parts, PutStatus):
                return Appended(PutResult(parts), -1, [])
            encoded.append(parts)
            total += parts[4]
        if total + BLANK_SIZE > self.segments.segment_size:
            return Appended(PutResult(PutStatus.MESSAGE_ILLEGAL), -1, [])
        seg, store_ts = self._begin_write(total)
        buf = seg.buf
        start_pos = pos = seg.wrote_position
        first_phys = seg.start_offset + start_pos
        table = self.topic_queue_table
        requests: list[DispatchRequest] = []
        msg_ids: list[str] = []
        first_queue_offset = -1
        for i, (m, (topic, props_b, born, store, _size)) in enumerate(zip(msgs, encoded, strict=True)):
            phys = seg.start_offset + pos
            key = f"{m.topic}-{m.queue_id}"
            tx = m.sys_flag & TRANSACTION_MASK
            counted = tx != _PREPARED and tx != _ROLLBACK
            queue_offset = table.get(key, 0) if counted else 0
            try:
                n = encode_record_into(
                    buf, pos, topic, m.body, props_b, m.queue_id, m.flag, m.sys_flag & _NOT_V6, m.born_timestamp,
                    born, store, m.reconsume_times, m.prepared_transaction_offset, queue_offset, phys, store_ts, None,
                )
            except (struct.error, OverflowError, ValueError, TypeError):  # a header field out of its Java range
                self._undo_queue_offsets(msgs[:i])
                return Appended(PutResult(PutStatus.MESSAGE_ILLEGAL), -1, [])
            if counted:
                table[key] = queue_offset + 1
            if first_queue_offset < 0:
                first_queue_offset = queue_offset
            props = m.properties
            requests.append(DispatchRequest(
                m.topic, m.queue_id, phys, n,
                tag_code(props.get(Prop.TAGS)) if m.topic != SCHEDULE_TOPIC
                else delivery_time(props, store_ts, self.config.message_delay_level), store_ts, queue_offset,
                props.get(Prop.KEYS), props.get(Prop.UNIQ_KEY), m.sys_flag, m.prepared_transaction_offset, props,
            ))
            msg_ids.append((store + _Q.pack(phys)).hex().upper())
            pos += n
        seg.backing.mark_written(start_pos, pos)
        seg.wrote_position = pos
        result = PutResult(PutStatus.PUT_OK, first_phys, total, msg_ids, first_queue_offset, len(msgs), store_ts)
        return Appended(result, seg.start_offset + pos, requests)

    def _undo_queue_offsets(self, msgs: list[MessageInner]) -> None:
        """Give back the queue offsets taken by the already-written part of a refused batch (nothing of it is
        visible: wrote_position has not moved)."""
        table = self.topic_queue_table
        for m in msgs:
            tx = m.sys_flag & TRANSACTION_MASK
            if tx != _PREPARED and tx != _ROLLBACK:
                table[f"{m.topic}-{m.queue_id}"] -= 1

    # ---- read ----------------------------------------------------------------------------------------
    def read(self, phys_offset: int, size: int) -> memoryview | None:
        """Bytes [phys_offset, phys_offset+size) if they lie in one segment and are written."""
        seg = self.segments.find(phys_offset)
        if seg is None:
            return None
        pos = phys_offset - seg.start_offset
        if pos + size > seg.wrote_position:
            return None
        return seg.buf[pos : pos + size]

    def read_record(self, phys_offset: int) -> memoryview | None:
        """The whole record starting at `phys_offset` (None if out of range or not a record)."""
        seg = self.segments.find(phys_offset)
        if seg is None:
            return None
        pos = phys_offset - seg.start_offset
        if pos + 8 > seg.wrote_position:
            return None
        total, magic = SIZE_MAGIC.unpack_from(seg.buf, pos)
        if magic == BLANK_MAGIC or total < 91 or pos + total > seg.wrote_position:
            return None
        return seg.buf[pos : pos + total]

    def store_timestamp_at(self, phys_offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at phys_offset (-1 if unreadable)."""
        rec = self.read(phys_offset, size)
        if rec is None or len(rec) < 80:
            return -1
        sys_flag = struct.unpack_from(">i", rec, 36)[0]
        return _Q.unpack_from(rec, 56 + (12 if sys_flag & BORNHOST_V6_FLAG else 0))[0]

    # ---- recovery scanning -----------------------------------------------------------------------------
    def first_record_time(self, seg: Segment) -> int | None:
        kind, size = check_record(seg.buf, 0, seg.start_offset, False)
        if kind is not RecordKind.RECORD:
            return None
        return self.store_timestamp_at(seg.start_offset, size)

    def scan(self, start_index: int, check_crc: bool, start_pos: int = 0) -> tuple[RecordKind, int]:
        """Validate records forward from segment `start_index` (at `start_pos` in it: a record boundary); returns
        (why it stopped, stop phys offset).

        BLANK moves to the next segment; the scan stops at END, INVALID or past the last segment (END).
        """
        segs = self.segments.segments
        if not segs:
            return RecordKind.END, 0
        i = start_index
        seg = segs[i]
        pos = start_pos
        while True:
            kind, size = check_record(seg.buf, pos, seg.start_offset + pos, check_crc)
            if kind is RecordKind.RECORD:
                pos += size
                if pos < seg.size:
                    continue
            elif kind is not RecordKind.BLANK:
                return kind, seg.start_offset + pos
            i += 1
            if i >= len(segs):
                return RecordKind.END, seg.start_offset + seg.size
            seg, pos = segs[i], 0

    def iter_records(self, start: int, end: int) -> Iterator[tuple[int, memoryview]]:
        """(phys_offset, record bytes) of valid-by-construction records in [start, end) (after recovery)."""
        phys = start
        while phys < end:
            seg = self.segments.find(phys)
            check(seg is not None, f"no segment for phys {phys}")
            assert seg is not None
            pos = phys - seg.start_offset
            if pos + 8 > seg.size:
                phys = seg.start_offset + seg.size
                continue
            total, magic = SIZE_MAGIC.unpack_from(seg.buf, pos)
            if magic == BLANK_MAGIC:
                phys = seg.start_offset + seg.size
                continue
            check(total >= 91, f"bad record size {total} at {phys} below the recovered end {end}")
            yield phys, seg.buf[pos : pos + total]
            phys += total

    def has_valid_record_between(self, start: int, end: int) -> bool:
        """True if some valid record (CRC-checked, self-located) starts in (start, end)."""
        phys = start + 1
        while phys < end:
            seg = self.segments.find(phys)
            if seg is None:
                return False
            lo = phys - seg.start_offset
            hi = min(end - seg.start_offset, seg.size)
            chunk_size = 1 << 20
            while lo < hi:
                window = bytes(seg.buf[lo : min(hi + 4, lo + chunk_size + 4, seg.size)])
                i = window.find(_MAGIC_BYTES)
                while i >= 0:
                    cand = lo + i - 4
                    if cand > start - seg.start_offset and cand < hi:
                        kind, _ = check_record(seg.buf, cand, seg.start_offset + cand, True)
                        if kind is RecordKind.RECORD:
                            return True
                    i = window.find(_MAGIC_BYTES, i + 1)
                lo += chunk_size
            phys = seg.start_offset + seg.size
        return False
