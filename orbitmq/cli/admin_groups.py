"""mqadmin commands for consumer and producer groups: consumerProgress, consumerConnection, consumerStatus,
producerConnection, updateSubGroup, deleteSubGroup, getConsumerConfig, resetOffsetByTime, skipAccumulatedMessage,
cloneGroupOffset, brokerConsumeStats, statsAll."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.base.errors import OrbitMQError
from orbitmq.cli import CliError, Output
from orbitmq.cli.admin_common import (
    AdminSession,
    common_options,
    fmt_ms,
    parse_timestamp,
    progress,
    run_admin,
)
from orbitmq.client.admin_groups import GroupProgress, subscription_group_body

PROGRESS_COLUMNS = ["topic", "broker", "queue", "brokerOffset", "consumerOffset", "lag", "lastConsumed"]


def progress_render(report: GroupProgress, out: Output, json_mode: bool) -> None:
    """consumerProgress output: a row per queue, totals, and a line per broker group that did not (fully)
    answer; in JSON the problems are a list next to the rows."""
    rows = [[q.mq.topic, q.mq.broker_name, q.mq.queue_id, q.broker_offset, q.consumer_offset, q.lag,
             fmt_ms(q.last_timestamp)] for q in report.queues]
    missing = sorted({p.broker_name for p in report.problems if p.error is not None})
    label = "total" + (f" (without {', '.join(missing)})" if missing else "")
    footer = [label, "", "", sum(r[3] for r in rows), sum(max(r[4], 0) for r in rows), sum(r[5] for r in rows),
              f"consume TPS {report.consume_tps:,.2f}"]
    problems = [{"broker": p.broker_name, "addr": p.addr or None, "error": p.reason} for p in report.problems]
    if json_mode:
        out.json({"title": f"progress of {report.group}", "rows": [dict(zip(PROGRESS_COLUMNS, r, strict=True))
                                                                  for r in rows],
                  "total": dict(zip(PROGRESS_COLUMNS, footer, strict=True)), "problems": problems})
        return
    out.table(f"progress of {report.group}", PROGRESS_COLUMNS, rows, footer=footer,
              numeric=("queue", "brokerOffset", "consumerOffset", "lag"))
    for p in report.problems:
        where = f" {p.addr}" if p.addr else ""
        out.line(f"{'UNREACHABLE' if p.error is not None else 'note'}: broker {p.broker_name}{where}: {p.reason}")


@click.command("consumerProgress")
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-t", "--topic", default=None, help="only this topic")
@common_options
def consumer_progress(group: str, topic: str | None, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Broker offset, consumer offset and lag of every queue a group consumes, with totals. A broker group that
    cannot be asked is named with the reason (its queues are then missing from the totals)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        report = await s.admin.group_progress(group, topic)
        failed = [p for p in report.problems if p.error is not None]
        if not report.queues and failed and len(failed) == len(report.problems):
            raise failed[0].error  # type: ignore[misc]
        if not report.queues and not report.problems:
            click.echo(f"orbitmq: note: group {group} has no committed offset and no online consumer", err=True)
        progress_render(report, out, json_mode)

    run_admin(namesrv, timeout_ms, action)


@click.command("consumerConnection")
@click.option("-g", "--group", "consumer_group", required=True, help="consumer group")
@click.option("-b", "--broker-addr", default=None, help="ask this broker (default: the group's brokers)")
@common_options
def consumer_connection(consumer_group: str, broker_addr: str | None, namesrv: str, json_mode: bool,
                        timeout_ms: int) -> None:
    """A consumer group's online clients and subscriptions."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        conn = await s.admin.consumer_connections(consumer_group, broker_addr)
        if json_mode:
            out.json(conn.to_json_obj())
            return
        out.table(f"connections of {consumer_group}", ["clientId", "clientAddr", "language", "version"],
                  [[c.client_id, c.client_addr, c.language, c.version] for c in conn.connection_set],
                  numeric=("version",))
        out.table("subscriptions", ["topic", "subExpression"],
                  [[t, sd.sub_string] for t, sd in sorted(conn.subscription_table.items())])
        out.line(f"consumeType: {conn.consume_type}  messageModel: {conn.message_model}  "
                 f"consumeFromWhere: {conn.consume_from_where}")

    run_admin(namesrv, timeout_ms, action)


