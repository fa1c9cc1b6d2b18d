"""One TCP connection speaking the remoting protocol, shared by server and client sides.

An asyncio.Protocol (no streams): frames are decoded in data_received, responses resolve futures in a
per-connection opaque -> Future table, requests go to the handler. Malformed input closes this connection
only. Outgoing frames are coalesced: send() queues, one transport.write per event-loop iteration (or per
data_received) carries them all. Reading pauses while the transport's write buffer is above its high-water mark,
and while a shared InputBudget (remoting/limits.py) says unfinished frames hold too many bytes. A frame begun must
be complete within `frame_deadline_ms` (a peer trickling bytes is closed).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from orbitmq.base.errors import ProtocolError, RemotingConnectError, RemotingTimeoutError
from orbitmq.protocol import FLAG_ONEWAY, FrameDecoder, RemotingCommand, ResponseCode
from orbitmq.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    EncodedResponse,
    encode_frame_general,
    encode_json_frame,
)
from orbitmq.remoting.limits import LIMIT_FRAME_DEADLINE, InputBudget

log = logging.getLogger("orbitmq.remoting")
_encode_json_frame = encode_json_frame


class Deferred:
    """What a handler returns when it answers later itself, through Connection.reply (e.g. from a store
    callback): no task, no coroutine. There is one instance, DEFERRED."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = Deferred()
HandlerResult = RemotingCommand | None | Deferred | Awaitable[RemotingCommand | None]
Handler = Callable[["Connection", RemotingCommand], HandlerResult]

DEFAULT_IDLE_TIMEOUT_S = 120.0
DEFAULT_HIGH_WATER = 4 * 1024 * 1024
DEFAULT_LOW_WATER = 1024 * 1024
CLOSE_GRACE_S = 5.0


def _addr(info: Any) -> str:
    if isinstance(info, tuple) and len(info) >= 2:
        return f"{info[0]}:{info[1]}"
    return str(info) if info else ""


