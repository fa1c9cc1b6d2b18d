"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and reply sends (324/325, stored as plain
sends): header checks in the 4.9.x order, topic auto-creation, %RETRY% → %DLQ% redirect, delay-level rewrite to
SCHEDULE_TOPIC_XXXX, then one store append and the PutStatus → response-code mapping.

Transactional half messages are refused (TRANSACTION_UNSUPPORTED) unless services/transaction.py is registered.
Hot path: one header dict, one properties decode, no per-message objects besides the MessageInner.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import Coroutine
from functools import partial
from typing import Any

from orbitmq.base.clock import now_ms
from orbitmq.base.native import speedups
from orbitmq.broker.context import BrokerContext, _open_fence, after_put_each
from orbitmq.broker.metadata.topics import (
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.broker.registration import wait_round
from orbitmq.model.enums import Perm, SysFlag, transaction_type
from orbitmq.model.names import group_error, send_topic_error
from orbitmq.model.properties import Prop, decode_properties
from orbitmq.protocol import (
    CURRENT_VERSION,
    FLAG_RESPONSE,
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from orbitmq.protocol.frame import EncodedResponse, is_plain_json_text
from orbitmq.protocol.headers import SendMessageRequestHeader, decode_send_v2
from orbitmq.remoting.connection import DEFERRED, Deferred
from orbitmq.store import STORED_STATUSES, MessageInner, PutResult, PutStatus
from orbitmq.store.schedule import delay_table

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
VERSION_V3_4_9 = 121  # from this client version the broker honours maxReconsumeTimes in the header
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                     TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # the broker's own topics (revive log, timer wheel, ...): never a client's send
_NAME_CACHE_MAX = 100_000
TRANSACTION_UNSUPPORTED = "transaction messages are not supported yet"
_RW = int(Perm.READ | Perm.WRITE)
_WRITE = int(Perm.WRITE)  # a plain int: `x & Perm.WRITE` costs an Enum attribute lookup per send

_PUT_CODES: dict[PutStatus, tuple[int, str | None]] = {
    PutStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutStatus.CREATE_MAPPED_FILE_FAILED: (ResponseCode.SYSTEM_ERROR,
                                          "create mapped file failed, server is busy or broken."),
    PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL,
                                "the message is illegal, maybe msg body or properties length not matched. "
                                "msg body length limit 4m, msg properties length limit 32k."),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL,
                                         "the message is illegal, maybe msg properties length limit 32k."),
    PutStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE,
                                      "service not available now. It may be caused by one of the following "
                                      "reasons: the broker's disk is full, messages are put to the slave, "
                                      "message store has been shut down, etc."),
    PutStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control "
                                                             "for a while"),
    PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}

_SUCCESS = int(ResponseCode.SUCCESS)
_UNIQ_KEY = Prop.UNIQ_KEY
_PUT_OK = PutStatus.PUT_OK
_FRAME_PREFIX = struct.Struct(">iI")  # frame length after this word, serialize type 0 << 24 | header length
_OK_TAIL = f'"serializeTypeCurrentRPC":"JSON","version":{CURRENT_VERSION}}}'.encode()  # PUT_OK's last fields
_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
_decode_header = SendMessageRequestHeader.decode
_new_command = object.__new__

_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_native = speedups()
_split_batch_body = _native.split_batch_body if _native is not None else None


def _new_slotted_py(cls: Any, *values: Any) -> Any:
    """cls(*values): the twin of the native new_slotted (which sets the slots without calling __init__)."""
    return cls(*values)


_new_slotted = _native.new_slotted if _native is not None else _new_slotted_py


def put_ok_answer_py(cls: Any, code: int, head: bytes, msg_id: str, queue_id: int, queue_offset: int, opaque: int,
                     tail: bytes) -> Any:
    """cls(code, frame): the JSON frame of a PUT_OK answer (what _response and the encoder give) from the header's
    fixed start `head` (up to the msgId value) and end `tail` (UTF-8). The twin of the native put_ok_answer, which
    builds it in one buffer and hands odd values back to this one."""
    header = (head + f'{msg_id}","queueId":"{queue_id}","queueOffset":"{queue_offset}"}},"flag":1,'
                     f'"language":"JAVA","opaque":{opaque},'.encode() + tail)
    return cls(code, _FRAME_PREFIX.pack(4 + len(header), len(header)) + header)