def _client_time(value: Any) -> Any:
    """A client-reported timestamp: a date when it is epoch milliseconds, else the number as sent (a client may
    report a monotonic clock)."""
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return value
    return fmt_ms(ms) if ms > 1_000_000_000_000 else (ms if ms > 0 else "-")


@click.command("consumerStatus")
@click.option("-g", "--group", "consumer_group", required=True, help="consumer group")
@click.option("-i", "--client-id", default=None, help="one client's full running info")
@click.option("-b", "--broker-addr", default=None, help="ask through this broker (default: the group's brokers)")
@common_options
def consumer_status(consumer_group: str, client_id: str | None, broker_addr: str | None, namesrv: str,
                    json_mode: bool, timeout_ms: int) -> None:
    """What each online client of a group is doing (GET_CONSUMER_RUNNING_INFO through a broker): its settings
    and, per queue it holds, commit offset, cached messages and last pull / consume."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        if client_id is not None:
            info = await s.admin.consumer_running_info(consumer_group, client_id, broker_addr)
            rows = [[mq.topic, mq.broker_name, mq.queue_id, pq.get("commitOffset"), pq.get("cachedMsgCount"),
                     pq.get("cachedMsgMinOffset"), pq.get("cachedMsgMaxOffset"), pq.get("locked"),
                     _client_time(pq.get("lastPullTimestamp")), _client_time(pq.get("lastConsumeTimestamp"))]
                    for mq, pq in info.mq_table]
            columns = ["topic", "broker", "queue", "commitOffset", "cached", "cachedMin", "cachedMax", "locked",
                       "lastPull", "lastConsume"]
            if json_mode:
                out.json({"properties": info.properties, "subscriptions": info.subscriptions,
                          "queues": [dict(zip(columns, r, strict=True)) for r in rows]})
                return
            out.kv(f"{client_id} ({consumer_group})", sorted(info.properties.items()))
            out.table("queues", columns, rows, numeric=("queue", "commitOffset", "cached", "cachedMin", "cachedMax"))
            return
        conn = await s.admin.consumer_connections(consumer_group, broker_addr)
        rows = []
        for c in sorted(conn.connection_set, key=lambda c: c.client_id):
            try:
                info = await s.admin.consumer_running_info(consumer_group, c.client_id, broker_addr)
            except OrbitMQError as exc:
                rows.append([c.client_id, c.client_addr, c.language, c.version, None, None, f"error: {exc}"])
                continue
            cached = sum(int(pq.get("cachedMsgCount") or 0) for _, pq in info.mq_table)
            rows.append([c.client_id, c.client_addr, c.language, c.version, len(info.mq_table), cached,
                         info.properties.get("PROP_CONSUME_TYPE", "-")])
        out.table(f"status of {consumer_group}", ["clientId", "clientAddr", "language", "version", "queues",
                                                  "cachedMsgs", "consumeType"], rows,
                  numeric=("version", "queues", "cachedMsgs"))

    run_admin(namesrv, timeout_ms, action)


@click.command("producerConnection")
@click.option("-g", "--group", "producer_group", required=True, help="producer group")
@click.option("-t", "--topic", required=True, help="a topic the group sends to (its brokers are asked)")
@common_options
def producer_connection(producer_group: str, topic: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """A producer group's connected clients."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        conn = await s.admin.producer_connections(producer_group, topic)
        out.table(f"producers of {producer_group}", ["clientId", "clientAddr", "language", "version"],
                  [[c.client_id, c.client_addr, c.language, c.version] for c in conn.connection_set],
                  numeric=("version",))

    run_admin(namesrv, timeout_ms, action)


def _targets_usage(cluster: str | None, broker_addr: str | None) -> None:
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")