def error_remark(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


class Connection(asyncio.Protocol):
    """Both directions on one socket: send()/invoke() out, handler for incoming requests."""

    def __init__(
        self,
        handler: Handler | None,
        *,
        name: str = "conn",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        high_water: int = DEFAULT_HIGH_WATER,
        low_water: int = DEFAULT_LOW_WATER,
        on_open: Callable[[Connection], bool | None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
        frame_deadline_ms: int = 0,
        input_budget: InputBudget | None = None,
        on_limit: Callable[[str], None] | None = None,
    ) -> None:
        self._handler = handler
        # the handler's form for the requests of one read (Router.many), when it has one: several in one call
        self._many: Callable[[Connection, list[RemotingCommand]], list[Any]] | None = getattr(handler, "many", None)
        self.name = name
        self._decoder = FrameDecoder(max_frame_size)
        self._idle_timeout_s = idle_timeout_s
        self._high_water = high_water
        self._low_water = low_water
        self._on_open = on_open
        self._close_callbacks: list[Callable[[Connection], None]] = [on_close] if on_close else []
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # invoke()'s requests waiting for an answer: opaque -> (deadline on the loop's clock, future, code, timeout)
        self._deadlines: dict[int, tuple[float, asyncio.Future[RemotingCommand], int, int]] = {}
        self._deadline_handle: asyncio.TimerHandle | None = None  # fires at the earliest deadline (_expire)
        self._deadline_at = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wbuf: list[bytes] = []  # frames queued by send(), written together by _flush_writes
        self._wbuf_size = 0
        self._flush_scheduled = False
        self._last_activity = 0.0
        self._idle_handle: asyncio.TimerHandle | None = None
        self._closed_fut: asyncio.Future[None] = self._loop.create_future()
        self._frame_deadline_s = frame_deadline_ms / 1000.0 if frame_deadline_ms > 0 else 0.0
        self._frame_handle: asyncio.TimerHandle | None = None  # runs while an unfinished frame is buffered
        self._budget = input_budget
        self._held_reported = 0  # the unfinished bytes last reported to the budget
        self._on_limit = on_limit
        self._budget_paused = False
        self.closed = True  # until connection_made
        self.reading_paused = False  # write back-pressure (pause_writing); the budget pause is separate
        self.remote_addr = ""
        self.local_addr = ""
        self.attrs: dict[str, Any] = {}

    # ---- asyncio.Protocol callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses but implement the same interface
        self._transport = transport  # type: ignore[assignment]
        self.closed = False
        self.remote_addr = _addr(transport.get_extra_info("peername"))
        self.local_addr = _addr(transport.get_extra_info("sockname"))
        transport.set_write_buffer_limits(high=self._high_water, low=self._low_water)
        self._last_activity = self._loop.time()
        if self._idle_timeout_s and self._idle_timeout_s > 0:
            self._idle_handle = self._loop.call_later(self._idle_timeout_s, self._check_idle)
        if self._on_open is not None and self._on_open(self) is False:
            self.abort()  # refused (e.g. a connection cap): closed at once, nothing read

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        error: ProtocolError | None = None
        try:
            cmds = self._decoder.feed(data)
        except ProtocolError as e:
            error = e
            cmds = getattr(e, "frames", [])
        # responses produced synchronously for this chunk leave in one write at the end: send() need not
        # schedule a flush callback meanwhile
        self._flush_scheduled = True
        try:
            many = self._many
            if many is not None and len(cmds) > 1 and not any(cmd.flag & 1 for cmd in cmds):
                deliver = self._deliver
                wbuf = self._wbuf
                for cmd, result in zip(cmds, many(self, cmds), strict=True):
                    if type(result) is EncodedResponse and not cmd.flag & FLAG_ONEWAY and not self.closed:
                        wbuf.append(result.frame)  # send_frame, inline: the read's answers leave in one write below
                        self._wbuf_size += len(result.frame)
                    else:
                        deliver(cmd, result)
            else:
                for cmd in cmds:
                    if cmd.flag & 1:
                        self._on_response(cmd)
                    else:
                        self._on_request(cmd)
        finally:
            if self._wbuf:
                self._flush_writes(False)  # activity already stamped above
            else:
                self._flush_scheduled = False
        if error is None and not self.closed:
            held = len(self._decoder._buf)
            # nothing unfinished now nor before: no deadline to disarm, no budget change (skips a no-op update)
            if held or self._frame_handle is not None or self._held_reported:
                self._track_unfinished(held, bool(cmds))
        if error is not None:
            log.warning("%s: malformed frame from %s, closing: %s", self.name, self.remote_addr, error)
            self.close()

    def _track_unfinished(self, held: int, frame_done: bool) -> None:
        """After a read: (re)arm the frame deadline when a new frame has begun, disarm it when none is open;
        report the unfinished bytes to the shared budget."""
        if self._frame_deadline_s:
            handle = self._frame_handle
            if not held:
                if handle is not None:
                    handle.cancel()
                    self._frame_handle = None
            elif handle is None or frame_done:
                if handle is not None:
                    handle.cancel()
                self._frame_handle = self._loop.call_later(self._frame_deadline_s, self._frame_overdue)
        if self._budget is not None:
            self._budget.update(self, held)
            self._held_reported = held

    def _frame_overdue(self) -> None:
        self._frame_handle = None
        if self.closed:
            return
        log.warning("%s: closing %s: a frame begun %.0f ms ago is still incomplete (%d bytes)", self.name,
                    self.remote_addr, self._frame_deadline_s * 1000, self._decoder.buffered)
        if self._on_limit is not None:
            self._on_limit(LIMIT_FRAME_DEADLINE)
        self.abort()

    def pause_input(self) -> None:
        """InputBudget: stop reading (the write back-pressure pause is tracked apart)."""
        if not self._budget_paused:
            self._budget_paused = True
            if not self.reading_paused:
                self._pause_transport()

    def resume_input(self) -> None:
        if self._budget_paused:
            self._budget_paused = False
            if not self.reading_paused:
                self._resume_transport()

    def _pause_transport(self) -> None:
        if self._transport is not None and not self.closed:
            try:
                self._transport.pause_reading()
            except RuntimeError:
                pass

    def _resume_transport(self) -> None:
        if self._transport is not None and not self.closed:
            try:
                self._transport.resume_reading()
            except RuntimeError:
                pass

    @property
    def input_paused(self) -> bool:
        return self._budget_paused

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def pause_writing(self) -> None:
        # back-pressure: stop reading new requests from a peer that does not drain its responses
        if self._transport is not None and not self.reading_paused:
            self.reading_paused = True
            if not self._budget_paused:
                self._pause_transport()

    def resume_writing(self) -> None:
        if self._transport is not None and self.reading_paused:
            self.reading_paused = False
            if not self._budget_paused:
                self._resume_transport()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wbuf.clear()
        self._wbuf_size = 0
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        if self._frame_handle is not None:
            self._frame_handle.cancel()
            self._frame_handle = None
        if self._budget is not None:
            self._budget.update(self, 0)
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
            self._deadline_handle = None
        self._deadlines.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectError(f"connection to {self.remote_addr} closed"))
        for task in list(self._tasks):
            task.cancel()
        for cb in self._close_callbacks:
            try:
                cb(self)
            except Exception:
                log.exception("%s: close callback failed", self.name)
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)

    # ---- incoming -------------------------------------------------------------------------------
    def _on_response(self, cmd: RemotingCommand) -> None:
        fut = self._pending.pop(cmd.opaque, None)
        if fut is None or fut.done():
            log.debug("%s: dropping unmatched response opaque=%d from %s", self.name, cmd.opaque,
                      self.remote_addr)
            return
        fut.set_result(cmd)

    def _on_request(self, cmd: RemotingCommand) -> None:
        handler = self._handler
        if handler is None:
            if not cmd.flag & FLAG_ONEWAY:
                self.send(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                       f" request type {cmd.code} not supported"))
            return
        try:
            result = handler(self, cmd)
        except Exception as e:
            self._reply_error(cmd, e)
            return
        if type(result) is RemotingCommand:  # the common answer, checked first
            if not cmd.flag & FLAG_ONEWAY:
                self.send(result)
            return
        self._deliver(cmd, result)

    def _deliver(self, cmd: RemotingCommand, result: Any) -> None:
        """Act on what the handler returned for request `cmd` (an exception instance: it raised that)."""
        if result is None or result is DEFERRED:
            return
        if type(result) is EncodedResponse:  # the send handler's PUT_OK, encoded from its template
            if not cmd.flag & FLAG_ONEWAY:
                self.send_frame(result.frame)
        elif isinstance(result, RemotingCommand):
            if not cmd.flag & FLAG_ONEWAY:
                self.send(result)
        elif inspect.isawaitable(result):
            task = self._loop.create_task(result)  # type: ignore[arg-type]
            self._tasks.add(task)
            task.add_done_callback(partial(self._handler_done, cmd))
        elif isinstance(result, Exception):
            self._reply_error(cmd, result)
        else:
            self._reply_error(cmd, TypeError(f"handler returned {type(result).__name__}"))

    def _handler_done(self, cmd: RemotingCommand, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._reply_error(cmd, exc)
            return
        result = task.result()
        if result is not None and not cmd.flag & FLAG_ONEWAY:
            self.send(result)

    def reply(self, cmd: RemotingCommand, result: RemotingCommand | None) -> None:
        """The answer to `cmd` from a handler that returned DEFERRED (nothing goes out for a oneway request)."""
        if result is not None and not cmd.flag & FLAG_ONEWAY:
            self.send(result)

    def reply_error(self, cmd: RemotingCommand, exc: BaseException) -> None:
        """SYSTEM_ERROR for `cmd`, whose handler (or its DEFERRED continuation) failed with `exc`."""
        self._reply_error(cmd, exc)

    def _reply_error(self, cmd: RemotingCommand, exc: BaseException) -> None:
        log.warning("%s: handler failed for code %d from %s: %r", self.name, cmd.code, self.remote_addr, exc)
        if not cmd.flag & FLAG_ONEWAY:
            self.send(cmd.response(ResponseCode.SYSTEM_ERROR, error_remark(exc)))

    def _check_idle(self) -> None:
        self._idle_handle = None
        if self.closed:
            return
        idle = self._loop.time() - self._last_activity
        if idle >= self._idle_timeout_s:
            log.info("%s: closing idle connection %s after %.0f s", self.name, self.remote_addr, idle)
            self.close()
        else:
            self._idle_handle = self._loop.call_later(self._idle_timeout_s - idle, self._check_idle)

    # ---- outgoing -------------------------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        """Write one frame (a response or any command). Silently dropped if the connection is closed."""
        if self.closed:
            log.debug("%s: drop frame code=%d to closed %s", self.name, cmd.code, self.remote_addr)
            return
        # the common JSON command in one native call (protocol/frame.py encode_json_frame), else the Python encoder
        frame = _encode_json_frame(cmd) if _encode_json_frame is not None else None
        if frame is None:
            frame = encode_frame_general(cmd)
        self.send_frame(frame)

    def send_frame(self, frame: bytes) -> None:
        """Queue an encoded frame; it leaves with the others of this turn (or now, past the high-water mark)."""
        if self.closed:
            return
        self._wbuf.append(frame)
        self._wbuf_size += len(frame)
        if self._wbuf_size >= self._high_water:
            # never hold more than a high-water mark ourselves: the transport's buffer limits (and so
            # pause_writing back-pressure) see the bytes now
            self._flush_writes()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_writes)

    def _flush_writes(self, stamp: bool = True) -> None:
        """Hand every queued frame to the transport in one write (one syscall when the socket is writable);
        `stamp`: record the write as activity (data_received has just done so)."""
        self._flush_scheduled = False
        buf = self._wbuf
        if not buf:
            return
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        buf.clear()
        self._wbuf_size = 0
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if stamp:
            self._last_activity = self._loop.time()

    async def invoke(self, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        """Send a request on this connection and wait for its response."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
        opaque = cmd.opaque
        loop = self._loop
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        # its deadline, kept beside the others: one timer per connection for the earliest (RocketMQ's clients scan
        # their response table the same way) instead of a timer armed and cancelled per request
        deadline = loop.time() + timeout_ms / 1000.0
        self._deadlines[opaque] = (deadline, fut, cmd.code, timeout_ms)
        if self._deadline_handle is None or deadline < self._deadline_at:
            self._arm_deadline(deadline)
        try:
            self.send(cmd)
            return await fut
        finally:
            if self._pending.get(opaque) is fut:
                del self._pending[opaque]
            entry = self._deadlines.get(opaque)
            if entry is not None and entry[1] is fut:
                del self._deadlines[opaque]

    def _arm_deadline(self, at: float) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        self._deadline_at = at
        self._deadline_handle = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        """The earliest deadline came: every request past its own fails with RemotingTimeoutError; the timer is
        armed again for the earliest one left."""
        self._deadline_handle = None
        now = self._loop.time()
        deadlines = self._deadlines
        overdue = [k for k, e in deadlines.items() if e[0] <= now]
        for opaque in overdue:
            _, fut, code, timeout_ms = deadlines.pop(opaque)
            if not fut.done():
                fut.set_exception(RemotingTimeoutError(
                    f"wait response on {self.remote_addr} timeout, {int(timeout_ms)} ms, request code {code}"))
        if deadlines and not self.closed:
            self._arm_deadline(min(e[0] for e in deadlines.values()))

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
        cmd.flag |= FLAG_ONEWAY
        self.send(cmd)

    # ---- lifecycle ------------------------------------------------------------------------------
    def add_close_callback(self, cb: Callable[[Connection], None]) -> None:
        self._close_callbacks.append(cb)

    def close(self) -> None:
        """Graceful close: buffered frames are flushed first (aborted if the peer does not drain them)."""
        if self.closed:
            return
        self.closed = True
        if self._transport is not None and not self._transport.is_closing():
            self._flush_writes()  # frames queued before the close go out first
            self._transport.close()
            if self._transport.get_write_buffer_size():
                self._loop.call_later(CLOSE_GRACE_S, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if not self._closed_fut.done() and self._transport is not None:
            self._transport.abort()

    def abort(self) -> None:
        """Immediate close, buffered data dropped."""
        self.closed = True
        self._wbuf.clear()
        self._wbuf_size = 0
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_fut)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Connection {self.name} {self.local_addr}->{self.remote_addr} {state}>"
