"""Admin commands modelled on RocketMQ's mqadmin (updateTopic, topicRoute, consumerProgress, ...).

Talks to name servers and brokers with the remoting protocol directly (AdminSession), so it works against any
RocketMQ 4.x-compatible server. A broker error becomes `orbitmq: error: <CODE_NAME>: <remark>` and exit 1.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

import click

from orbitmq.base.errors import RemotingError
from orbitmq.cli import EXIT_FAILURE, CliError, Output, one_line, run_async
from orbitmq.model.enums import perm_to_string
from orbitmq.model.message import MessageExt
from orbitmq.model.msg_id import decode_offset_msg_id
from orbitmq.model.record import iter_records
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import (
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    KVTable,
    ResetOffsetBody,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
)
from orbitmq.remoting import RemotingClient

DEFAULT_NAMESRV = "127.0.0.1:9876"
LONG_MAX = (1 << 63) - 1
ORDER_TOPIC_NAMESPACE = "ORDER_TOPIC_CONFIG"
TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


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


class AdminSession:
    """One remoting client plus the name server list; every call raises CliError on failure."""

    def __init__(self, namesrv: str, timeout_ms: int = 5000) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise CliError("no name server address (use -n ip:port or set NAMESRV_ADDR)")
        self.timeout_ms = timeout_ms
        self.client = RemotingClient(name="admin")

    async def close(self) -> None:
        await self.client.close()

    async def call(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                   ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        ext_fields = {k: _ext_value(v) for k, v in (ext or {}).items() if v is not None}
        cmd = RemotingCommand.request(code, ext_fields=ext_fields, body=body)
        try:
            resp = await self.client.invoke(addr, cmd, self.timeout_ms)
        except RemotingError as exc:
            text = one_line(exc)
            raise CliError(text if addr in text else f"{addr}: {text}", EXIT_FAILURE) from None
        if resp.code not in tuple(ok):
            raise BrokerError(resp.code, resp.remark, addr)
        return resp

    async def call_namesrv(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                           ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Ask the name servers in order; the next one only when the previous cannot be reached."""
        last: CliError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.call(addr, code, ext, body, ok)
            except BrokerError:
                raise
            except CliError as exc:
                last = exc
        assert last is not None
        raise last

    async def all_namesrv(self, code: int, ext: dict[str, Any]) -> None:
        for addr in self.namesrv_addrs:
            await self.call(addr, code, ext)

    async def route(self, topic: str) -> TopicRouteData:
        resp = await self.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return TopicRouteData.from_json(resp.body)

    async def cluster_info(self) -> ClusterInfo:
        resp = await self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.from_json(resp.body)

    async def cluster_masters(self, cluster: str | None) -> list[tuple[str, str]]:
        """(brokerName, master addr) of a cluster (all clusters when None)."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise CliError(f"cluster {cluster!r} not found (known: {', '.join(sorted(info.cluster_addr_table)) or '-'})")
        names = (info.cluster_addr_table[cluster] if cluster is not None
                 else [n for ns in info.cluster_addr_table.values() for n in ns])
        out = []
        for name in sorted(set(names)):
            bd = info.broker_addr_table.get(name)
            if bd is not None and bd.master_addr():
                out.append((name, bd.master_addr() or ""))
        return out

    async def topic_masters(self, topic: str) -> list[tuple[str, str]]:
        route = await self.route(topic)
        return [(bd.broker_name, bd.master_addr() or "") for bd in sorted(route.broker_datas,
                                                                           key=lambda b: b.broker_name)
                if bd.master_addr()]

    async def runtime_info(self, addr: str) -> dict[str, str]:
        resp = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(KVTable.from_json(resp.body).table)


def _ext_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# ---- shared formatting ---------------------------------------------------------------------------------
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
    return {"msgId": m.msg_id, "topic": m.topic, "tags": m.tags, "keys": " ".join(m.keys) or None,
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


# ---- command plumbing ----------------------------------------------------------------------------------
def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--timeout", "timeout_ms", type=int, default=5000, show_default=True,
                      help="request timeout (ms)")(fn)
    fn = click.option("--json", "json_mode", is_flag=True, help="machine-readable JSON output")(fn)
    fn = click.option("-n", "--namesrv", envvar="NAMESRV_ADDR", default=DEFAULT_NAMESRV, show_default=True,
                      help="name server list 'ip:port;ip:port' (env NAMESRV_ADDR)")(fn)
    return fn


def run_admin(namesrv: str, timeout_ms: int, action: Callable[[AdminSession], Awaitable[None]]) -> None:
    async def go() -> None:
        session = AdminSession(namesrv, timeout_ms)
        try:
            await action(session)
        finally:
            await session.close()

    run_async(go())


# ---- topics --------------------------------------------------------------------------------------------
def _check_topic(topic: str) -> str:
    if not TOPIC_RE.match(topic):
        raise click.BadParameter(f"{topic!r}: 1-127 characters of a-z A-Z 0-9 _ - % |", param_hint="-t")
    return topic


@click.command("updateTopic")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", default=None, help="create on every master of this cluster")
@click.option("-b", "--broker-addr", default=None, help="create on this broker (ip:port)")
@click.option("-r", "--read-queues", type=int, default=8, show_default=True)
@click.option("-w", "--write-queues", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True, help="2 write, 4 read, 6 read+write")
@click.option("-o", "--order", type=click.BOOL, default=False, show_default=True, help="ordered topic")
@common_options
def update_topic(topic: str, cluster: str | None, broker_addr: str | None, read_queues: int, write_queues: int,
                 perm: int, order: bool, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Create or update a topic on a broker (-b) or on every master of a cluster (-c)."""
    _check_topic(topic)
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = [("", broker_addr)] if broker_addr else await s.cluster_masters(cluster)
        if not targets:
            raise CliError(f"cluster {cluster!r} has no master broker")
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queues,
               "writeQueueNums": write_queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": 0, "order": order}
        rows = []
        for name, addr in targets:
            await s.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
            rows.append([name or "-", addr, topic, read_queues, write_queues, perm_to_string(perm), "OK"])
        if order and cluster is not None:
            conf = ";".join(f"{name}:{write_queues}" for name, _ in targets)
            await s.call_namesrv(RequestCode.PUT_KV_CONFIG,
                                 {"namespace": ORDER_TOPIC_NAMESPACE, "key": topic, "value": conf})
        out.table(f"updateTopic {topic}", ["broker", "addr", "topic", "read", "write", "perm", "result"], rows,
                  numeric=("read", "write"))

    run_admin(namesrv, timeout_ms, action)


