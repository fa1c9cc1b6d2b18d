"""The `orbitmq` command line: shared runtime pieces used by every sub-command module.

Owns: the one-line error convention ("orbitmq: error: ..." + exit code), the event-loop runner (uvloop when
available), the server lifecycle (start in order, stop on SIGTERM/SIGINT in reverse) and table/JSON output
(rich tables on a terminal, plain aligned text otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import click
import orjson

from orbitmq.base.errors import ConfigError, StoreError

log = logging.getLogger("orbitmq.cli")

T = TypeVar("T")

EXIT_FAILURE = 1   # a request failed (broker error, unreachable server)
EXIT_STARTUP = 2   # a server could not start (bad config, port in use, unwritable store)


class CliError(click.ClickException):
    """Printed as one line `orbitmq: error: <message>` on stderr; never a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"orbitmq: error: {self.format_message()}", err=True)


def set_process_title(role: str, detail: str = "") -> None:
    """Name this process in `ps`/`top` after its role and instance (`orbitmq broker broker-a/0 :10911`), so the
    members of a local cluster can be told apart."""
    import setproctitle

    setproctitle.setproctitle(f"orbitmq {role} {detail}".rstrip())


def broker_title(broker_name: str, broker_id: int, port: int) -> str:
    """`broker-a/0 :10911`; a controller-mode broker (id -1 until the controller assigns one) is `broker-a :10911`."""
    return f"{broker_name}/{broker_id} :{port}" if broker_id >= 0 else f"{broker_name} :{port}"


def install_uvloop() -> bool:
    """Use uvloop's event loop policy when uvloop is installed; returns whether it is in use."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on a fresh (uv)loop; Ctrl-C ends a client command with exit 130."""
    install_uvloop()
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        raise SystemExit(130) from None


def one_line(exc: BaseException) -> str:
    """An exception as a single line of text (OSError: strerror and filename, not the repr)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


# ---- output --------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


class Output:
    """Tables for humans, JSON for machines. Rich on a terminal; plain aligned columns in pipes and files."""

    def __init__(self, json_mode: bool = False, *, force_plain: bool | None = None) -> None:
        from rich.console import Console

        self.json_mode = json_mode
        self.console = Console(highlight=False, soft_wrap=True)
        self.plain = (not self.console.is_terminal) if force_plain is None else force_plain

    def table(self, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
              *, footer: Sequence[Any] | None = None, numeric: Sequence[str] = ()) -> None:
        if self.json_mode:
            records = [dict(zip(columns, r, strict=False)) for r in rows]
            self.json({"title": title, "rows": records, "total": dict(zip(columns, footer, strict=False))}
                      if footer is not None else records)
            return
        str_rows = [[_cell(v) for v in r] for r in rows]
        foot = [_cell(v) for v in footer] if footer is not None else None
        if self.plain:
            self._plain_table(title, list(columns), str_rows, foot, set(numeric))
            return
        from rich.table import Table

        t = Table(title=title, show_footer=foot is not None)
        for i, col in enumerate(columns):
            t.add_column(col, justify="right" if col in numeric else "left",
                         footer=foot[i] if foot is not None else "")
        for r in str_rows:
            t.add_row(*r)
        self.console.print(t)

    @staticmethod
    def _plain_table(title: str | None, columns: list[str], rows: list[list[str]], footer: list[str] | None,
                     numeric: set[str]) -> None:
        body = rows + ([footer] if footer is not None else [])
        widths = [max([len(c)] + [len(r[i]) for r in body if i < len(r)]) for i, c in enumerate(columns)]

        def fmt(cells: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(cells):
                out.append(c.rjust(widths[i]) if columns[i] in numeric else c.ljust(widths[i]))
            return "  ".join(out).rstrip()

        if title:
            click.echo(f"# {title}")
        click.echo(fmt(columns))
        for r in rows:
            click.echo(fmt(r))
        if footer is not None:
            click.echo(fmt(footer))

    def kv(self, title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
        if self.json_mode:
            self.json({k: v for k, v in pairs})
            return
        self.table(title, ["key", "value"], [[k, v] for k, v in pairs])

    def json(self, obj: Any) -> None:
        click.echo(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode())

    def line(self, text: str) -> None:
        if self.plain or self.json_mode:
            click.echo(text)
        else:
            self.console.print(text)


# ---- server processes ----------------------------------------------------------------------------------
class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


STOP_TIMEOUT_S = 60.0


def startup_error(exc: BaseException) -> CliError:
    """Map a failure while starting a server to the one-line, exit-code-2 error."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, ConfigError | OSError | StoreError):
        return CliError(one_line(exc), EXIT_STARTUP)
    log.debug("startup failed", exc_info=exc)
    return CliError(f"{type(exc).__name__}: {one_line(exc)}", EXIT_STARTUP)


async def serve(services: Sequence[tuple[str, Service]], on_ready: Callable[[], None]) -> None:
    """Start services in order, call on_ready(), run until SIGTERM/SIGINT, then stop them in reverse order.

    A start failure stops what already started and raises CliError (exit 2). A second signal forces exit.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.error("second %s during shutdown: exiting without a clean stop", signal.Signals(signum).name)
            os._exit(EXIT_FAILURE)
        log.info("%s received: shutting down", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    started: list[tuple[str, Service]] = []
    try:
        try:
            for name, svc in services:
                await svc.start()
                started.append((name, svc))
        except BaseException as exc:
            await _stop_all(started)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
            raise startup_error(exc) from None
        on_ready()
        await stop.wait()
        failed = await _stop_all(started)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if failed:
        raise CliError(f"clean shutdown failed for {', '.join(failed)} (see log)", EXIT_FAILURE)
    log.info("shutdown complete")


async def _stop_all(started: list[tuple[str, Service]]) -> list[str]:
    failed: list[str] = []
    for name, svc in reversed(started):
        try:
            await asyncio.wait_for(svc.stop(), STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - keep stopping the others, report at the end
            log.exception("stopping %s failed", name)
            failed.append(name)
    return failed
