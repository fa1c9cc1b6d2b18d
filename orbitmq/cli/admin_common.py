"""Plumbing of the mqadmin-style commands: common options (-n/--namesrv, --json, --timeout), running a command's
action against the SDK's admin client (orbitmq.client.Admin) with its errors turned into the one-line
`orbitmq: error: ...` (exit 1), formatting helpers and progress bars.

The commands only parse options and render; every request lives in orbitmq.client.admin*.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from orbitmq.base.errors import OrbitMQError, RemotingError
from orbitmq.cli import EXIT_FAILURE, CliError, one_line, run_async
from orbitmq.client.admin import Admin
from orbitmq.client.admin_base import LONG_MAX
from orbitmq.client.errors import ResponseError
from orbitmq.model.message import MessageExt
from orbitmq.protocol import RemotingCommand, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo, TopicRouteData

DEFAULT_NAMESRV = "127.0.0.1:9876"
TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
__all__ = ["LONG_MAX", "DEFAULT_NAMESRV", "AdminSession", "BrokerError", "code_name", "common_options",
           "namesrv_option", "run_admin", "cli_error", "fmt_ms", "parse_timestamp", "message_detail",
           "message_summary", "progress"]


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"


class BrokerError(CliError):
    """A server answered with a non-success code."""

    def __init__(self, code: int, remark: str | None, addr: str) -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        super().__init__(f"{code_name(code)}: {' '.join(self.remark.split()) or '(no remark)'}", EXIT_FAILURE)


def cli_error(exc: BaseException) -> CliError:
    """An SDK/remoting exception as the CLI's one-line error."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, ResponseError):
        return BrokerError(exc.code, exc.remark, exc.addr or "")
    if isinstance(exc, RemotingError):
        return CliError(one_line(exc), EXIT_FAILURE)
    return CliError(one_line(exc), EXIT_FAILURE)


ACCESS_KEY_ENV = "ORBITMQ_ACCESS_KEY"
SECRET_KEY_ENV = "ORBITMQ_SECRET_KEY"
CLUSTER_SECRET_ENV = "ORBITMQ_CLUSTER_SECRET"  # name-server admin writes when the cluster has a clusterSecret


class AdminSession:
    """The CLI's handle on one SDK Admin (`.admin`); started on first use. `call` is a raw request whose
    failures are CliError / BrokerError (used by the controller commands and bench drivers)."""

    def __init__(self, namesrv: str, timeout_ms: int = 5000) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise CliError("no name server address (use -n ip:port or set NAMESRV_ADDR)")
        self.timeout_ms = timeout_ms
        # an ACL-enabled broker (docs/design/security.md): requests signed with these keys when both are set
        access_key, secret_key = os.environ.get(ACCESS_KEY_ENV) or None, os.environ.get(SECRET_KEY_ENV) or None
        if bool(access_key) != bool(secret_key):
            raise CliError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} (or neither)")
        self.admin = Admin(";".join(self.namesrv_addrs), timeout_ms=timeout_ms, access_key=access_key,
                           secret_key=secret_key, cluster_secret=os.environ.get(CLUSTER_SECRET_ENV) or None)

    async def start(self) -> Admin:
        await self.admin.start()
        return self.admin

    async def close(self) -> None:
        await self.admin.close()

    async def call(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                   ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        await self.admin.start()
        try:
            return await self.admin.request(addr, code, ext, body, ok)
        except OrbitMQError as exc:
            raise cli_error(exc) from None

    async def route(self, topic: str) -> TopicRouteData:
        await self.admin.start()
        try:
            return await self.admin.topic_route(topic)
        except OrbitMQError as exc:
            raise cli_error(exc) from None

    async def cluster_info(self) -> ClusterInfo:
        await self.admin.start()
        try:
            return await self.admin.cluster_info()
        except OrbitMQError as exc:
            raise cli_error(exc) from None


def namesrv_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """-n/--namesrv: the name server list, in every command."""
    return click.option("-n", "--namesrv", envvar="NAMESRV_ADDR", default=DEFAULT_NAMESRV, show_default=True,
                        help="name server list 'ip:port;ip:port' (env NAMESRV_ADDR)")(fn)


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--timeout", "timeout_ms", type=int, default=5000, show_default=True,
                      help="request timeout (ms)")(fn)
    fn = click.option("--json", "json_mode", is_flag=True, help="machine-readable JSON output")(fn)
    return namesrv_option(fn)


