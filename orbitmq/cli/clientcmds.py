"""`orbitmq produce` and `orbitmq consume`: send and print messages with the OrbitMQ SDK (orbitmq.client).

produce sends --body N times or one message per stdin line; consume prints messages as a push-consumer group
member and stops after -c messages (or on Ctrl-C / --idle-timeout), committing exactly what it printed. -n is the
name server, as in every command. Both first ask the name server for the topic's route (a few seconds at most),
so an unreachable name server or an unknown topic is one line and exit 1 instead of a silent wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import click
import orjson

from orbitmq.base.errors import OrbitMQError, RemotingError
from orbitmq.cli import EXIT_FAILURE, CliError, one_line, run_async
from orbitmq.cli.admin_common import code_name, fmt_ms, namesrv_option
from orbitmq.client.errors import ResponseError
from orbitmq.model import Message, MessageExt
from orbitmq.protocol import ResponseCode

PREFLIGHT_TIMEOUT_MS = 3000
EXIT_INTERRUPTED = 130


def response_error(exc: Exception) -> CliError:
    """SDK ResponseError -> `CODE_NAME: remark`; other SDK errors -> their text."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code >= 0 and hasattr(exc, "remark"):
        remark = " ".join(str(getattr(exc, "remark", "")).split()) or "(no remark)"
        return CliError(f"{code_name(code)}: {remark}", EXIT_FAILURE)
    return CliError(" ".join(str(exc).split()) or type(exc).__name__, EXIT_FAILURE)


async def preflight(namesrv: str, topic: str, need_route: bool) -> None:
    """Ask the name servers for the topic's route within a few seconds: an unreachable name server (or, when
    `need_route`, a topic without a route) raises the one-line CliError."""
    from orbitmq.client import Admin

    admin = Admin(namesrv, timeout_ms=PREFLIGHT_TIMEOUT_MS)
    try:
        await admin.start()
        route = await admin.topic_route(topic)
    except RemotingError as exc:
        raise CliError(f"name server unreachable ({namesrv}): {one_line(exc)}", EXIT_FAILURE) from None
    except ResponseError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST and not need_route:
            return
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise CliError(f"no route for topic {topic} at name server {namesrv} (TOPIC_NOT_EXIST: create it "
                           "with updateTopic)", EXIT_FAILURE) from None
        raise response_error(exc) from None
    except OrbitMQError as exc:
        raise CliError(one_line(exc), EXIT_FAILURE) from None
    finally:
        await admin.close()
    if need_route and not route.queue_datas:
        raise CliError(f"topic {topic} has no queue in its route at name server {namesrv}", EXIT_FAILURE)


