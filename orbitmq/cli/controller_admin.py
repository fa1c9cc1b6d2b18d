"""mqadmin's RIP-44 controller commands: getControllerMetaData, getSyncStateSet, electMaster, getBrokerEpoch,
getControllerConfig, updateControllerConfig, cleanBrokerMetadata (same names and options as mqadmin).

`-a` takes one controller address or `a;b;c`: requests only the leader serves (1002, 1006, 1011) go to the leader
found with GET_METADATA_INFO (1005), retried on CONTROLLER_NOT_LEADER (2007) at the address its remark names.
Talks the wire protocol through admin.py's AdminSession; errors are one line and exit 1. Holds no state.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import click

from orbitmq.base.clock import REAL_CLOCK
from orbitmq.cli import CliError, Output
from orbitmq.cli.admin import LONG_MAX, AdminSession, BrokerError, common_options, fmt_ms, run_admin
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import ClusterInfo
from orbitmq.protocol.bodies.controller import (
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    ReplicasInfo,
    broker_names_body,
    parse_id_list,
)
from orbitmq.protocol.ext import HeaderError

_ADDR_RE = re.compile(r"([A-Za-z0-9_.\-]+:\d{1,5})")


def split_list(text: str | None) -> list[str]:
    """'a;b,c' -> ['a', 'b', 'c'] (mqadmin separates controller addresses with ';')."""
    return [p.strip() for p in re.split(r"[;,]", text or "") if p.strip()]


def leader_hint(remark: str | None) -> str | None:
    """The leader address a CONTROLLER_NOT_LEADER remark names ('... (leader n1 127.0.0.1:9868)'), if any."""
    found = _ADDR_RE.findall(remark or "")
    return found[-1] if found else None


class ControllerClient:
    """The controller addresses of `-a` over an AdminSession: per-node requests, and leader requests that find
    the leader (1005) and follow CONTROLLER_NOT_LEADER hints."""

    def __init__(self, session: AdminSession, controllers: str) -> None:
        self.s = session
        self.addrs = split_list(controllers)
        if not self.addrs:
            raise CliError("no controller address (use -a ip:port or 'ip:port;ip:port')")

    async def metadata(self, addr: str) -> GetMetaDataResponseHeader:
        resp = await self.s.call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
        return GetMetaDataResponseHeader.from_ext(resp.ext_fields)

    async def call_leader(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                          ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Send to the leader; on 2007 follow the remark's leader address (or ask 1005 again), a few times."""
        target = await self.find_leader()
        tried: list[str] = []
        last = ""
        for _ in range(len(self.addrs) + 3):
            tried.append(target)
            try:
                return await self.s.call(target, code, ext, body, ok)
            except BrokerError as exc:
                if exc.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    raise
                last = exc.format_message()
                hint = leader_hint(exc.remark)
                target = hint if hint and hint != target else await self.find_leader()
        raise CliError(f"{last} (tried {', '.join(tried)})")

    async def find_leader(self) -> str:
        """The first address that says it is the leader, else the leader address a reachable node names."""
        errors: list[CliError] = []
        named: str | None = None
        for addr in self.addrs:
            try:
                meta = await self.metadata(addr)
            except CliError as exc:
                errors.append(exc)
                continue
            if meta.is_leader:
                return addr
            named = named or meta.controller_leader_address
        if named:
            return named
        if len(errors) == len(self.addrs):
            raise errors[0] if len(errors) == 1 else CliError(
                f"no controller reachable: {'; '.join(e.format_message() for e in errors)}")
        raise CliError(f"no controller leader known to {';'.join(self.addrs)} (election in progress?)")

    async def each(self, code: int, ext: dict[str, Any] | None = None,
                   body: bytes | None = None) -> list[tuple[str, RemotingCommand | CliError]]:
        """The same request to every address (per-node commands); errors kept per address."""
        out: list[tuple[str, RemotingCommand | CliError]] = []
        for addr in self.addrs:
            try:
                out.append((addr, await self.s.call(addr, code, ext, body)))
            except CliError as exc:
                out.append((addr, exc))
        return out