@click.command("deleteTopic")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", default=None, help="cluster to delete from (default: every broker of the route)")
@common_options
def delete_topic(topic: str, cluster: str | None, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Delete a topic from the brokers and from every name server."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = await s.cluster_masters(cluster) if cluster else await s.topic_masters(topic)
        for _, addr in targets:
            await s.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        await s.all_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        for addr in s.namesrv_addrs:  # an ordered topic's queue layout; usually absent
            try:
                await s.call(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_NAMESPACE, "key": topic},
                             ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            except BrokerError:
                pass
        out.table(f"deleteTopic {topic}", ["broker", "addr", "result"], [[n, a, "deleted"] for n, a in targets])

    run_admin(namesrv, timeout_ms, action)


@click.command("topicList")
@common_options
def topic_list(namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """List every topic the name server knows."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        resp = await s.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        topics = sorted(TopicList.from_json(resp.body).topic_list)
        if json_mode:
            out.json(topics)
        else:
            out.table(None, ["topic"], [[t] for t in topics])

    run_admin(namesrv, timeout_ms, action)


@click.command("topicRoute")
@click.option("-t", "--topic", required=True)
@common_options
def topic_route(topic: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Show a topic's route: brokers and queue counts."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        route = await s.route(topic)
        if json_mode:
            out.json(route.to_json_obj())
            return
        brokers = [[bd.cluster, bd.broker_name, bid, addr]
                   for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)
                   for bid, addr in sorted(bd.broker_addrs.items())]
        out.table(f"route of {topic}: brokers", ["cluster", "brokerName", "brokerId", "addr"], brokers,
                  numeric=("brokerId",))
        queues = [[qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, perm_to_string(qd.perm),
                   qd.topic_sys_flag] for qd in sorted(route.queue_datas, key=lambda q: q.broker_name)]
        out.table(f"route of {topic}: queues", ["brokerName", "readQueues", "writeQueues", "perm", "sysFlag"],
                  queues, numeric=("readQueues", "writeQueues", "sysFlag"))
        if route.order_topic_conf:
            out.line(f"orderTopicConf: {route.order_topic_conf}")

    run_admin(namesrv, timeout_ms, action)


@click.command("topicStatus")
@click.option("-t", "--topic", required=True)
@common_options
def topic_status(topic: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Min/max offset of every queue of a topic."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        rows = []
        for name, addr in await s.topic_masters(topic):
            resp = await s.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            stats = TopicStatsTable.from_json(resp.body)
            for mq, off in sorted(stats.offset_table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)):
                rows.append([mq.broker_name or name, mq.queue_id, off.min_offset, off.max_offset,
                             off.max_offset - off.min_offset, fmt_ms(off.last_update_timestamp)])
        footer = ["total", "", "", "", sum(r[4] for r in rows), ""]
        out.table(f"status of {topic}", ["broker", "queue", "minOffset", "maxOffset", "messages", "lastUpdated"],
                  rows, footer=footer, numeric=("queue", "minOffset", "maxOffset", "messages"))

    run_admin(namesrv, timeout_ms, action)


# ---- cluster and brokers -------------------------------------------------------------------------------
def _first_number(text: str | None) -> str:
    if not text:
        return "-"
    first = text.split()[0]
    try:
        return f"{float(first):,.2f}"
    except ValueError:
        return first


def _delta(info: dict[str, str], now_key: str, morning_key: str) -> Any:
    try:
        return int(info[now_key]) - int(info[morning_key])
    except (KeyError, ValueError):
        return "-"


def _replication_lag(ri: dict[str, str], master_max: str | None) -> int | str:
    """Master: bytes its slowest connected slave lacks (haSlaveLagBytes); slave: master max - own max."""
    if ri.get("brokerRole") == "SLAVE":
        if master_max is None or "commitLogMaxOffset" not in ri:
            return "-"
        return max(0, int(master_max) - int(ri["commitLogMaxOffset"]))
    lag = ri.get("haSlaveLagBytes")
    return int(lag) if lag is not None and lag.lstrip("-").isdigit() and int(lag) >= 0 else "-"


CLUSTER_COLUMNS = ["cluster", "brokerName", "BID", "addr", "version", "inTPS", "outTPS", "putToday", "getToday",
                   "role", "lagBytes", "actingMaster", "minBID"]


def cluster_rows(members: list[tuple[str, str, int, str]], infos: list[dict[str, str]]) -> list[list[Any]]:
    """One clusterList row per (cluster, brokerName, brokerId, addr) member and its runtime info ({} when it did
    not answer). RIP-32 columns: actingMaster / minBID are the broker's `actingMaster` / `minBrokerId` keys
    ("-" when the broker does not report them)."""
    master_max = {m[1]: ri.get("commitLogMaxOffset") for m, ri in zip(members, infos, strict=True) if m[2] == 0}
    return [[cluster, name, bid, addr, ri.get("brokerVersionDesc", "-"), _first_number(ri.get("putTps")),
             _first_number(ri.get("getTransferedTps")),
             _delta(ri, "msgPutTotalTodayNow", "msgPutTotalTodayMorning"),
             _delta(ri, "msgGetTotalTodayNow", "msgGetTotalTodayMorning"),
             ri.get("brokerRole", "-"), _replication_lag(ri, master_max.get(name)),
             ri.get("actingMaster", "-"), ri.get("minBrokerId", "-")]
            for (cluster, name, bid, addr), ri in zip(members, infos, strict=True)]


@click.command("clusterList")
@common_options
def cluster_list(namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Every broker of every cluster: version, throughput, role, replication lag, RIP-32 acting-master state;
    in controller mode also the master epoch and SyncStateSet membership (when the brokers report them)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        info = await s.cluster_info()
        members = [(cluster, name, bid, addr)
                   for cluster, names in sorted(info.cluster_addr_table.items())
                   for name in sorted(names) if name in info.broker_addr_table
                   for bid, addr in sorted(info.broker_addr_table[name].broker_addrs.items())]

        async def runtime(addr: str) -> dict[str, str]:
            try:
                return await s.runtime_info(addr)
            except CliError:
                return {}

        infos = await asyncio.gather(*(runtime(m[3]) for m in members))
        from orbitmq.cli.controller_admin import epoch_columns  # that module imports this one

        rows = cluster_rows(members, infos)
        extra_columns, extra = epoch_columns(members, infos)
        if extra_columns:
            rows = [r + e for r, e in zip(rows, extra, strict=True)]
        out.table("clusters", CLUSTER_COLUMNS + extra_columns, rows,
                  numeric=("BID", "inTPS", "outTPS", "putToday", "getToday", "lagBytes", "epoch"))

    run_admin(namesrv, timeout_ms, action)


@click.command("brokerStatus")
@click.option("-b", "--broker-addr", default=None, help="broker ip:port")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@common_options
def broker_status(broker_addr: str | None, cluster: str | None, namesrv: str, json_mode: bool,
                  timeout_ms: int) -> None:
    """A broker's runtime info (GET_BROKER_RUNTIME_INFO) as key/value pairs."""
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give exactly one of -b BROKER_ADDR or -c CLUSTER")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = [("", broker_addr)] if broker_addr else await s.cluster_masters(cluster)
        result = {}
        for _, addr in targets:
            result[addr] = await s.runtime_info(addr)
        if json_mode:
            out.json(result if cluster else result[broker_addr or ""])
            return
        for addr, info in result.items():
            out.kv(f"broker {addr}", sorted(info.items()))

    run_admin(namesrv, timeout_ms, action)


# ---- consumers -----------------------------------------------------------------------------------------
@click.command("consumerProgress")
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-t", "--topic", default=None, help="only this topic")
@common_options
def consumer_progress(group: str, topic: str | None, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Broker offset, consumer offset and lag of every queue a group consumes, with totals."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = await _group_brokers(s, group, topic)
        merged: dict[Any, Any] = {}
        tps = 0.0
        errors: list[BrokerError] = []
        for _, addr in targets:
            # No -t: the broker reports topics with committed offsets; add what online members subscribe to,
            # so a group shows up before its first offset commit.
            topics: list[str | None] = [topic] if topic else [None, *await _subscribed_topics(s, addr, group)]
            for t in topics:
                try:
                    resp = await s.call(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": t})
                except BrokerError as exc:
                    errors.append(exc)
                    continue
                stats = ConsumeStats.from_json(resp.body)
                merged.update(stats.offset_table)
                tps += stats.consume_tps if t is None or topic else 0.0
        if not merged and errors:
            raise errors[0]
        if not merged:
            click.echo(f"orbitmq: note: group {group} has no committed offset and no online consumer", err=True)
        rows = []
        for mq, w in sorted(merged.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id)):
            lag = max(0, w.broker_offset - max(w.consumer_offset, 0))
            rows.append([mq.topic, mq.broker_name, mq.queue_id, w.broker_offset, w.consumer_offset, lag,
                         fmt_ms(w.last_timestamp)])
        footer = ["total", "", "", sum(r[3] for r in rows), sum(max(r[4], 0) for r in rows),
                  sum(r[5] for r in rows), f"consume TPS {tps:,.2f}"]
        out.table(f"progress of {group}", ["topic", "broker", "queue", "brokerOffset", "consumerOffset", "lag",
                                           "lastConsumed"], rows, footer=footer,
                  numeric=("queue", "brokerOffset", "consumerOffset", "lag"))

    run_admin(namesrv, timeout_ms, action)


async def _subscribed_topics(s: AdminSession, addr: str, group: str) -> list[str]:
    try:
        resp = await s.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
    except BrokerError:
        return []  # CONSUMER_NOT_ONLINE: nobody connected
    conn = ConsumerConnection.from_json(resp.body)
    return sorted(t for t in conn.subscription_table if not t.startswith("%RETRY%"))


async def _group_brokers(s: AdminSession, group: str, topic: str | None) -> list[tuple[str, str]]:
    """Brokers to ask about a group: the topic's, else those hosting %RETRY%<group>, else every master."""
    if topic:
        return await s.topic_masters(topic)
    try:
        targets = await s.topic_masters(f"%RETRY%{group}")
    except BrokerError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        targets = []
    return targets or await s.cluster_masters(None)


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

    async def action(s: AdminSession) -> None:
        route = await s.route(topic)
        rows: list[list[Any]] = []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.master_addr()
            if not addr:
                continue
            ext = {"topic": topic, "group": group, "timestamp": ts, "isForce": force, "isC": False}
            resp = await s.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext,
                                ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE,
                                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED))
            if resp.code == ResponseCode.SUCCESS and resp.body:
                table = ResetOffsetBody.from_json(resp.body).offset_table
                rows += [[mq.broker_name, mq.queue_id, off, "broker (consumers notified)"]
                         for mq, off in sorted(table.items(), key=lambda kv: kv[0].queue_id)]
                continue
            queues = next((q.read_queue_nums for q in route.queue_datas if q.broker_name == bd.broker_name), 0)
            rows += await _reset_offline(s, addr, bd.broker_name, group, topic, ts, queues)
        when_text = fmt_ms(ts) if ts > 0 else ("the latest offsets" if ts < 0 else "the oldest messages")
        out.table(f"reset {group} on {topic} to {when_text}", ["broker", "queue", "offset", "via"], rows,
                  numeric=("queue", "offset"))

    run_admin(namesrv, timeout_ms, action)


async def _reset_offline(s: AdminSession, addr: str, broker_name: str, group: str, topic: str, ts: int,
                         queues: int) -> list[list[Any]]:
    """No consumer online: search the offset of each queue by time (-1: its max) and commit it for the group."""
    rows = []
    for qid in range(queues):
        if ts < 0:
            resp = await s.call(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": qid})
        else:
            resp = await s.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                {"topic": topic, "queueId": qid, "timestamp": ts})
        offset = int((resp.ext_fields or {}).get("offset", "0"))
        await s.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                     {"consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": offset})
        rows.append([broker_name, qid, offset, "offset commit (no consumer online)"])
    return rows


