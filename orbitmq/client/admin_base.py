"""AdminBase: the request plumbing of the SDK's admin client (orbitmq.client.Admin) plus the name-server and
broker look-ups every admin operation starts from (routes, clusters, masters, runtime info, broker config, KV
config, write permission).

Errors: a non-success answer raises the client.errors class of its code (ResponseError: `code`, `remark`,
`addr`); an unreachable server raises base.errors.RemotingError naming the address. Nothing is printed here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.client.broker_api import check
from orbitmq.client.errors import NoRouteError
from orbitmq.client.instance import ClientInstance, session_credentials
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import cluster_credentials
from orbitmq.protocol.bodies import BrokerData, ClusterInfo, KVTable, TopicList, TopicRouteData

log = logging.getLogger(__name__)

ORDER_TOPIC_NAMESPACE = "ORDER_TOPIC_CONFIG"
LONG_MAX = (1 << 63) - 1


class AdminError(OrbitMQError):
    """An admin operation cannot be carried out as asked (unknown cluster, ambiguous broker, ...)."""


def ext_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def parse_properties_text(text: str) -> dict[str, str]:
    """A Java properties body (GET_BROKER_CONFIG): key=value lines, '#' comments skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


class AdminBase:
    def __init__(self, namesrv: str, *, instance_name: str | None = None, timeout_ms: int = 5000,
                 access_key: str | None = None, secret_key: str | None = None,
                 cluster_secret: str | None = None) -> None:
        """access_key/secret_key: an ACL account for broker requests; cluster_secret: sign name-server requests
        with it (a name server with clusterSecret refuses admin writes otherwise; docs/design/security.md)."""
        self.namesrv = namesrv
        self.instance_name = instance_name
        self.timeout_ms = timeout_ms
        self.namesrv_credentials = cluster_credentials(cluster_secret) if cluster_secret else None
        # RocketMQ ACL: sign every request; without an account, a cluster secret's holder signs as a broker would
        self.credentials = session_credentials(access_key, secret_key) or self.namesrv_credentials
        self._inst: ClientInstance | None = None

    async def start(self) -> None:
        if self._inst is None:
            self._inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials,
                                                      self.namesrv_credentials)

    async def close(self) -> None:
        inst, self._inst = self._inst, None
        if inst is not None:
            await inst.release()

    shutdown = close

    def _i(self) -> ClientInstance:
        if self._inst is None:
            raise OrbitMQError("admin is not started")
        return self._inst

    @property
    def namesrv_addrs(self) -> list[str]:
        return list(self._i().namesrv_addrs)

    # ---- raw requests ---------------------------------------------------------------------------------------
    async def request(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                      ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """One request to one server; header values may be str/int/bool (None values are left out). Raises the
        ResponseError of the answer's code unless it is in `ok`."""
        fields = {k: ext_value(v) for k, v in (ext or {}).items() if v is not None}
        cmd = RemotingCommand.request(code, fields or None, body)
        return check(await self._i().invoke(addr, cmd, self.timeout_ms), addr, tuple(ok))

    async def namesrv_request(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                              ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """To the name servers in turn; the next one only when the previous cannot be reached."""
        fields = {k: ext_value(v) for k, v in (ext or {}).items() if v is not None}
        resp = await self._i().invoke_namesrv(lambda: RemotingCommand.request(code, dict(fields) or None, body),
                                              self.timeout_ms)
        return check(resp, "namesrv", tuple(ok))

    async def every_namesrv(self, code: int, ext: dict[str, Any] | None = None,
                            ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> list[tuple[str, RemotingCommand]]:
        """The same request to every name server (writes that each one must see)."""
        return [(addr, await self.request(addr, code, ext, ok=ok)) for addr in self.namesrv_addrs]

    # kept for callers of the earlier private names
    async def _ns(self, code: int, ext: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> RemotingCommand:
        return await self.namesrv_request(code, ext, ok=ok)

    async def _broker(self, addr: str, code: int, ext: dict[str, str] | None = None,
                      body: bytes | None = None) -> RemotingCommand:
        return await self.request(addr, code, ext, body)

    # ---- name server --------------------------------------------------------------------------------------
    async def topic_route(self, topic: str) -> TopicRouteData:
        resp = await self.namesrv_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": topic, "acceptStandardJsonOnly": True})
        return TopicRouteData.from_json(resp.body)

    async def topic_list(self) -> list[str]:
        resp = await self.namesrv_request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(TopicList.from_json(resp.body).topic_list) if resp.body else []

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER: the topics on the cluster's brokers."""
        resp = await self.namesrv_request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return sorted(TopicList.from_json(resp.body).topic_list) if resp.body else []

    async def cluster_info(self) -> ClusterInfo:
        resp = await self.namesrv_request(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.from_json(resp.body)

    async def cluster_brokers(self) -> list[tuple[str, str, int, str]]:
        """(cluster, broker_name, broker_id, addr) for every registered broker, sorted."""
        ci = await self.cluster_info()
        out = []
        for cluster, names in ci.cluster_addr_table.items():
            for name in names:
                bd = ci.broker_addr_table.get(name)
                if bd is None:
                    continue
                out.extend((cluster, name, bid, addr) for bid, addr in bd.broker_addrs.items())
        return sorted(out)

    async def cluster_masters(self, cluster: str | None = None) -> list[tuple[str, str]]:
        """(broker_name, master addr) of a cluster's broker groups (every cluster when None); an unknown cluster
        raises AdminError naming the known ones."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            known = ", ".join(sorted(info.cluster_addr_table)) or "-"
            raise AdminError(f"cluster {cluster!r} not found (known: {known})")
        names = (info.cluster_addr_table[cluster] if cluster is not None
                 else [n for ns in info.cluster_addr_table.values() for n in ns])
        out = []
        for name in sorted(set(names)):
            bd = info.broker_addr_table.get(name)
            master = bd.master_addr() if bd is not None else None
            if master:
                out.append((name, master))
        return out

    async def _master_addrs(self, cluster: str | None = None) -> list[str]:
        return sorted(addr for _, addr in await self.cluster_masters(cluster))

    async def topic_brokers(self, topic: str) -> list[BrokerData]:
        """The broker groups of a topic's route, by name (with or without a registered master)."""
        return sorted((await self.topic_route(topic)).broker_datas, key=lambda b: b.broker_name)

    async def topic_masters(self, topic: str) -> list[tuple[str, str]]:
        """(broker_name, master addr) for every broker group of the topic that has a master registered."""
        return [(bd.broker_name, bd.master_addr() or "") for bd in await self.topic_brokers(topic)
                if bd.master_addr()]

    _topic_masters = topic_masters

    async def broker_addr(self, broker_name: str) -> str:
        """The master address of a broker group, from the cluster table."""
        for name, addr in await self.cluster_masters():
            if name == broker_name:
                return addr
        raise NoRouteError(f"broker {broker_name!r} has no master registered with the name server")

    async def only_broker(self) -> str:
        """The address of the one registered broker; AdminError when there is none or several."""
        brokers = await self.cluster_brokers()
        if len(brokers) == 1:
            return brokers[0][3]
        if not brokers:
            raise AdminError("no broker is registered with the name server")
        listed = ", ".join(f"{name}/{bid}={addr}" for _, name, bid, addr in brokers)
        raise AdminError(f"{len(brokers)} brokers registered ({listed}): pick one with -b or a cluster with -c")

    async def topic_cluster_list(self, topic: str) -> list[str]:
        """The clusters whose brokers host the topic (mqadmin topicClusterList)."""
        bd = await self.topic_brokers(topic)
        names = {b.broker_name for b in bd}
        clusters = {b.cluster for b in bd if b.cluster}
        if not clusters:  # a route body without the cluster field: ask the cluster table
            info = await self.cluster_info()
            clusters = {c for c, ns in info.cluster_addr_table.items() if names & set(ns)}
        return sorted(clusters)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        await self.every_namesrv(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG from the name servers; None when the key is not set."""
        resp = await self.namesrv_request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key},
                                          ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        return (resp.ext_fields or {}).get("value") if resp.code == ResponseCode.SUCCESS else None

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """DELETE_KV_CONFIG on every name server (a missing key is not an error)."""
        await self.every_namesrv(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key},
                                 ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))

    async def namesrv_configs(self) -> dict[str, dict[str, str]]:
        """GET_NAMESRV_CONFIG of every name server: addr -> key -> text."""
        return {addr: parse_properties_text((resp.body or b"").decode("utf-8", errors="replace"))
                for addr, resp in await self.every_namesrv(RequestCode.GET_NAMESRV_CONFIG)}

    async def update_namesrv_config(self, props: dict[str, str]) -> list[tuple[str, str]]:
        """UPDATE_NAMESRV_CONFIG (runtime only) on every name server: (addr, remark)."""
        body = "".join(f"{k}={v}\n" for k, v in props.items()).encode()
        return [(addr, (await self.request(addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)).remark or "")
                for addr in self.namesrv_addrs]

    async def wipe_write_perm(self, broker_name: str) -> list[tuple[str, int]]:
        """WIPE_WRITE_PERM_OF_BROKER on every name server: (name server, topics changed)."""
        return await self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, "wipeTopicCount")

    async def add_write_perm(self, broker_name: str) -> list[tuple[str, int]]:
        """ADD_WRITE_PERM_OF_BROKER on every name server: (name server, topics changed)."""
        return await self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, "addTopicCount")

    async def _write_perm(self, code: int, broker_name: str, count_key: str) -> list[tuple[str, int]]:
        out = []
        for addr, resp in await self.every_namesrv(code, {"brokerName": broker_name}):
            raw = (resp.ext_fields or {}).get(count_key, "0")
            out.append((addr, int(raw) if raw.lstrip("-").isdigit() else 0))
        return out

    # ---- brokers ------------------------------------------------------------------------------------------
    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return _kv_body(await self.request(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO))

    async def broker_status(self, broker_addr: str) -> tuple[dict[str, str], str | None]:
        """GET_BROKER_RUNTIME_INFO of a running broker as (its runtime info, None); of a starting one as (its start-up
        progress, the answer's remark): a starting broker answers SERVICE_NOT_AVAILABLE with the progress as a
        KVTable body (startupPhase, the store recovery's step and bytes). Any other answer raises, as
        broker_runtime_info."""
        resp = await self.request(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO,
                                  ok=(ResponseCode.SUCCESS, ResponseCode.SERVICE_NOT_AVAILABLE))
        table = _kv_body(resp)
        if resp.code == ResponseCode.SUCCESS:
            return table, None
        if not table:  # shutting down, or refused without progress: the plain error
            check(resp, broker_addr, (ResponseCode.SUCCESS,))
        return table, resp.remark or "broker is starting"

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's effective configuration as key -> text."""
        resp = await self.request(broker_addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties_text((resp.body or b"").decode("utf-8", errors="replace"))


def _kv_body(resp: RemotingCommand) -> dict[str, str]:
    """A KVTable answer body (runtime info, start-up progress) as a dict; {} without a body."""
    return dict(KVTable.from_json(resp.body).table) if resp.body else {}