def _parse_properties(items: tuple[str, ...]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--property")
        props[key] = value
    return props


def _bodies(body: str | None, count: int) -> Any:
    """(index, bytes) pairs: --body repeated `count` times ('{i}' replaced by the index), else stdin lines."""
    if body is not None:
        for i in range(count):
            yield i, body.replace("{i}", str(i)).encode()
        return
    for i, line in enumerate(sys.stdin):
        if count and i >= count:
            return
        yield i, line.rstrip("\n").encode()


@click.command("produce")
@click.option("-t", "--topic", required=True)
@click.option("--tag", default=None, help="message tag")
@click.option("--key", "keys", default=None, help="message key(s), space separated")
@click.option("-c", "--count", type=int, default=None,
              help="messages to send (with --body: default 1; from stdin: at most this many lines)")
@click.option("--body", default=None, help="message body ('{i}' becomes the message index); default: stdin lines")
@click.option("-p", "--property", "properties", multiple=True, help="user property KEY=VALUE (repeatable)")
@click.option("--delay-level", type=int, default=0, help="delay level 1..18 (1s 5s 10s 30s 1m ...)")
@click.option("-g", "--group", default="orbitmq-cli-producer", show_default=True, help="producer group")
@namesrv_option
@click.option("-q", "--quiet", is_flag=True, help="print only the summary line")
@click.option("--json", "json_mode", is_flag=True, help="one JSON object per sent message")
def produce_command(topic: str, tag: str | None, keys: str | None, count: int | None, body: str | None,
                    properties: tuple[str, ...], delay_level: int, group: str, namesrv: str, quiet: bool,
                    json_mode: bool) -> None:
    """Send messages to a topic."""
    props = _parse_properties(properties)
    if body is None and sys.stdin.isatty():
        click.echo("reading message bodies from stdin, one per line (Ctrl-D to end)", err=True)
    n = count if count is not None else (1 if body is not None else 0)
    run_async(_produce(topic, tag, keys, n, body, props, delay_level, group, namesrv, quiet, json_mode))


async def _produce(topic: str, tag: str | None, keys: str | None, count: int, body: str | None,
                   props: dict[str, str], delay_level: int, group: str, namesrv: str, quiet: bool,
                   json_mode: bool) -> None:
    from orbitmq.client import Producer

    await preflight(namesrv, topic, need_route=False)
    producer = Producer(group, namesrv=namesrv)
    sent = 0
    t0 = time.perf_counter()
    try:
        await producer.start()
        for i, payload in _bodies(body, count):
            msg = Message(topic, payload, dict(props))
            if tag:
                msg.tags = tag
            if keys:
                msg.keys = keys
            if delay_level:
                msg.delay_level = delay_level
            result = await producer.send(msg)
            sent += 1
            if json_mode:
                click.echo(orjson.dumps({
                    "index": i, "status": result.status.value, "msgId": result.msg_id,
                    "offsetMsgId": result.offset_msg_id, "brokerName": result.message_queue.broker_name,
                    "queueId": result.message_queue.queue_id, "queueOffset": result.queue_offset}).decode())
            elif not quiet:
                mq = result.message_queue
                click.echo(f"{result.status.value} msgId={result.msg_id} offsetMsgId={result.offset_msg_id} "
                           f"queue={mq.broker_name}/{mq.queue_id} offset={result.queue_offset}")
    except (CliError, BrokenPipeError):
        raise
    except Exception as exc:  # noqa: BLE001 - SDK errors become the one-line error
        if sent:
            click.echo(f"sent {sent} message(s) before the error", err=True)
        raise response_error(exc) from None
    finally:
        await producer.shutdown()
    elapsed = time.perf_counter() - t0
    if not json_mode:
        rate = sent / elapsed if elapsed > 0 else 0.0
        click.echo(f"sent {sent} message(s) to {topic} in {elapsed:.2f} s ({rate:,.0f} msgs/s)", err=not quiet)


def format_message(m: MessageExt, mode: str) -> str:
    if mode == "json":
        return orjson.dumps({
            "topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "tags": m.tags,
            "keys": m.keys, "queueId": m.queue_id, "queueOffset": m.queue_offset, "storeHost": m.store_host,
            "storeTimestamp": m.store_timestamp, "bornTimestamp": m.born_timestamp,
            "reconsumeTimes": m.reconsume_times, "properties": m.properties,
            "body": m.body.decode("utf-8", errors="replace")}).decode()
    text = m.body.decode("utf-8", errors="replace")
    if mode == "body":
        return text
    head = (f"[{m.topic} q{m.queue_id}@{m.queue_offset} {fmt_ms(m.store_timestamp)}] msgId={m.msg_id}"
            + (f" tags={m.tags}" if m.tags else "") + (f" keys={' '.join(m.keys)}" if m.keys else ""))
    return f"{head}\n{text}"


@click.command("consume")
@click.option("-t", "--topic", required=True)
@click.option("-g", "--group", default=None, help="consumer group (default: a new group per run)")
@click.option("-e", "--expression", default="*", show_default=True, help="tag expression, e.g. 'TagA || TagB'")
@click.option("-c", "--count", type=int, default=0, help="stop after this many messages (0: until Ctrl-C)")
@click.option("--from-beginning", is_flag=True,
              help="a group with no committed offset starts at the oldest message (else at the newest)")
@click.option("--idle-timeout", type=float, default=0.0, help="give up after this many seconds without a message")
@click.option("--broadcast", is_flag=True, help="BROADCASTING model (offsets kept locally)")
@namesrv_option
@click.option("--format", "fmt", type=click.Choice(["text", "body", "json"]), default="text", show_default=True,
              help="text: header + body; body: bodies only; json: one object per line")
def consume_command(topic: str, group: str | None, expression: str, count: int, from_beginning: bool,
                    idle_timeout: float, broadcast: bool, namesrv: str, fmt: str) -> None:
    """Print messages of a topic as a push-consumer group member."""
    group = group or f"orbitmq-cli-{os.getpid()}-{int(time.time())}"
    if sys.stderr.isatty():
        click.echo(f"consuming {topic} as group {group} (Ctrl-C to stop)", err=True)
    got, closed, why = run_async(_consume(topic, group, expression, count, from_beginning, idle_timeout, broadcast,
                                          namesrv, fmt))
    if closed:
        raise BrokenPipeError
    if why == "interrupted":
        click.echo(f"interrupted after {got} message(s)" + (f" of {count}" if count else ""), err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if count and got < count:
        raise CliError(f"received {got} of {count} message(s) before the idle timeout ({idle_timeout:g} s without "
                       "a message)", EXIT_FAILURE)
    if why == "idle":
        click.echo(f"idle timeout: {idle_timeout:g} s without a message ({got} received)", err=True)


async def _consume(topic: str, group: str, expression: str, count: int, from_beginning: bool,
                   idle_timeout: float, broadcast: bool, namesrv: str, fmt: str) -> tuple[int, bool, str]:
    """(messages printed, stdout closed, why it stopped: "count", "interrupted", "idle" or "closed")."""
    from orbitmq.client import ConsumeResult, PushConsumer

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    never = asyncio.Event()
    state: dict[str, Any] = {"printed": 0, "last": time.monotonic(), "closed": False, "why": "count"}

    async def listener(msgs: list[MessageExt]) -> ConsumeResult:
        for m in msgs:
            if state["closed"] or (count and state["printed"] >= count):
                # Past the limit (or stdout closed): hold the message until shutdown cancels us, so its offset
                # is not committed.
                await never.wait()
            try:
                click.echo(format_message(m, fmt))
            except BrokenPipeError:  # `orbitmq consume ... | head`
                state["closed"] = True
                done.set()
                await never.wait()
            state["printed"] += 1
            state["last"] = time.monotonic()
            if count and state["printed"] >= count:
                done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        group, namesrv=namesrv, message_model="BROADCASTING" if broadcast else "CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET" if from_beginning else "CONSUME_FROM_LAST_OFFSET",
        consume_concurrency=1, consume_batch_size=1, listener_in_thread=False,
    )
    consumer.subscribe(topic, expression, listener)

    def on_signal() -> None:
        state["why"] = "interrupted"
        done.set()

    await preflight(namesrv, topic, need_route=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        try:
            await consumer.start()
        except Exception as exc:  # noqa: BLE001
            raise response_error(exc) from None
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), 0.5)
            except TimeoutError:
                if idle_timeout and time.monotonic() - state["last"] > idle_timeout:
                    state["why"] = "idle"
                    break
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        # 0: the listener holds what is past the count (or after a closed stdout) until shutdown cancels it,
        # uncommitted; what it printed was committed as it returned
        await consumer.shutdown(await_terminate_ms=0)
    return state["printed"], state["closed"], "closed" if state["closed"] else state["why"]