# ---- messages ------------------------------------------------------------------------------------------
async def query_by_key(s: AdminSession, topic: str, key: str, max_num: int, unique: bool = False) -> list[MessageExt]:
    found: list[MessageExt] = []
    for _, addr in await s.topic_masters(topic):
        ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": 0, "endTimestamp": LONG_MAX,
               "_UNIQUE_KEY_QUERY": unique}
        resp = await s.call(addr, RequestCode.QUERY_MESSAGE, ext,
                            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            continue
        for m in iter_records(resp.body):  # the index is hashed: keep exact matches only
            if m.topic == topic and ((unique and m.msg_id == key) or (not unique and key in m.keys)):
                found.append(m)
    found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
    return found


@click.command("queryMsgByKey")
@click.option("-t", "--topic", required=True)
@click.option("-k", "--key", required=True)
@click.option("--max", "max_num", type=int, default=64, show_default=True)
@common_options
def query_msg_by_key(topic: str, key: str, max_num: int, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Messages of a topic carrying a key (IndexFile lookup on every broker)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        msgs = await query_by_key(s, topic, key, max_num)
        if not msgs:
            raise CliError(f"no message with key {key!r} in topic {topic!r}")
        rows = [list(message_summary(m).values()) for m in msgs]
        out.table(f"messages of {topic} with key {key}", list(message_summary(msgs[0]).keys()), rows,
                  numeric=("queueId", "queueOffset", "bodySize"))

    run_admin(namesrv, timeout_ms, action)


@click.command("queryMsgById")
@click.option("-i", "--msg-id", required=True, help="offset message id, or unique id (UNIQ_KEY) with -t")
@click.option("-t", "--topic", default=None, help="topic, to look a unique (client) id up in the index")
@click.option("--body-limit", type=int, default=4096, show_default=True, help="characters of body to show")
@common_options
def query_msg_by_id(msg_id: str, topic: str | None, body_limit: int, namesrv: str, json_mode: bool,
                    timeout_ms: int) -> None:
    """One message by id: the store address inside an offset id, else the unique-key index (-t)."""
    out = Output(json_mode)
    msg_id = msg_id.strip().upper()

    async def action(s: AdminSession) -> None:
        msg, why = await _view_by_offset_id(s, msg_id)
        if msg is None and topic:
            hits = await query_by_key(s, topic, msg_id, 32, unique=True)
            msg = hits[0] if hits else None
            why = why or f"not in the index of {topic}"
        if msg is None:
            hint = "" if topic else " (a unique id needs -t TOPIC)"
            raise CliError(f"message {msg_id} not found: {why}{hint}")
        out.kv(f"message {msg_id}", message_detail(msg, body_limit))

    run_admin(namesrv, timeout_ms, action)


async def _view_by_offset_id(s: AdminSession, msg_id: str) -> tuple[MessageExt | None, str]:
    try:
        host, port, phys = decode_offset_msg_id(msg_id)
    except ValueError as exc:
        return None, f"not an offset message id ({exc})"
    if not 0 < port < 65536 or phys < 0:
        return None, "not an offset message id"
    try:
        resp = await s.call(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
    except CliError as exc:
        return None, exc.format_message()
    msgs = list(iter_records(resp.body or b""))
    return (msgs[0], "") if msgs else (None, "empty answer")


ADMIN_COMMANDS = [update_topic, delete_topic, topic_list, topic_route, topic_status, cluster_list, broker_status,
                  consumer_progress, reset_offset_by_time, query_msg_by_key, query_msg_by_id]
