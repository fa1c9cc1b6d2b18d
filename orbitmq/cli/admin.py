"""Admin commands modelled on RocketMQ's mqadmin: topics, clusters and brokers here; consumer/producer groups in
admin_groups.py, messages in admin_messages.py, name-server settings in admin_config.py (ADMIN_COMMANDS lists them
all).

Every request goes through the SDK's admin client (orbitmq.client.Admin); these commands parse options and
render tables (rich on a terminal, aligned text in pipes) or `--json`. A broker error becomes
`orbitmq: error: <CODE_NAME>: <remark>` and exit 1; an unreachable server one line naming it, exit 1.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from orbitmq.base.errors import OrbitMQError
from orbitmq.cli import CliError, Output
from orbitmq.cli.admin_common import (
    DEFAULT_NAMESRV,
    LONG_MAX,
    AdminSession,
    BrokerError,
    body_text,
    check_topic,
    code_name,
    common_options,
    fmt_ms,
    message_detail,
    message_summary,
    parse_timestamp,
    run_admin,
)
from orbitmq.client.admin_base import ORDER_TOPIC_NAMESPACE
from orbitmq.model.enums import perm_to_string

__all__ = ["ADMIN_COMMANDS", "DEFAULT_NAMESRV", "LONG_MAX", "ORDER_TOPIC_NAMESPACE", "AdminSession", "BrokerError",
           "CLUSTER_COLUMNS", "LEASE_COLUMNS", "body_text", "cluster_rows", "code_name", "common_options",
           "fmt_ms", "lease_columns", "message_detail", "message_summary", "parse_timestamp", "run_admin"]


# ---- topics --------------------------------------------------------------------------------------------
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
    check_topic(topic)
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        if cluster is not None and not await s.admin.cluster_masters(cluster):
            raise CliError(f"cluster {cluster!r} has no master broker")
        targets = await s.admin.create_topic(topic, cluster=cluster, broker_addr=broker_addr,
                                             read_queue_nums=read_queues, write_queue_nums=write_queues, perm=perm,
                                             order=order)
        rows = [[name or "-", addr, topic, read_queues, write_queues, perm_to_string(perm), "OK"]
                for name, addr in targets]
        out.table(f"updateTopic {topic}", ["broker", "addr", "topic", "read", "write", "perm", "result"], rows,
                  numeric=("read", "write"))

    run_admin(namesrv, timeout_ms, action)


@click.command("updateTopicPerm")
@click.option("-t", "--topic", required=True)
@click.option("-p", "--perm", type=click.IntRange(0, 7), required=True, help="2 write, 4 read, 6 read+write")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@click.option("-b", "--broker-addr", default=None, help="this broker (ip:port)")
@common_options
def update_topic_perm(topic: str, perm: int, cluster: str | None, broker_addr: str | None, namesrv: str,
                      json_mode: bool, timeout_ms: int) -> None:
    """Change a topic's permission, keeping its queue counts."""
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER_ADDR")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        route = await s.admin.topic_route(topic)
        targets = [("", broker_addr)] if broker_addr else await s.admin.cluster_masters(cluster)
        rows = []
        for name, addr in targets:
            names = [name] if name else [bd.broker_name for bd in route.broker_datas if addr in bd.broker_addrs.values()]
            qd = next((q for q in route.queue_datas if q.broker_name in names), None)
            if qd is None:
                raise CliError(f"topic {topic!r} is not on broker {name or addr}")
            await s.admin.create_topic(topic, broker_addr=addr, read_queue_nums=qd.read_queue_nums,
                                       write_queue_nums=qd.write_queue_nums, perm=perm)
            rows.append([name or qd.broker_name, addr, perm_to_string(qd.perm), perm_to_string(perm)])
        out.table(f"updateTopicPerm {topic}", ["broker", "addr", "oldPerm", "newPerm"], rows)

    run_admin(namesrv, timeout_ms, action)