def _only_successes(results: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Per-node results minus failures (each noted on stderr); the first failure raised when all failed."""
    good = [(a, r) for a, r in results if not isinstance(r, CliError)]
    bad = [(a, r) for a, r in results if isinstance(r, CliError)]
    if not good and bad:
        raise bad[0][1]
    for addr, err in bad:
        click.echo(f"orbitmq: note: {addr}: {err.format_message()}", err=True)
    return good


def controller_option(fn: Any) -> Any:
    return click.option("-a", "--controller-address", "--controllerAddress", "controllers", required=True,
                        help="controller address(es) 'ip:port' or 'ip:port;ip:port' (the leader is found)")(fn)


def _now_ms() -> int:
    return REAL_CLOCK.now_ms()


def repeat_options(fn: Any) -> Any:
    fn = click.option("--count", type=click.IntRange(min=0), default=0, show_default=True,
                      help="with -i: stop after this many prints (0 = until Ctrl-C)")(fn)
    return click.option("-i", "--interval", type=click.FloatRange(min=0.01), default=None,
                        help="print again every INTERVAL seconds (mqadmin's -i)")(fn)


async def repeat(interval: float | None, count: int, once: Callable[[], Awaitable[None]]) -> None:
    """once(), then again every `interval` seconds while `count` (0 = forever) allows; once only without -i."""
    done = 0
    while True:
        await once()
        done += 1
        if interval is None or (count and done >= count):
            return
        await asyncio.sleep(interval)


# ---- commands ----------------------------------------------------------------------------------------------
@click.command("getControllerMetaData")
@controller_option
@common_options
def get_controller_metadata(controllers: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Each controller's Raft group, its view of the leader, and the peers (GET_METADATA_INFO, 1005)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        c = ControllerClient(s, controllers)
        rows = []
        for addr, resp in _only_successes(await c.each(RequestCode.CONTROLLER_GET_METADATA_INFO)):
            m = GetMetaDataResponseHeader.from_ext(resp.ext_fields)
            rows.append([addr, m.group, m.controller_leader_id, m.controller_leader_address, m.is_leader, m.peers])
        out.table("controller metadata", ["controller", "group", "leaderId", "leaderAddress", "isLeader", "peers"],
                  rows)

    run_admin(namesrv, timeout_ms, action)


def sync_state_rows(info: BrokerReplicasInfo, names: Sequence[str]) -> list[list[Any]]:
    """One row per replica of each requested broker-set (in-sync first), or one row saying it is unknown."""
    rows: list[list[Any]] = []
    for name in names:
        ri: ReplicasInfo | None = info.replicas_info_table.get(name)
        if ri is None:
            rows.append([name, None, None, None, None, None, None, "unknown to the controller", None])
            continue
        head = [name, ri.master_broker_id, ri.master_address, ri.master_epoch, ri.sync_state_set_epoch]
        replicas = [(r, True) for r in ri.in_sync_replicas] + [(r, False) for r in ri.not_in_sync_replicas]
        if not replicas:
            rows.append([*head, None, None, "no replica", None])
        for r, in_sync in replicas:
            rows.append([*head, r.broker_id, r.broker_address, "in-sync" if in_sync else "not in-sync",
                         "alive" if r.alive else "dead"])
    return rows


SYNC_STATE_COLUMNS = ["brokerName", "masterId", "masterAddress", "masterEpoch", "syncStateSetEpoch", "brokerId",
                      "address", "state", "alive"]


@click.command("getSyncStateSet")
@controller_option
@click.option("-b", "--broker-name", "--brokerName", "broker_names", default=None, help="broker name(s) 'a,b' (or -c)")
@click.option("-c", "--cluster", "--clusterName", "cluster", default=None,
              help="every broker name of this cluster (asks the name server)")
@repeat_options
@common_options
def get_sync_state_set(controllers: str, broker_names: str | None, cluster: str | None, interval: float | None,
                       count: int, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Master, epochs and in-sync / not-in-sync replicas of broker-sets (GET_SYNC_STATE_DATA, 1006)."""
    if (broker_names is None) == (cluster is None):
        raise click.UsageError("give exactly one of -b BROKER_NAME[,...] or -c CLUSTER")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        names = split_list(broker_names) if broker_names else await _cluster_broker_names(s, cluster or "")
        c = ControllerClient(s, controllers)

        async def once() -> None:
            resp = await c.call_leader(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=broker_names_body(names))
            info = BrokerReplicasInfo.from_json(resp.body)
            if json_mode:
                out.json(info.to_json_obj())
                return
            out.table(_title("SyncStateSet", interval), SYNC_STATE_COLUMNS, sync_state_rows(info, names),
                      numeric=("masterId", "masterEpoch", "syncStateSetEpoch", "brokerId"))

        await repeat(interval, count, once)

    run_admin(namesrv, timeout_ms, action)


def _title(title: str, interval: float | None) -> str:
    return title if interval is None else f"{title} at {fmt_ms(_now_ms())}"


async def _cluster_broker_names(s: AdminSession, cluster: str) -> list[str]:
    info = await s.cluster_info()
    if cluster not in info.cluster_addr_table:
        known = ", ".join(sorted(info.cluster_addr_table)) or "-"
        raise CliError(f"cluster {cluster!r} not found (known: {known})")
    return sorted(info.cluster_addr_table[cluster])


@click.command("electMaster")
@controller_option
@click.option("-c", "--cluster", "--clusterName", "cluster", required=True, help="cluster name")
@click.option("-bn", "--broker-name", "--brokerName", "broker_name", required=True,
              help="broker name (mqadmin's -bn)")
@click.option("-b", "--broker-id", "--brokerId", "broker_id", type=int, required=True,
              help="controller id of the broker to make master")
@common_options
def elect_master(controllers: str, cluster: str, broker_name: str, broker_id: int, namesrv: str, json_mode: bool,
                 timeout_ms: int) -> None:
    """Make a chosen replica the master (ELECT_MASTER, 1002, designateElect=true): it must be alive and in the
    SyncStateSet (or any live replica with enableElectUncleanMaster)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        c = ControllerClient(s, controllers)
        header = ElectMasterRequestHeader(cluster, broker_name, broker_id, True, _now_ms())
        resp = await c.call_leader(RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext(),
                                   ok=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST))
        h = ElectMasterResponseHeader.from_ext(resp.ext_fields)
        body = ElectMasterResponseBody.from_json(resp.body) if resp.body else None
        members = body.broker_member_group.broker_addrs if body and body.broker_member_group else {}
        in_sync = ",".join(str(b) for b in sorted(body.sync_state_set)) if body else None
        result = "already master" if resp.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST else "elected"
        out.kv(f"electMaster {broker_name}", [
            ("result", result), ("masterBrokerId", h.master_broker_id), ("masterAddress", h.master_address),
            ("masterEpoch", h.master_epoch), ("syncStateSetEpoch", h.sync_state_set_epoch),
            ("syncStateSet", in_sync),
            ("members", " ".join(f"{bid}={addr}" for bid, addr in sorted(members.items())) or None)])

    run_admin(namesrv, timeout_ms, action)


def epoch_rows(name: str, bid: int, addr: str, cache: EpochEntryCache) -> list[list[Any]]:
    """getBrokerEpoch rows of one broker: one per epoch entry (the open last one shows its end as '-')."""
    if not cache.epoch_list:
        return [[name, bid, addr, None, None, None, cache.max_offset]]
    return [[name, bid, addr, e.epoch, e.start_offset, None if e.end_offset >= LONG_MAX else e.end_offset,
             cache.max_offset] for e in cache.epoch_list]


@click.command("getBrokerEpoch")
@click.option("-b", "--broker-name", "--brokerName", "broker_name", default=None,
              help="broker name (its members come from the name server)")
@click.option("-c", "--cluster", "--clusterName", "cluster", default=None, help="every broker group of this cluster")
@repeat_options
@common_options
def get_broker_epoch(broker_name: str | None, cluster: str | None, interval: float | None, count: int,
                     namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Each replica's epoch history: epoch, start and end offsets (GET_BROKER_EPOCH_CACHE, 1007, to brokers)."""
    if broker_name is None and cluster is None:
        raise click.UsageError("give -b BROKER_NAME or -c CLUSTER")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        async def once() -> None:
            rows = await _broker_epochs(s, _epoch_targets(await s.cluster_info(), broker_name, cluster))
            out.table(_title("broker epochs", interval), ["brokerName", "brokerId", "address", "epoch",
                                                           "startOffset", "endOffset", "maxOffset"], rows,
                      numeric=("brokerId", "epoch", "startOffset", "endOffset", "maxOffset"))

        await repeat(interval, count, once)

    run_admin(namesrv, timeout_ms, action)


async def _broker_epochs(s: AdminSession, targets: list[tuple[str, int, str]]) -> list[list[Any]]:
    """1007 to each (brokerName, id, addr); an unreachable member is a note unless every member is."""
    rows: list[list[Any]] = []
    errors: list[tuple[str, CliError]] = []
    for name, bid, addr in targets:
        try:
            resp = await s.call(addr, RequestCode.GET_BROKER_EPOCH_CACHE)
        except CliError as exc:
            errors.append((addr, exc))
            continue
        rows += epoch_rows(name, bid, addr, EpochEntryCache.from_json(resp.body))
    if errors and not rows:
        raise errors[0][1]
    for addr, err in errors:
        click.echo(f"orbitmq: note: {addr}: {err.format_message()}", err=True)
    return rows


def _epoch_targets(info: ClusterInfo, broker_name: str | None, cluster: str | None) -> list[tuple[str, int, str]]:
    if cluster is not None and cluster not in info.cluster_addr_table:
        raise CliError(f"cluster {cluster!r} not found (known: {', '.join(sorted(info.cluster_addr_table)) or '-'})")
    names = [broker_name] if broker_name else sorted(info.cluster_addr_table[cluster or ""])
    targets = []
    for name in names:
        bd = info.broker_addr_table.get(name)
        if bd is None or (cluster is not None and name not in info.cluster_addr_table[cluster]):
            raise CliError(f"broker {name!r} not found on the name server"
                           + (f" in cluster {cluster!r}" if cluster else ""))
        targets += [(name, bid, addr) for bid, addr in sorted(bd.broker_addrs.items())]
    return targets


@click.command("getControllerConfig")
@controller_option
@common_options
def get_controller_config(controllers: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Every setting of each controller (GET_CONTROLLER_CONFIG, 1010)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        c = ControllerClient(s, controllers)
        result = {addr: _properties((resp.body or b"").decode("utf-8", "replace"))
                  for addr, resp in _only_successes(await c.each(RequestCode.GET_CONTROLLER_CONFIG))}
        if json_mode:
            out.json(result)
            return
        for addr, props in result.items():
            out.kv(f"controller {addr}", sorted(props.items()))

    run_admin(namesrv, timeout_ms, action)


def _properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!" and "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


@click.command("updateControllerConfig")
@controller_option
@click.option("-k", "--key", required=True, help="config key, e.g. enableElectUncleanMaster")
@click.option("-v", "--value", required=True)
@common_options
def update_controller_config(controllers: str, key: str, value: str, namesrv: str, json_mode: bool,
                             timeout_ms: int) -> None:
    """Change a setting on every listed controller at runtime (UPDATE_CONTROLLER_CONFIG, 1009; not persisted)."""
    if not key.strip() or any(ch in key for ch in "=:\n "):
        raise click.BadParameter(f"{key!r} is not a config key", param_hint="-k")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        c = ControllerClient(s, controllers)
        body = f"{key}={value}\n".encode()
        rows = []
        for addr, resp in await c.each(RequestCode.UPDATE_CONTROLLER_CONFIG, body=body):
            if isinstance(resp, CliError):
                raise CliError(f"{addr}: {resp.format_message()}" + (f" (updated: {', '.join(r[0] for r in rows)})"
                                                                      if rows else ""))
            rows.append([addr, key, value, resp.remark or "updated"])
        out.table("updateControllerConfig", ["controller", "key", "value", "result"], rows)

    run_admin(namesrv, timeout_ms, action)


@click.command("cleanBrokerMetadata")
@controller_option
@click.option("-c", "--cluster", "--clusterName", "cluster", default=None, help="cluster name")
@click.option("-bn", "--broker-name", "--brokerName", "broker_name", required=True,
              help="broker name (mqadmin's -bn)")
@click.option("-b", "--broker-ids", "--brokerControllerIdsToClean", "broker_ids", default=None,
              help="controller ids to clean '1;2' (default: the whole set)")
@click.option("-l", "--clean-living", "--cleanLivingBroker", "clean_living", is_flag=True,
              help="also clean brokers that are alive")
@common_options
def clean_broker_metadata(controllers: str, cluster: str | None, broker_name: str, broker_ids: str | None,
                          clean_living: bool, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Remove replicas (or a whole broker-set) from the controller's metadata (CLEAN_BROKER_DATA, 1011)."""
    try:
        ids = parse_id_list(broker_ids)
    except HeaderError:
        raise click.BadParameter(f"{broker_ids!r}: expected ids separated by ';' (e.g. \"1;2\")",
                                 param_hint="-b") from None
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        c = ControllerClient(s, controllers)
        id_text = ";".join(str(i) for i in sorted(ids)) or None
        header = CleanControllerBrokerDataRequestHeader(broker_name, cluster, id_text, clean_living, _now_ms())
        await c.call_leader(RequestCode.CLEAN_BROKER_DATA, header.to_ext())
        what = f"ids {id_text}" if id_text else "the whole broker-set"
        out.kv(f"cleanBrokerMetadata {broker_name}", [("brokerName", broker_name), ("cleaned", what),
                                                      ("result", "success")])

    run_admin(namesrv, timeout_ms, action)


# ---- clusterList columns -----------------------------------------------------------------------------------
_ID_RE = re.compile(r"\d+")


def epoch_columns(members: Sequence[tuple[str, str, int, str]],
                  infos: Sequence[dict[str, str]]) -> tuple[list[str], list[list[Any]]]:
    """clusterList's extra (columns, cells per member): `epoch` when any broker reports `masterEpoch` in its runtime
    info, `inSync` when any reports `syncStateSet` ("yes"/"no": the member's id is in the ids its group's master
    reports; the master itself always is; "-" when the group's master does not report it). ([], []) when neither
    key is reported, so such clusters keep their columns."""
    columns = [c for c, key in (("epoch", "masterEpoch"), ("inSync", "syncStateSet"))
               if any(key in ri for ri in infos)]
    if not columns:
        return [], []
    master_set: dict[str, set[int]] = {}
    for (_, name, bid, _), ri in zip(members, infos, strict=True):
        if bid == 0 and "syncStateSet" in ri:
            master_set[name] = {int(x) for x in _ID_RE.findall(ri["syncStateSet"])}
    cells = []
    for (_, name, bid, _), ri in zip(members, infos, strict=True):
        ids = master_set.get(name)
        row = {"epoch": ri.get("masterEpoch", "-"),
               "inSync": "-" if ids is None else ("yes" if bid == 0 or bid in ids else "no")}
        cells.append([row[c] for c in columns])
    return columns, cells


CONTROLLER_ADMIN_COMMANDS = [get_controller_metadata, get_sync_state_set, elect_master, get_broker_epoch,
                             get_controller_config, update_controller_config, clean_broker_metadata]