@click.command("updateSubGroup")
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@click.option("-b", "--broker-addr", default=None, help="this broker (ip:port)")
@click.option("-s", "--consume-enable", type=click.BOOL, default=None, help="[true]")
@click.option("-m", "--consume-from-min-enable", type=click.BOOL, default=None, help="[true]")
@click.option("-d", "--consume-broadcast-enable", type=click.BOOL, default=None, help="[true]")
@click.option("-o", "--consume-message-orderly", type=click.BOOL, default=None, help="[false]")
@click.option("-q", "--retry-queue-nums", type=int, default=None, help="[1]")
@click.option("-r", "--retry-max-times", type=int, default=None, help="[16]")
@click.option("-i", "--broker-id", type=int, default=None, help="consume from this broker id [0]")
@click.option("-w", "--which-broker-when-consume-slowly", type=int, default=None, help="[1]")
@click.option("-a", "--notify-consumer-ids-changed-enable", type=click.BOOL, default=None, help="[true]")
@common_options
def update_sub_group(group: str, cluster: str | None, broker_addr: str | None, namesrv: str, json_mode: bool,
                     timeout_ms: int, **settings: Any) -> None:
    """Create or update a subscription group (consume switch, retries, ...); settings not given keep the
    defaults shown in brackets, as mqadmin's."""
    _targets_usage(cluster, broker_addr)
    out = Output(json_mode)
    given = {k: v for k, v in settings.items() if v is not None}

    async def action(s: AdminSession) -> None:
        targets = await s.admin.update_sub_group(group, cluster=cluster, broker_addr=broker_addr, **given)
        body = subscription_group_body(group, **given)
        out.table(f"updateSubGroup {group}", ["broker", "addr", "group", "consumeEnable", "retryMaxTimes", "result"],
                  [[n or "-", a, group, body["consumeEnable"], body["retryMaxTimes"], "OK"] for n, a in targets])

    run_admin(namesrv, timeout_ms, action)


@click.command("deleteSubGroup")
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@click.option("-b", "--broker-addr", default=None, help="this broker (ip:port)")
@click.option("-r", "--remove-offset", type=click.BOOL, default=False, show_default=True,
              help="also drop the group's committed offsets")
@common_options
def delete_sub_group(group: str, cluster: str | None, broker_addr: str | None, remove_offset: bool, namesrv: str,
                     json_mode: bool, timeout_ms: int) -> None:
    """Delete a subscription group."""
    _targets_usage(cluster, broker_addr)
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = await s.admin.delete_sub_group(group, cluster=cluster, broker_addr=broker_addr,
                                                 remove_offset=remove_offset)
        out.table(f"deleteSubGroup {group}", ["broker", "addr", "result"], [[n or "-", a, "deleted"]
                                                                            for n, a in targets])

    run_admin(namesrv, timeout_ms, action)


@click.command("resetOffsetByTime")
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", "when", required=True,
              help="'now', 'latest', epoch ms, ISO time or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-f", "--force", type=click.BOOL, default=True, show_default=True,
              help="also move offsets forward past unconsumed messages")
@common_options
def reset_offset_by_time(group: str, topic: str, when: str, force: bool, namesrv: str, json_mode: bool,
                         timeout_ms: int) -> None:
    """Move a group's offsets on a topic to the first message stored at/after a time."""
    ts = parse_timestamp(when)
    out = Output(json_mode)

    run_admin(namesrv, timeout_ms, lambda s: _reset(s, out, group, topic, ts, force))


async def _reset(s: AdminSession, out: Output, group: str, topic: str, ts: int, force: bool) -> None:
    """Reset (ts -1: to the queue ends) and print a row per queue with the way it went."""
    table = await s.admin.reset_offset_report(group, topic, ts, force=force)
    rows = [[mq.broker_name, mq.queue_id, off,
             "broker (consumers notified)" if via_broker else "offset commit (no consumer online)"]
            for mq, (off, via_broker) in table.items()]
    when_text = fmt_ms(ts) if ts > 0 else ("the latest offsets" if ts < 0 else "the oldest messages")
    out.table(f"reset {group} on {topic} to {when_text}", ["broker", "queue", "offset", "via"], rows,
              numeric=("queue", "offset"))


@click.command("skipAccumulatedMessage")
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-f", "--force", type=click.BOOL, default=True, show_default=True)
@common_options
def skip_accumulated_message(group: str, topic: str, force: bool, namesrv: str, json_mode: bool,
                             timeout_ms: int) -> None:
    """Move a group's offsets on a topic to the end of every queue (skip the backlog)."""
    out = Output(json_mode)

    run_admin(namesrv, timeout_ms, lambda s: _reset(s, out, group, topic, -1, force))