_put_ok_answer = _native.put_ok_answer if _native is not None else None
_H = struct.Struct(">h")


class SendReject(Exception):
    """A send refused with a response code and remark (internal control flow only)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark


def decode_batch_body(body: bytes | memoryview) -> list[tuple[int, bytes, str]]:
    """SEND_BATCH_MESSAGE body (§4.7) -> [(flag, body, properties string)]. Raises ValueError if malformed.
    The native splitter when built (one call per batch); any malformed body goes to the Python twin, which
    raises the error."""
    if _split_batch_body is not None:
        records: list[tuple[int, bytes, str]] | None = _split_batch_body(body)
        if records is not None:
            return records
    return decode_batch_body_py(body)


def decode_batch_body_py(body: bytes | memoryview) -> list[tuple[int, bytes, str]]:
    """decode_batch_body in pure Python (the reference twin of the native split_batch_body)."""
    mv = memoryview(body)
    n = len(mv)
    pos = 0
    out: list[tuple[int, bytes, str]] = []
    while pos < n:
        if pos + 20 > n:
            raise ValueError(f"truncated record header at {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(mv, pos)
        if body_len < 0 or pos + 20 + body_len + 2 > n:
            raise ValueError(f"bad body length {body_len} at {pos}")
        b_start = pos + 20
        msg_body = bytes(mv[b_start:b_start + body_len])
        p = b_start + body_len
        (props_len,) = _H.unpack_from(mv, p)
        if props_len < 0 or p + 2 + props_len > n:
            raise ValueError(f"bad properties length {props_len} at {p}")
        props = str(mv[p + 2:p + 2 + props_len], "utf-8")
        end = p + 2 + props_len
        if total != end - pos:
            raise ValueError(f"record size {total} does not match its content ({end - pos}) at {pos}")
        out.append((flag, msg_body, props))
        pos = end
    return out


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._rr = 0  # round-robin counter for queueId < 0
        self._valid_topics: set[str] = set()
        self._valid_groups: set[str] = set()
        self._max_delay_level = len(delay_table(ctx.config.message_delay_level))
        # the send hooks' bound methods, rebuilt whenever ctx.send_hooks holds other hooks than when they were
        # bound (services append to it at start-up, lease mode later); after_put of a hook that declares it a
        # no-op (after_put_noop = True) is not called
        self._hooks_seen: list[Any] | None = None
        self._before_put: tuple[Any, ...] = ()
        self._ok_key: tuple[Any, ...] = ()
        self._ok_head_text = b""
        self._before_plain: tuple[Any, ...] = ()
        self._gate_topics: frozenset[str] = frozenset()
        self._gate_props: frozenset[str] = frozenset()
        self._after_put: tuple[Any, ...] = ()
        self._after_group: tuple[tuple[Any, Any], ...] = ()
        self._created = False  # _check_topic made the request's topic: its answer waits for the route (_routed)

    def _bind_hooks(self, hooks: list[Any]) -> None:
        self._before_put = tuple(h.before_put for h in hooks)
        # a single message outside every declared gate (before_put_acts_on) needs only the hooks without one
        gates = [getattr(h, "before_put_acts_on", None) for h in hooks]
        self._before_plain = tuple(h.before_put for h, g in zip(hooks, gates, strict=True) if g is None)
        self._gate_topics = frozenset().union(*(g[0] for g in gates if g is not None))
        self._gate_props = frozenset().union(*(g[1] for g in gates if g is not None))
        after = [h for h in hooks if getattr(h, "after_put_noop", False) is not True]
        self._after_put = tuple(h.after_put for h in after)
        # per hook: its after_put and, if it has one, its after_put_many (all the single puts of a read in one call)
        self._after_group = tuple((h.after_put, getattr(h, "after_put_many", None)) for h in after)
        self._hooks_seen = list(hooks)

    def _after_puts(self) -> tuple[Any, ...]:
        hooks = self.ctx.send_hooks
        if hooks != self._hooks_seen:  # a C-level compare, identity first per element
            self._bind_hooks(hooks)
        return self._after_put

    def _base_ext(self) -> dict[str, str]:
        cfg = self.ctx.config
        return {"MSG_REGION": cfg.region_id, "TRACE_ON": "true" if cfg.trace_on else "false"}

    async def handle(self, conn: Any, req: RemotingCommand) -> RemotingCommand:
        """Coroutine form of dispatch() (same behaviour): always awaitable, never DEFERRED."""
        r = self.dispatch(conn, req, False)
        if isinstance(r, RemotingCommand):
            return r
        if type(r) is EncodedResponse:  # the PUT_OK frame: the command it holds
            return r.decode()
        assert not isinstance(r, Deferred)
        return await r

    def dispatch(self, conn: Any, req: RemotingCommand, defer: bool = True
                 ) -> RemotingCommand | Deferred | Coroutine[Any, Any, RemotingCommand]:
        """The registered handler. Answers synchronously when the put needs no waiting (ASYNC_FLUSH, WAIT=false,
        refused). A SYNC_FLUSH group-commit wait returns DEFERRED: the flush callback answers through conn.reply
        (no task per send). A put that also waits for a slave (SYNC_MASTER), or any wait with `defer` false,
        becomes a coroutine (the connection runs it as a task)."""
        self._created = False
        prepared = self._prepare(conn, req)
        created, self._created = self._created, False
        if type(prepared) is not tuple:
            return prepared  # the refusal
        msgs, queue_id = prepared
        hooks = self.ctx.send_hooks
        if hooks != self._hooks_seen:  # a C-level compare, identity first per element
            self._bind_hooks(hooks)
        for before in self._befores(msgs):
            early = before(conn, req, msgs)
            if early is not None:
                return early
        if created and (round_done := self.ctx.register_round()) is not None:
            return self._routed(round_done, self._put(conn, req, msgs, queue_id, False))
        return self._put(conn, req, msgs, queue_id, defer)

    @staticmethod
    def _routed(round_done: Any, answer: Any) -> Any:
        """The answer of a send that created its topic, once the registration round `round_done` has ended
        (bounded), as Java registers inside the creation: a consumer or producer that looks the topic up right
        after finds it (the official C++ client otherwise polls routes only every 30 s). The message is stored
        already."""
        if answer is DEFERRED or isinstance(answer, BaseException):
            return answer

        async def later() -> Any:
            await wait_round(round_done)
            out = await answer if inspect.isawaitable(answer) else answer
            return out.decode() if type(out) is EncodedResponse else out

        return later()

    def _befores(self, msgs: list[MessageInner]) -> tuple[Any, ...]:
        """The before_put hooks to call for `msgs`: for a single message outside every hook's declared gate only
        the ungated ones (the others would return None and change nothing), else all of them, in order."""
        if len(msgs) == 1:
            m = msgs[0]
            if m.topic not in self._gate_topics and self._gate_props.isdisjoint(m.properties):
                return self._before_plain
        return self._before_put

    def _prepare(self, conn: Any, req: RemotingCommand, admitted: bool = False
                 ) -> tuple[list[MessageInner], int] | RemotingCommand:
        """The request's messages and the queue id to answer with, or the refusal to send instead. `admitted`: the
        store's admission was checked for this request's read already."""
        try:
            busy = None if admitted else self.ctx.store.admission_remark()  # SYSTEM_BUSY: the disk is too slow
            if busy is not None:
                raise SendReject(ResponseCode.SYSTEM_BUSY, busy)
            raw = req.ext_fields  # the header, decoded and range-checked once: the common V2 shape in one call
            h = decode_send_v2(SendMessageRequestHeader, raw) or _decode_header(raw)
            if h.batch or req.code == _SEND_BATCH:  # the C++ client marks batches with batch="1": h.batch too
                return self._prepare_batch(conn, req, h)
            return self._prepare_one(conn, req, h)
        except (SendReject, HeaderError) as r:
            code = r.code if isinstance(r, SendReject) else int(ResponseCode.SYSTEM_ERROR)
            resp = req.response(code, str(r))
            resp.ext_fields = self._base_ext()
            return resp

    def _put(self, conn: Any, req: RemotingCommand, msgs: list[MessageInner], queue_id: int, defer: bool
             ) -> RemotingCommand | Deferred | Coroutine[Any, Any, RemotingCommand]:
        """Store the prepared messages and answer (see dispatch)."""
        ctx = self.ctx
        result, wait_end = ctx.store.put_messages_nowait(msgs)
        if wait_end < 0:
            for after in self._after_put:
                after(conn, req, msgs, result)
            if result.status is _PUT_OK and req.serialize_type == 0 and len(result.msg_ids) == 1:
                head = self._ok_head()
                if head:  # the PUT_OK frame from its template, as _put_pending answers
                    ans = self._ok_answer(head, req, result, queue_id)
                    ctx.stats.on_put(1, result.wrote_bytes, msgs[0])
                    return ans
            return self._response(req, result, queue_id, msgs[0])
        for hook in ctx.send_hooks:  # stored, now waiting for a flush / slave: hooks that must know at once (dedup)
            appended = getattr(hook, "after_append", None)
            if appended is not None:
                appended(conn, req, msgs, result)
        if defer and ctx.store.when_put_flushed(
                result, wait_end, partial(self._answer_flushed, conn, req, msgs, queue_id)):
            return DEFERRED
        return self._wait_flushed(conn, req, msgs, result, wait_end, queue_id)

    def dispatch_group(self, conn: Any, reqs: list[RemotingCommand]) -> list[Any]:
        """The send requests of one read (Router.many), answered in one pass: each is checked and goes through the
        before_put hooks in order, as dispatch() does; the single messages among them are then stored by one
        put_singles_nowait (one append, one dispatch round) and each gets its after_put hooks and its answer.
        Returns, per request in order, what dispatch() would return for it, or the exception it raised.

        What the one-by-one order would make visible to a later request of the read is kept: a batch is stored
        after the singles before it and before the ones after it, and a message whose UNIQ_KEY a pending one
        carries (a retry in the same read) waits until that one is stored, so the de-dup hook sees it. A store
        that answers only after a flush or a replica wait (SYNC_FLUSH, SYNC_MASTER, Raft) takes them one by one."""
        if not self.ctx.store.puts_complete_at_once:
            return [self._one(conn, req) for req in reqs]
        hooks = self.ctx.send_hooks
        if hooks != self._hooks_seen:
            self._bind_hooks(hooks)
        out: list[Any] = [None] * len(reqs)
        pending: list[tuple[int, RemotingCommand, list[MessageInner], int]] = []
        keys: set[str] = set()
        prepare = self._prepare
        # admission control once for the read (the requests arrived together): a busy store refuses each on its own
        admitted = self.ctx.store.admission_remark() is None
        gate_topics, gate_props = self._gate_topics, self._gate_props
        before_all, before_plain = self._before_put, self._before_plain
        routed: list[int] = []
        for i, req in enumerate(reqs):
            try:
                self._created = False
                prepared = prepare(conn, req, admitted)
                if self._created:  # a new topic: answered once routed (below)
                    self._created = False
                    routed.append(i)
                if type(prepared) is not tuple:
                    out[i] = prepared
                    continue
                msgs, queue_id = prepared
                single = len(msgs) == 1
                if single:
                    m = msgs[0]
                    props = m.properties
                    uniq = props.get(_UNIQ_KEY)
                    # _befores, inlined: a single outside every gate needs only the ungated hooks
                    befores = before_plain if m.topic not in gate_topics and gate_props.isdisjoint(props) else before_all
                    if uniq in keys:
                        self._put_pending(conn, pending, out)
                        keys.clear()
                else:
                    uniq, befores = None, before_all
                    self._put_pending(conn, pending, out)
                    keys.clear()
                early = None
                for before in befores:
                    early = before(conn, req, msgs)
                    if early is not None:
                        break
                if early is not None:
                    out[i] = early
                elif not single:
                    out[i] = self._put(conn, req, msgs, queue_id, True)
                else:
                    pending.append((i, req, msgs, queue_id))
                    if uniq is not None:
                        keys.add(uniq)
            except Exception as e:
                out[i] = e
        self._put_pending(conn, pending, out)
        for i in routed:
            if (round_done := self.ctx.register_round()) is not None:
                out[i] = self._routed(round_done, out[i])
        return out

    def _one(self, conn: Any, req: RemotingCommand) -> Any:
        try:
            return self.dispatch(conn, req)
        except Exception as e:
            return e

    def _put_pending(self, conn: Any, pending: list[tuple[int, RemotingCommand, list[MessageInner], int]],
                     out: list[Any]) -> None:
        """Store the pending single messages of dispatch_group together and fill in their answers."""
        if not pending:
            return
        try:
            results = self.ctx.store.put_singles_nowait([p[2][0] for p in pending]) if len(pending) > 1 else None
        except Exception as e:
            for i, *_ in pending:
                out[i] = e
            pending.clear()
            return
        if results is None:  # the store declined the run: one by one, each with its own refusal
            for i, req, msgs, queue_id in pending:
                try:
                    out[i] = self._put(conn, req, msgs, queue_id, True)
                except Exception as e:
                    out[i] = e
        else:
            items = [(req, msgs, result) for (_, req, msgs, _), result in zip(pending, results, strict=True)]
            failed = self._after_puts_of(conn, items)
            head = self._ok_head()
            native_ok = _put_ok_answer
            counted: list[tuple[PutResult, MessageInner]] = []
            for k, ((i, req, msgs, queue_id), result) in enumerate(zip(pending, results, strict=True)):
                if failed is not None and failed[k] is not None:
                    out[i] = failed[k]
                    continue
                try:
                    if result.status is _PUT_OK and head and req.serialize_type == 0:
                        # _response's PUT_OK, encoded from its template (the same frame: test_send_group.py);
                        # _ok_answer inlined for the native builder, which hands odd values back to it
                        ans = None if native_ok is None else native_ok(
                            EncodedResponse, _SUCCESS, head, result.msg_ids[0], queue_id, result.queue_offset,
                            req.opaque, _OK_TAIL)
                        out[i] = ans if ans is not None else self._ok_answer(head, req, result, queue_id)
                        counted.append((result, msgs[0]))
                    else:
                        out[i] = self._response(req, result, queue_id, msgs[0])
                except Exception as e:
                    out[i] = e
            if counted:
                self.ctx.stats.on_put_singles(counted)
        pending.clear()

    @staticmethod
    def _ok_answer(head: bytes, req: RemotingCommand, result: PutResult, queue_id: int) -> EncodedResponse:
        """The PUT_OK answer of a stored single as an encoded frame: the bytes _response and the encoder give
        (`head` from _ok_head)."""
        args = (EncodedResponse, _SUCCESS, head, result.msg_ids[0], queue_id, result.queue_offset, req.opaque,
                _OK_TAIL)
        ans = None if _put_ok_answer is None else _put_ok_answer(*args)
        return ans if ans is not None else put_ok_answer_py(*args)

    def _ok_head(self) -> bytes:
        """The start of a PUT_OK response header up to its msgId value (the part every answer shares, UTF-8), or
        b"" when the config holds text that JSON would escape (then _response builds the answer)."""
        cfg = self.ctx.config
        key = (cfg.region_id, cfg.trace_on)
        if key != self._ok_key:
            region = cfg.region_id
            self._ok_head_text = (f'{{"code":0,"extFields":{{"MSG_REGION":"{region}","TRACE_ON":'
                                  f'"{"true" if cfg.trace_on else "false"}","msgId":"'.encode()
                                  if is_plain_json_text(region) else b"")
            self._ok_key = key
        return self._ok_head_text

    def _after_puts_of(self, conn: Any, items: list[tuple[RemotingCommand, list[MessageInner], PutResult]]
                       ) -> list[BaseException | None] | None:
        """Every after_put hook, in order, for each stored item (a hook with after_put_many takes them in one
        call). An item whose hook raised skips the later hooks, as one by one; returns None or, per item, that
        exception."""
        failed: list[BaseException | None] | None = None
        for after, many in self._after_group:
            live = items if failed is None else [it for it, f in zip(items, failed, strict=True) if f is None]
            if many is not None:
                got = many(conn, live)
                if got is None:
                    continue
                if failed is None:
                    failed = got
                else:  # map the live items' errors back
                    it = iter(got)
                    failed = [f if f is not None else next(it) for f in failed]
                continue
            failed = after_put_each(after, conn, items, failed)
        return failed

    def _answer_flushed(self, conn: Any, req: RemotingCommand, msgs: list[MessageInner], queue_id: int,
                        result: PutResult) -> None:
        """The group commit covered a DEFERRED put (or timed out): finish it as _wait_flushed does."""
        try:
            for after in self._after_puts():
                after(conn, req, msgs, result)
            resp = self._response(req, result, queue_id, msgs[0])
        except Exception as e:
            conn.reply_error(req, e)
            return
        conn.reply(req, resp)

    async def _wait_flushed(self, conn: Any, req: RemotingCommand, msgs: list[MessageInner], result: PutResult,
                            wait_end: int, queue_id: int) -> RemotingCommand:
        result = await self.ctx.store.wait_put_flushed(result, wait_end)
        for after in self._after_puts():
            after(conn, req, msgs, result)
        return self._response(req, result, queue_id, msgs[0])

    # ----- shared checks (§3.1 steps 1-4) -----
    def _check_topic(self, conn: Any, h: SendMessageRequestHeader, topic: str, batch: bool) -> Any:
        ctx = self.ctx
        cfg = ctx.config
        if cfg.broker_role == "SLAVE":  # cfg.is_slave without the property call
            raise SendReject(ResponseCode.SERVICE_NOT_AVAILABLE, _PUT_CODES[PutStatus.SERVICE_NOT_AVAILABLE][1] or "")
        write_fence = ctx.write_fence
        if write_fence is not _open_fence:  # controller mode: no write lease / too few in-sync replicas
            fence = write_fence()
            if fence is not None:
                raise SendReject(*fence)
        start = cfg.start_accept_send_request_time_stamp
        if start and now_ms() < start:
            raise SendReject(ResponseCode.SYSTEM_ERROR, f"broker unable to service, until {start}")
        if topic not in self._valid_topics:
            err = send_topic_error(topic)
            if err is not None:
                code = ResponseCode.MESSAGE_ILLEGAL if batch and len(topic) > 127 else ResponseCode.SYSTEM_ERROR
                raise SendReject(code, err)
            if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
                raise SendReject(ResponseCode.SYSTEM_ERROR, f"Sending message to topic[{topic}] is forbidden.")
            if len(self._valid_topics) < _NAME_CACHE_MAX:
                self._valid_topics.add(topic)
        tc = ctx.topics.get(topic)
        if not cfg.broker_permission & _WRITE and tc is not None and tc.order:
            raise SendReject(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] sending message is forbidden")
        if tc is None:
            unit = h.unit_mode
            retry = topic.startswith(RETRY_PREFIX)
            sys_flag = (2 if unit else 0) if retry else (1 if unit else 0)
            tc = ctx.topics.create_on_send(topic, h.default_topic, h.default_topic_queue_nums, sys_flag)
            if tc is None and retry:
                tc = ctx.topics.create_system_topic(topic, 1, _RW, sys_flag)
            self._created = tc is not None
            if tc is None:
                raise SendReject(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! "
                                                               "(auto-create is off or the default topic cannot "
                                                               "be inherited)")
        if not tc.perm & _WRITE:  # e.g. %DLQ%<group> (read-only)
            raise SendReject(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        return tc

    def _check_producer_group(self, group: str) -> None:
        if group not in self._valid_groups:
            err = group_error(group)
            if err is not None:
                raise SendReject(ResponseCode.SYSTEM_ERROR, f"producerGroup: {err}")
            if len(self._valid_groups) < _NAME_CACHE_MAX:
                self._valid_groups.add(group)

    def _pick_queue(self, conn: Any, tc: Any, queue_id: int) -> int:
        if queue_id >= tc.write_queue_nums and queue_id >= tc.read_queue_nums:  # >= the larger of the two
            raise SendReject(ResponseCode.SYSTEM_ERROR,
                             f"request queueId[{queue_id}] is illegal, topic:{tc.topic_name} "
                             f"writeQueueNums:{tc.write_queue_nums} producer:{getattr(conn, 'remote_addr', '')}")
        if queue_id < 0:
            self._rr += 1
            queue_id = self._rr % max(1, tc.write_queue_nums)
        return queue_id

    # ----- single message -----
    def _prepare_one(self, conn: Any, req: RemotingCommand, h: SendMessageRequestHeader
                     ) -> tuple[list[MessageInner], int]:
        ctx = self.ctx
        topic = h.topic
        sys_flag = h.sys_flag
        if h.producer_group not in self._valid_groups:
            self._check_producer_group(h.producer_group)
        tc = self._check_topic(conn, h, topic, batch=False)
        queue_id = h.queue_id
        if queue_id < 0 or (queue_id >= tc.write_queue_nums and queue_id >= tc.read_queue_nums):
            queue_id = self._pick_queue(conn, tc, queue_id)  # round robin, or the refusal
        props = decode_properties(h.properties)
        reconsume_times = h.reconsume_times
        if topic.startswith(RETRY_PREFIX):
            topic, queue_id = self._retry_or_dlq(req, h, topic, queue_id, reconsume_times, props)
            if topic.startswith(DLQ_PREFIX):
                tc = ctx.topics.get(topic) or tc
        if tc.topic_filter_type == "MULTI_TAG":
            sys_flag |= SysFlag.MULTI_TAGS
        props[Prop.CLUSTER] = ctx.config.broker_cluster_name
        if props.get(Prop.TRAN_MSG) == "true":
            if ctx.config.reject_transaction_message:
                raise SendReject(ResponseCode.NO_PERMISSION,
                                 f"the broker[{ctx.config.broker_ip1}] sending transaction message is forbidden")
            if ctx.services.get("transaction") is None:  # else services/transaction.py's hook makes it a half
                raise SendReject(ResponseCode.NO_PERMISSION, TRANSACTION_UNSUPPORTED)
        resp_queue_id = queue_id
        delay = props.get(Prop.DELAY)
        if delay is not None and transaction_type(sys_flag) in (0, SysFlag.TRANSACTION_COMMIT):
            topic, queue_id = self._schedule(topic, queue_id, delay, props)
        msg = _new_slotted(MessageInner, topic, queue_id, req.body or b"", props, h.flag, sys_flag, h.born_timestamp,
                           getattr(conn, "remote_addr", "127.0.0.1:0"), ctx.store_host, reconsume_times, 0)
        return [msg], resp_queue_id

    def _retry_or_dlq(self, req: RemotingCommand, h: SendMessageRequestHeader, topic: str, queue_id: int,
                      reconsume_times: int, props: dict[str, str]) -> tuple[str, int]:
        """§3.1 step 5: a %RETRY% send past its max reconsume times goes to %DLQ%<group> queue 0."""
        ctx = self.ctx
        group = topic[len(RETRY_PREFIX):]
        sgc = ctx.groups.find_or_create(group)
        if sgc is None:
            raise SendReject(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_times = sgc.retry_max_times
        if req.version >= VERSION_V3_4_9:
            if h.max_reconsume_times is not None:
                max_times = h.max_reconsume_times
        if reconsume_times < max_times:
            return topic, queue_id
        dlq = DLQ_PREFIX + group
        ctx.topics.create_system_topic(dlq, 1, int(Perm.READ))  # read-only, as CONSUMER_SEND_MSG_BACK's DLQ
        props.pop(Prop.DELAY, None)
        return dlq, 0

    def _schedule(self, topic: str, queue_id: int, delay: str, props: dict[str, str]) -> tuple[str, int]:
        """Delay level > 0: keep the real destination in REAL_TOPIC/REAL_QID, store in SCHEDULE_TOPIC_XXXX."""
        try:
            level = int(delay)
        except ValueError:
            return topic, queue_id
        if level <= 0:
            return topic, queue_id
        level = min(level, self._max_delay_level)
        if level <= 0:
            return topic, queue_id
        props[Prop.DELAY] = str(level)
        props[Prop.REAL_TOPIC] = topic
        props[Prop.REAL_QID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1

    # ----- batch -----
    def _prepare_batch(self, conn: Any, req: RemotingCommand, h: SendMessageRequestHeader
                       ) -> tuple[list[MessageInner], int]:
        ctx = self.ctx
        topic = h.topic
        group = h.producer_group
        sys_flag = h.sys_flag
        born_ts = h.born_timestamp
        if len(topic) > 127:
            raise SendReject(ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(topic)}")
        if topic.startswith(RETRY_PREFIX):
            raise SendReject(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {topic}")
        self._check_producer_group(group)
        tc = self._check_topic(conn, h, topic, batch=True)
        queue_id = self._pick_queue(conn, tc, h.queue_id)
        if tc.topic_filter_type == "MULTI_TAG":
            sys_flag |= SysFlag.MULTI_TAGS
        if transaction_type(sys_flag) != 0:
            raise SendReject(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
        try:
            records = decode_batch_body(req.body or b"")
        except ValueError as e:
            raise SendReject(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}") from None
        if not records:
            raise SendReject(ResponseCode.MESSAGE_ILLEGAL, "empty batch body")
        batch_props = decode_properties(h.properties)
        batch_props[Prop.CLUSTER] = ctx.config.broker_cluster_name
        born_host = getattr(conn, "remote_addr", "127.0.0.1:0")
        store_host = ctx.store_host
        msgs: list[MessageInner] = []
        for flag, body, prop_text in records:
            props = decode_properties(prop_text)
            props.update(batch_props)
            if props.get(Prop.DELAY, "0") not in ("0", ""):
                raise SendReject(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot have a delay level")
            if props.get(Prop.TRAN_MSG) == "true":
                raise SendReject(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
            msgs.append(_new_slotted(MessageInner, topic, queue_id, body, props, flag, sys_flag, born_ts, born_host,
                                     store_host, 0, 0))
        return msgs, queue_id

    # ----- response -----
    def _response(self, req: RemotingCommand, result: PutResult, queue_id: int,
                  first: MessageInner | None = None) -> RemotingCommand:
        status = result.status
        if status is PutStatus.PUT_OK:  # the common answer: built in one step (same fields as below)
            cfg = self.ctx.config
            ids = result.msg_ids
            resp = _new_command(RemotingCommand)
            resp.code = _SUCCESS
            resp.language = "JAVA"
            resp.version = CURRENT_VERSION
            resp.opaque = req.opaque
            resp.flag = FLAG_RESPONSE
            resp.remark = None
            resp.ext_fields = {"MSG_REGION": cfg.region_id, "TRACE_ON": "true" if cfg.trace_on else "false",
                               "msgId": ids[0] if len(ids) == 1 else ",".join(ids), "queueId": str(queue_id),
                               "queueOffset": str(result.queue_offset)}
            resp.body = None
            resp.serialize_type = req.serialize_type
            self.ctx.stats.on_put(result.msg_count or 1, result.wrote_bytes, first)
            return resp
        code, remark = _PUT_CODES.get(status, (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT"))
        resp = req.response(code, remark)
        ext = self._base_ext()
        if status in STORED_STATUSES:
            ext["msgId"] = ",".join(result.msg_ids)
            ext["queueId"] = str(queue_id)
            ext["queueOffset"] = str(result.queue_offset)
            self.ctx.stats.on_put(result.msg_count or 1, result.wrote_bytes, first)
        resp.ext_fields = ext
        return resp


def handlers(ctx: BrokerContext) -> dict[int, Any]:
    proc = SendProcessor(ctx)
    return {
        int(RequestCode.SEND_MESSAGE): proc.dispatch,
        int(RequestCode.SEND_MESSAGE_V2): proc.dispatch,
        int(RequestCode.SEND_BATCH_MESSAGE): proc.dispatch,
        int(RequestCode.SEND_REPLY_MESSAGE): proc.dispatch,
        int(RequestCode.SEND_REPLY_MESSAGE_V2): proc.dispatch,
    }