def run_admin(namesrv: str, timeout_ms: int, action: Callable[[AdminSession], Awaitable[None]]) -> None:
    """Run `action(session)`; SDK errors become the one-line error, exit 1."""

    async def go() -> None:
        session = AdminSession(namesrv, timeout_ms)
        try:
            await session.start()
            await action(session)
        except OrbitMQError as exc:
            raise cli_error(exc) from None
        finally:
            await session.close()

    run_async(go())


# ---- formatting ----------------------------------------------------------------------------------------
def fmt_ms(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def body_text(body: bytes, limit: int | None = 512) -> str:
    text = body.decode("utf-8", errors="replace")
    if limit is not None and len(text) > limit:
        return text[:limit] + f"... ({len(body)} bytes)"
    return text


def message_summary(m: MessageExt) -> dict[str, Any]:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "tags": m.tags,
            "keys": " ".join(m.keys) or None,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "storeTime": fmt_ms(m.store_timestamp),
            "bodySize": len(m.body)}


def message_detail(m: MessageExt, body_limit: int | None = 4096) -> list[tuple[str, Any]]:
    return [
        ("msgId", m.msg_id), ("offsetMsgId", m.offset_msg_id), ("topic", m.topic), ("tags", m.tags),
        ("keys", " ".join(m.keys) or None), ("queueId", m.queue_id), ("queueOffset", m.queue_offset),
        ("commitLogOffset", m.phys_offset), ("reconsumeTimes", m.reconsume_times),
        ("bornTimestamp", fmt_ms(m.born_timestamp)), ("storeTimestamp", fmt_ms(m.store_timestamp)),
        ("bornHost", m.born_host), ("storeHost", m.store_host), ("sysFlag", m.sys_flag),
        ("properties", " ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))),
        ("bodyCRC", m.body_crc), ("body", body_text(m.body, body_limit)),
    ]


def parse_timestamp(text: str, now_ms: int | None = None) -> int:
    """'now', 'latest' (-1: the queue ends), epoch milliseconds, ISO-8601 ('2024-05-01T12:00:00', '...Z',
    '+02:00') or mqadmin's 'yyyy-MM-dd#HH:mm:ss:SSS'. Naive times are local time. Raises click.BadParameter."""
    s = text.strip()
    if s.lower() in ("latest", "-1"):
        return -1
    if s.lower() == "now":
        return now_ms if now_ms is not None else int(datetime.now().timestamp() * 1000)
    if s.isdigit():
        return int(s)
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})", s)
    if m:
        s = f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}.{m.group(5)}"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected 'now', 'latest', epoch milliseconds or an ISO time") from None
    return int(dt.timestamp() * 1000)


def check_topic(topic: str, hint: str = "-t") -> str:
    if not TOPIC_RE.match(topic):
        raise click.BadParameter(f"{topic!r}: 1-127 characters of a-z A-Z 0-9 _ - % |", param_hint=hint)
    return topic


@contextmanager
def progress(description: str, total: int | None, enabled: bool = True) -> Iterator[Callable[..., None]]:
    """A transient rich progress bar on stderr while long work runs (only when stderr is a terminal and
    `enabled`); yields `update(advance=1, description=None)`."""
    if not enabled or not sys.stderr.isatty():
        yield lambda advance=1, description=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def update(advance: int = 1, description: str | None = None) -> None:
            bar.update(task, advance=advance, **({"description": description} if description else {}))

        yield update