@click.command("getConsumerConfig")
@click.option("-g", "--group", required=True, help="consumer (subscription) group")
@common_options
def get_consumer_config(group: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """A subscription group's settings on every master that has it."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        found = await s.admin.subscription_group_configs(group)
        if not found:
            raise CliError(f"no master broker has subscription group {group!r}")
        if json_mode:
            out.json({addr: conf for _, addr, conf in found})
            return
        for name, addr, conf in found:
            out.kv(f"{group} on {name} ({addr})", sorted(conf.items()))

    run_admin(namesrv, timeout_ms, action)


@click.command("cloneGroupOffset")
@click.option("-s", "--src-group", required=True, help="group to copy offsets from")
@click.option("-d", "--dest-group", required=True, help="group to copy offsets to")
@click.option("-t", "--topic", required=True)
@click.option("-o", "--offline", type=click.BOOL, default=False, show_default=True,
              help="the destination group is offline (clone even topics it does not subscribe to)")
@common_options
def clone_group_offset(src_group: str, dest_group: str, topic: str, offline: bool, namesrv: str, json_mode: bool,
                       timeout_ms: int) -> None:
    """Copy one group's committed offsets on a topic to another group."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = await s.admin.clone_group_offset(src_group, dest_group, topic, offline=offline)
        out.table(f"cloneGroupOffset {src_group} -> {dest_group} on {topic}", ["broker", "addr", "result"],
                  [[n, a, "cloned"] for n, a in targets])

    run_admin(namesrv, timeout_ms, action)


@click.command("brokerConsumeStats")
@click.option("-b", "--broker-addr", default=None, help="broker ip:port (default: the only broker)")
@click.option("-l", "--level", type=int, default=0, show_default=True, help="only queues with a lag above this")
@common_options
def broker_consume_stats(broker_addr: str | None, level: int, namesrv: str, json_mode: bool,
                         timeout_ms: int) -> None:
    """Every group's consumption of every queue on one broker (GET_BROKER_CONSUME_STATS)."""
    from orbitmq.cli.admin import broker_targets

    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        (addr,) = await broker_targets(s, broker_addr, None)
        rows: list[list[Any]] = []
        for group, stats in await s.admin.broker_consume_stats(addr):
            for mq, w in sorted(stats.offset_table.items()):
                diff = w.broker_offset - max(w.consumer_offset, 0)
                if diff > level or level <= 0:
                    rows.append([mq.topic, group, mq.broker_name, mq.queue_id, w.broker_offset, w.consumer_offset,
                                 diff, fmt_ms(w.last_timestamp)])
        footer = ["total", "", "", "", "", "", sum(r[6] for r in rows), ""]
        out.table(f"consume stats of {addr}", ["topic", "group", "broker", "queue", "brokerOffset",
                                               "consumerOffset", "diff", "lastTime"], rows, footer=footer,
                  numeric=("queue", "brokerOffset", "consumerOffset", "diff"))

    run_admin(namesrv, timeout_ms, action)


@click.command("statsAll")
@click.option("-t", "--topic", default=None, help="only this topic")
@click.option("-a", "--active-topic", is_flag=True, help="only topics with a consuming group")
@common_options
def stats_all(topic: str | None, active_topic: bool, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Per topic and consuming group: messages stored, accumulation (lag) and consume TPS."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        with progress("statsAll", None, not topic) as update:
            rows_raw = await s.admin.stats_all(
                topic, on_topic=lambda t, i, n: update(advance=1, description=f"statsAll {t} ({i + 1}/{n})"))
        rows = [[r["topic"], r["group"], r["messages"], r["accumulation"], r["outTps"]] for r in rows_raw
                if not active_topic or r["group"] is not None]
        if not rows and topic:
            raise CliError(f"topic {topic!r} has no statistics")
        out.table("stats", ["topic", "group", "messages", "accumulation", "outTPS"], rows,
                  numeric=("messages", "accumulation", "outTPS"))

    run_admin(namesrv, timeout_ms, action)


GROUP_COMMANDS = [consumer_progress, consumer_connection, consumer_status, producer_connection, update_sub_group, delete_sub_group,
                  get_consumer_config, reset_offset_by_time, skip_accumulated_message, clone_group_offset,
                  broker_consume_stats, stats_all]