@click.command("deleteTopic")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", default=None, help="cluster to delete from (default: every broker of the route)")
@common_options
def delete_topic(topic: str, cluster: str | None, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Delete a topic from the brokers and from every name server."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        targets = await s.admin.delete_topic(topic, cluster)
        out.table(f"deleteTopic {topic}", ["broker", "addr", "result"], [[n, a, "deleted"] for n, a in targets])

    run_admin(namesrv, timeout_ms, action)


@click.command("topicList")
@click.option("-c", "--cluster-mode", is_flag=True,
              help="one row per cluster, topic and consuming group (asks the brokers)")
@common_options
def topic_list(cluster_mode: bool, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """List every topic the name server knows (-c: with its cluster and consuming groups)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        if not cluster_mode:
            topics = await s.admin.topic_list()
            if json_mode:
                out.json(topics)
            else:
                out.table(None, ["topic"], [[t] for t in topics])
            return
        rows: list[list[Any]] = []
        clusters = sorted((await s.admin.cluster_info()).cluster_addr_table)
        for cluster in clusters:
            for t in await s.admin.topics_by_cluster(cluster):
                if t.startswith(("%RETRY%", "%DLQ%")):
                    continue  # as mqadmin: a group's own topics
                try:
                    groups = await s.admin.topic_consumer_groups(t)
                except OrbitMQError:
                    groups = []  # a cluster/broker name listed as a topic, or a topic without a master now
                rows += [[cluster, t, g] for g in groups] or [[cluster, t, None]]
        out.table(None, ["cluster", "topic", "consumerGroup"], rows)

    run_admin(namesrv, timeout_ms, action)


@click.command("topicRoute")
@click.option("-t", "--topic", required=True)
@common_options
def topic_route(topic: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Show a topic's route: brokers and queue counts."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        route = await s.admin.topic_route(topic)
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
        rows = [[mq.broker_name, mq.queue_id, lo, hi, hi - lo, fmt_ms(last)]
                for mq, lo, hi, last in await s.admin.topic_status(topic)]
        footer = ["total", "", "", "", sum(r[4] for r in rows), ""]
        out.table(f"status of {topic}", ["broker", "queue", "minOffset", "maxOffset", "messages", "lastUpdated"],
                  rows, footer=footer, numeric=("queue", "minOffset", "maxOffset", "messages"))

    run_admin(namesrv, timeout_ms, action)


@click.command("topicClusterList")
@click.option("-t", "--topic", required=True)
@common_options
def topic_cluster_list(topic: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """The clusters a topic is on."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        clusters = await s.admin.topic_cluster_list(topic)
        if json_mode:
            out.json(clusters)
        else:
            out.table(None, ["cluster"], [[c] for c in clusters])

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
# lease mode: runtime-info keys shown as columns when any broker reports them
LEASE_COLUMNS = ["leaseState", "leaseEpoch", "leaseRemainingMs", "leaseMaster"]


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


def lease_columns(infos: list[dict[str, str]]) -> tuple[list[str], list[list[Any]]]:
    """The lease-mode columns any broker reports (leaseState, leaseEpoch, leaseRemainingMs, leaseMaster) and each
    member's cells ("-" where a broker does not report one); ([], []) when none does."""
    columns = [c for c in LEASE_COLUMNS if any(c in ri for ri in infos)]
    if not columns:
        return [], []
    return columns, [[ri.get(c, "-") for c in columns] for ri in infos]


RAFT_COLUMNS = ["raftRole", "raftLeader", "term", "commitIndex", "raftLag"]


def raft_columns(infos: list[dict[str, str]]) -> tuple[list[str], list[list[Any]]]:
    """Raft broker groups (DLedger CommitLog mode): each member's Raft role, the leader it knows, term, commit index
    and its lag in entries behind its group's leader (from the leader's dLegerPeerLag; 0 for the leader, "-" when
    unknown); ([], []) when no broker is in a Raft group."""
    if not any("dLegerRole" in ri for ri in infos):
        return [], []
    lags: dict[tuple[str, str], str] = {}
    for ri in infos:
        if ri.get("dLegerRole") == "LEADER":
            group = ri.get("dLegerGroup", "")
            lags[(group, ri.get("dLegerSelfId", ""))] = "0"
            for item in ri.get("dLegerPeerLag", "").split(";"):
                peer, _, lag = item.partition(":")
                if peer:
                    lags[(group, peer)] = lag
    rows = [[ri.get("dLegerRole", "-"), ri.get("dLegerLeaderId", "-") or "-", ri.get("dLegerTerm", "-"),
             ri.get("dLegerCommitIndex", "-"), lags.get((ri.get("dLegerGroup", ""), ri.get("dLegerSelfId", "")), "-")]
            for ri in infos]
    return list(RAFT_COLUMNS), rows


@click.command("clusterList")
@common_options
def cluster_list(namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Every broker of every cluster: version, throughput, role, replication lag, RIP-32 acting-master state;
    in controller mode also the master epoch and SyncStateSet membership, in lease mode the lease state (when
    the brokers report them)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        members = await s.admin.cluster_brokers()

        async def runtime(addr: str) -> dict[str, str]:
            try:
                return await s.admin.broker_runtime_info(addr)
            except Exception:  # noqa: BLE001 - an unreachable member is a row of "-"
                return {}

        infos = list(await asyncio.gather(*(runtime(m[3]) for m in members)))
        from orbitmq.cli.controller_admin import epoch_columns  # that module imports this one

        rows = cluster_rows(members, infos)
        columns = list(CLUSTER_COLUMNS)
        for extra_columns, extra in (epoch_columns(members, infos), lease_columns(infos), raft_columns(infos)):
            if extra_columns:
                rows = [r + e for r, e in zip(rows, extra, strict=True)]
                columns += extra_columns
        out.table("clusters", columns, rows, numeric=("BID", "inTPS", "outTPS", "putToday", "getToday", "lagBytes",
                                                      "epoch", "leaseEpoch", "leaseRemainingMs", "term",
                                                      "commitIndex", "raftLag"))

    run_admin(namesrv, timeout_ms, action)


async def broker_targets(s: AdminSession, broker_addr: str | None, cluster: str | None) -> list[str]:
    """-b, else every master of -c, else the only registered broker (an error naming them when there are more)."""
    if broker_addr:
        return [broker_addr]
    if cluster:
        masters = await s.admin.cluster_masters(cluster)
        if not masters:
            raise CliError(f"cluster {cluster!r} has no master broker")
        return [addr for _, addr in masters]
    return [await s.admin.only_broker()]


@click.command("brokerStatus")
@click.option("-b", "--broker-addr", default=None, help="broker ip:port (default: the only broker)")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@common_options
def broker_status(broker_addr: str | None, cluster: str | None, namesrv: str, json_mode: bool,
                  timeout_ms: int) -> None:
    """A broker's runtime info (GET_BROKER_RUNTIME_INFO) as key/value pairs. A broker that is still starting (it
    is not registered yet: name it with -b) shows its start-up progress instead, and the command exits 1."""
    if cluster is not None and broker_addr is not None:
        raise click.UsageError("give at most one of -b BROKER_ADDR or -c CLUSTER")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        result: dict[str, dict[str, str]] = {}
        starting: dict[str, str] = {}
        for addr in await broker_targets(s, broker_addr, cluster):
            result[addr], remark = await s.admin.broker_status(addr)
            if remark is not None:
                starting[addr] = remark
        if json_mode:
            out.json(result if cluster else next(iter(result.values())))
        else:
            for addr, info in result.items():
                out.kv(f"broker {addr}" + (" (starting)" if addr in starting else ""), sorted(info.items()))
        if starting:
            raise CliError("; ".join(f"{addr}: {remark}" for addr, remark in starting.items()))

    run_admin(namesrv, timeout_ms, action)


@click.command("getBrokerConfig")
@click.option("-b", "--broker-addr", default=None, help="broker ip:port (default: the only broker)")
@click.option("-c", "--cluster", default=None, help="every master of this cluster")
@common_options
def get_broker_config(broker_addr: str | None, cluster: str | None, namesrv: str, json_mode: bool,
                      timeout_ms: int) -> None:
    """A broker's effective configuration (GET_BROKER_CONFIG)."""
    if cluster is not None and broker_addr is not None:
        raise click.UsageError("give at most one of -b BROKER_ADDR or -c CLUSTER")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        result = {addr: await s.admin.broker_config(addr) for addr in await broker_targets(s, broker_addr, cluster)}
        if json_mode:
            out.json(result if cluster else next(iter(result.values())))
            return
        for addr, conf in result.items():
            out.kv(f"config of {addr}", sorted(conf.items()))

    run_admin(namesrv, timeout_ms, action)


def _write_perm_command(name: str, wipe: bool) -> click.Command:
    verb = "Remove write permission from" if wipe else "Give write permission back to"

    @click.command(name, help=f"{verb} every topic of a broker group in every name server (the broker's next "
                              "registration may restore its own view).")
    @click.option("-b", "--broker-name", required=True, help="broker name, e.g. broker-a")
    @common_options
    def command(broker_name: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
        out = Output(json_mode)

        async def action(s: AdminSession) -> None:
            call = s.admin.wipe_write_perm if wipe else s.admin.add_write_perm
            rows = [[ns, broker_name, count] for ns, count in await call(broker_name)]
            out.table(f"{name} {broker_name}", ["namesrv", "broker", "topics"], rows, numeric=("topics",))

        run_admin(namesrv, timeout_ms, action)

    return command


wipe_write_perm = _write_perm_command("wipeWritePerm", True)
add_write_perm = _write_perm_command("addWritePerm", False)

TOPIC_AND_BROKER_COMMANDS = [update_topic, update_topic_perm, delete_topic, topic_list, topic_route, topic_status,
                             topic_cluster_list, cluster_list, broker_status, get_broker_config, wipe_write_perm,
                             add_write_perm]


def _all_commands() -> list[click.Command]:
    from orbitmq.cli.admin_config import CONFIG_COMMANDS
    from orbitmq.cli.admin_groups import GROUP_COMMANDS
    from orbitmq.cli.admin_messages import MESSAGE_COMMANDS

    return [*TOPIC_AND_BROKER_COMMANDS, *GROUP_COMMANDS, *MESSAGE_COMMANDS, *CONFIG_COMMANDS]


ADMIN_COMMANDS = _all_commands()
