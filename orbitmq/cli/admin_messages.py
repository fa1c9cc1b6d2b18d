"""mqadmin commands for messages: queryMsgByKey, queryMsgById (either id kind), queryMsgByUniqueKey,
queryMsgByOffset, sendMessage, consumeMessage and printMsg (queue reads never commit an offset)."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli import CliError, Output
from orbitmq.cli.admin_common import (
    AdminSession,
    body_text,
    check_topic,
    common_options,
    message_detail,
    message_summary,
    parse_timestamp,
    progress,
    run_admin,
)
from orbitmq.model import Message, MessageExt, MessageQueue

SUMMARY_NUMERIC = ("queueId", "queueOffset", "bodySize")


def _render_messages(out: Output, title: str, msgs: list[MessageExt], with_body: bool, body_limit: int) -> None:
    if out.json_mode:
        out.json([dict(message_summary(m), body=body_text(m.body, None)) if with_body else message_summary(m)
                  for m in msgs])
        return
    if not msgs:
        out.line(f"{title}: no message")
        return
    columns = list(message_summary(msgs[0]).keys()) + (["body"] if with_body else [])
    rows = [list(message_summary(m).values()) + ([body_text(m.body, body_limit)] if with_body else [])
            for m in msgs]
    out.table(title, columns, rows, numeric=SUMMARY_NUMERIC)


@click.command("queryMsgByKey")
@click.option("-t", "--topic", required=True)
@click.option("-k", "--key", required=True)
@click.option("--max", "max_num", type=int, default=64, show_default=True)
@common_options
def query_msg_by_key(topic: str, key: str, max_num: int, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Messages of a topic carrying a key (IndexFile lookup on every broker)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        msgs = await s.admin.query_msg_by_key(topic, key, max_num, begin_ms=0)
        if not msgs:
            raise CliError(f"no message with key {key!r} in topic {topic!r}")
        _render_messages(out, f"messages of {topic} with key {key}", msgs, False, 0)

    run_admin(namesrv, timeout_ms, action)


@click.command("queryMsgById")
@click.option("-i", "--msg-id", required=True,
              help="the msgId producers print (UNIQ_KEY) or the offset message id; several, comma separated")
@click.option("-t", "--topic", default=None, help="topic of a unique id (default: search every topic's index)")
@click.option("--body-limit", type=int, default=4096, show_default=True, help="characters of body to show")
@click.option("-g", "--consumer-group", default=None, help="with -d: have this group's client consume it directly")
@click.option("-d", "--client-id", default=None, help="with -g: the client that consumes it (consumerConnection)")
@common_options
def query_msg_by_id(msg_id: str, topic: str | None, body_limit: int, consumer_group: str | None,
                    client_id: str | None, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """A message by either id kind: the offset message id (store address inside) or the unique id a producer
    prints (the topic's index; without -t every topic's index is searched). With -g and -d the client runs its
    listener on the message (CONSUME_MESSAGE_DIRECTLY; no offset moves) and its result is shown."""
    if (consumer_group is None) != (client_id is None):
        raise click.UsageError("-g CONSUMER_GROUP and -d CLIENT_ID go together")
    out = Output(json_mode)
    ids = [i.strip().upper() for i in msg_id.split(",") if i.strip()]

    async def action(s: AdminSession) -> None:
        found = []
        for one in ids:
            with progress(f"searching {one}", None, topic is None) as update:
                m = await s.admin.query_msg_by_id(one, topic, on_topic=lambda t, i, n, one=one: update(
                    description=f"searching {one} in {t} ({i + 1}/{n})"))
            detail = message_detail(m, body_limit)
            if consumer_group is not None and client_id is not None:
                result = await s.admin.consume_message_directly(consumer_group, client_id, m.offset_msg_id)
                detail += [("consumeDirectly", f"{result.get('consumeResult')} "
                                               f"({result.get('spentTimeMills')} ms)"
                                               + (f": {result['remark']}" if result.get("remark") else ""))]
            found.append((one, detail))
        if json_mode and len(found) == 1:
            out.json(dict(found[0][1]))
            return
        if json_mode:
            out.json([dict(d) for _, d in found])
            return
        for one, d in found:
            out.kv(f"message {one}", d)

    run_admin(namesrv, timeout_ms, action)


@click.command("queryMsgByUniqueKey")
@click.option("-i", "--msg-id", required=True, help="unique key (the msgId producers print)")
@click.option("-t", "--topic", required=True)
@click.option("-a", "--show-all", is_flag=True, help="every stored copy (a retried send may be stored twice)")
@click.option("--body-limit", type=int, default=4096, show_default=True, help="characters of body to show")
@common_options
def query_msg_by_unique_key(msg_id: str, topic: str, show_all: bool, body_limit: int, namesrv: str,
                            json_mode: bool, timeout_ms: int) -> None:
    """A message by its unique key (UNIQ_KEY) in a topic's index."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        msgs = await s.admin.query_msg_by_unique_key(topic, msg_id.strip().upper())
        if not msgs:
            raise CliError(f"no message with unique key {msg_id} in topic {topic!r}")
        shown = msgs if show_all else msgs[:1]
        if json_mode:
            details = [dict(message_detail(m, body_limit)) for m in shown]
            out.json(details if show_all else details[0])
            return
        for m in shown:
            out.kv(f"message {msg_id}", message_detail(m, body_limit))

    run_admin(namesrv, timeout_ms, action)


@click.command("queryMsgByOffset")
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", required=True, help="broker name, e.g. broker-a")
@click.option("-i", "--queue-id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True, help="queue offset")
@click.option("--body-limit", type=int, default=4096, show_default=True, help="characters of body to show")
@common_options
def query_msg_by_offset(topic: str, broker_name: str, queue_id: int, offset: int, body_limit: int, namesrv: str,
                        json_mode: bool, timeout_ms: int) -> None:
    """The message at a queue offset."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        m = await s.admin.query_msg_by_offset(topic, broker_name, queue_id, offset)
        out.kv(f"message at {broker_name}/{queue_id}@{offset}", message_detail(m, body_limit))

    run_admin(namesrv, timeout_ms, action)


@click.command("sendMessage")
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="message body (UTF-8)")
@click.option("-k", "--keys", default=None, help="message key(s), space separated")
@click.option("-c", "--tags", default=None, help="message tag")
@click.option("-b", "--broker-name", default=None, help="send to this broker group (with -i: this queue)")
@click.option("-i", "--queue-id", type=int, default=None, help="queue id (needs -b)")
@click.option("-g", "--group", default="orbitmq-cli-producer", show_default=True, help="producer group")
@common_options
def send_message(topic: str, body: str, keys: str | None, tags: str | None, broker_name: str | None,
                 queue_id: int | None, group: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Send one message (optionally to one broker group / queue) and show where it was stored."""
    check_topic(topic)
    if queue_id is not None and broker_name is None:
        raise click.UsageError("-i QUEUE_ID needs -b BROKER_NAME")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        from orbitmq.client import Producer

        queue = None
        if broker_name is not None:
            queues = [mq for mq, _ in await s.admin.topic_queues(topic, broker_name, queue_id)]
            queue = MessageQueue(topic, broker_name, queue_id if queue_id is not None else queues[0].queue_id)
        msg = Message(topic, body.encode())
        if tags:
            msg.tags = tags
        if keys:
            msg.keys = keys
        producer = Producer(group, namesrv=s.admin.namesrv, send_timeout_ms=timeout_ms)
        await producer.start()
        try:
            r = await producer.send(msg, queue=queue)
        finally:
            await producer.shutdown()
        out.table(f"sendMessage {topic}", ["brokerName", "queueId", "sendResult", "msgId", "offsetMsgId",
                                           "queueOffset"],
                  [[r.message_queue.broker_name, r.message_queue.queue_id, r.status.value, r.msg_id,
                    r.offset_msg_id, r.queue_offset]], numeric=("queueId", "queueOffset"))

    run_admin(namesrv, timeout_ms, action)


async def _read(s: AdminSession, topic: str, broker_name: str | None, queue_id: int | None, offset: int | None,
                begin_ms: int | None, end_ms: int | None, limit: int, expression: str,
                show_progress: bool) -> list[MessageExt]:
    queues = await s.admin.topic_queues(topic, broker_name, queue_id)
    msgs: list[MessageExt] = []
    with progress(f"reading {topic}", len(queues), show_progress) as update:
        for mq, addr in queues:
            start, end = await s.admin.queue_range(mq, addr, begin_ms, end_ms)
            if offset is not None:
                start = max(start, offset)
            async for m in s.admin.read_queue(mq, addr, start, end, expression):
                if limit and len(msgs) >= limit:
                    break
                msgs.append(m)
            update(description=f"reading {topic} {mq.broker_name}/{mq.queue_id}")
            if limit and len(msgs) >= limit:
                break
    return msgs


def _time_option(text: str | None) -> int | None:
    return None if text is None else parse_timestamp(text)


@click.command("consumeMessage")
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", default=None, help="only this broker group")
@click.option("-i", "--queue-id", type=int, default=None, help="only this queue (with -b)")
@click.option("-o", "--offset", type=int, default=None, help="start at this queue offset")
@click.option("-s", "--begin-timestamp", default=None, help="first store time ('now', epoch ms, ISO, ...)")
@click.option("-e", "--end-timestamp", default=None, help="last store time")
@click.option("-c", "--message-number", type=int, default=128, show_default=True, help="at most this many")
@click.option("--body-limit", type=int, default=200, show_default=True, help="characters of body to show")
@common_options
def consume_message(topic: str, broker_name: str | None, queue_id: int | None, offset: int | None,
                    begin_timestamp: str | None, end_timestamp: str | None, message_number: int, body_limit: int,
                    namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Read messages of a topic (a queue, an offset or a time range) without committing any offset."""
    if queue_id is not None and broker_name is None:
        raise click.UsageError("-i QUEUE_ID needs -b BROKER_NAME")
    out = Output(json_mode)
    begin, end = _time_option(begin_timestamp), _time_option(end_timestamp)

    async def action(s: AdminSession) -> None:
        msgs = await _read(s, topic, broker_name, queue_id, offset, begin, end, message_number, "*", not json_mode)
        _render_messages(out, f"messages of {topic}", msgs, True, body_limit)

    run_admin(namesrv, timeout_ms, action)


@click.command("printMsg")
@click.option("-t", "--topic", required=True)
@click.option("-s", "--sub-expression", default="*", show_default=True, help="tag expression, e.g. 'TagA || TagB'")
@click.option("-b", "--begin-timestamp", default=None, help="first store time ('now', epoch ms, ISO, ...)")
@click.option("-e", "--end-timestamp", default=None, help="last store time")
@click.option("-d", "--print-body", type=click.BOOL, default=True, show_default=True)
@click.option("--body-limit", type=int, default=200, show_default=True, help="characters of body to show")
@common_options
def print_msg(topic: str, sub_expression: str, begin_timestamp: str | None, end_timestamp: str | None,
              print_body: bool, body_limit: int, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Every message of a topic (optionally a store-time range and a tag expression), queue by queue."""
    out = Output(json_mode)
    begin, end = _time_option(begin_timestamp), _time_option(end_timestamp)

    async def action(s: AdminSession) -> None:
        msgs = await _read(s, topic, None, None, None, begin, end, 0, sub_expression, not json_mode)
        _render_messages(out, f"messages of {topic}", msgs, print_body, body_limit)

    run_admin(namesrv, timeout_ms, action)


MESSAGE_COMMANDS: list[Any] = [query_msg_by_key, query_msg_by_id, query_msg_by_unique_key, query_msg_by_offset,
                               send_message, consume_message, print_msg]
