"""RIP-32 member group and acting master (service "acting_master").

Keeps the live members of this broker's group (GET_BROKER_MEMBER_GROUP, 901, every syncBrokerMemberGroupPeriod;
with compatibleWithOldNameSrv the brokerAddrs of the route of rmq_sys_SYNC_BROKER_MEMBER_<brokerName>) and reacts
at once to NOTIFY_MIN_BROKER_ID_CHANGE (905, pushed by a name server over the broker's outgoing connection; app.py
routes it to on_notify). A slave with enableSlaveActingMaster acts as master when no brokerId 0 is live and it has
the smallest live id: BrokerContext.acting_master flips and ctx.role_listeners run (the special services start or
stop — Java's changeSpecialServiceStatus). Pure state: ActingMasterState. Docs: docs/design/acting-master.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.services import ServiceEnv
from orbitmq.model.enums import Perm
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import TopicRouteData
from orbitmq.protocol.bodies.member_group import BrokerMemberGroup

log = logging.getLogger(__name__)

MASTER_ID = 0
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"  # Java TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX
REQUEST_TIMEOUT_MS = 3000


def member_group_topic(broker_name: str) -> str:
    return SYNC_BROKER_MEMBER_GROUP_PREFIX + broker_name


class ActingMasterState:
    """Who is alive in the group and whether this broker acts as master. No I/O.

    is_acting_master: the feature is on, this broker is a slave, no brokerId 0 is live and this broker's id is the
    smallest live id (this broker counts as live even before the name server lists it)."""

    def __init__(self, broker_id: int, is_slave: bool, enabled: bool) -> None:
        self.broker_id = broker_id
        self.is_slave = is_slave
        self.enabled = enabled
        self.member_addrs: dict[int, str] = {}
        self.min_broker_id: int = broker_id
        self.is_acting_master = False
        self.changes = 0

    def _recompute(self) -> bool:
        live = set(self.member_addrs) | {self.broker_id}
        self.min_broker_id = min(live)
        acting = self.enabled and self.is_slave and self.min_broker_id == self.broker_id and MASTER_ID not in live
        if acting == self.is_acting_master:
            return False
        self.is_acting_master = acting
        self.changes += 1
        return True

    def update_members(self, addrs: dict[int, str]) -> bool:
        """A fresh member group (901 or the compat route). True when is_acting_master changed."""
        self.member_addrs = dict(addrs)
        return self._recompute()

    def on_min_broker_id_change(self, min_broker_id: int | None, min_broker_addr: str | None,
                                offline_broker_addr: str | None) -> bool:
        """A 905 notice. True when is_acting_master changed. The next poll reconciles the full member list."""
        if offline_broker_addr:
            self.member_addrs = {i: a for i, a in self.member_addrs.items() if a != offline_broker_addr}
        if min_broker_id is not None:
            # every id below the announced minimum is gone; the minimum itself is live
            self.member_addrs = {i: a for i, a in self.member_addrs.items() if i >= min_broker_id}
            if min_broker_addr:
                self.member_addrs[min_broker_id] = min_broker_addr
        return self._recompute()

    def master_addr(self) -> str | None:
        return self.member_addrs.get(MASTER_ID)


def _opt_int(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class ActingMasterService:
    name = "acting_master"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        self.ctx = ctx
        self.env = env
        cfg = ctx.config
        self.state = ActingMasterState(cfg.broker_id, cfg.is_slave, cfg.enable_slave_acting_master)
        self.syncs = 0
        self.notices = 0
        self.last_error = ""
        ctx.runtime_extras.append(self.runtime)
        if cfg.enable_slave_acting_master:
            ctx.topics.create_system_topic(member_group_topic(cfg.broker_name), 1, int(Perm.INHERIT))

    # ---- service protocol ----
    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {}

    async def start(self) -> None:
        return None

    async def run(self) -> None:
        if not self.ctx.config.enable_slave_acting_master:
            return
        while True:
            try:
                await self.sync_once()
            except (OrbitMQError, ValueError, TypeError, OSError) as e:
                self.last_error = repr(e)
                log.debug("member group sync failed: %r", e)
            await asyncio.sleep(max(self.ctx.config.sync_broker_member_group_period, 50) / 1000)

    async def stop(self) -> None:
        return None

    # ---- member group ----
    async def fetch_member_group(self) -> dict[int, str] | None:
        """Live members of this group from the first name server that answers; None if none did."""
        cfg = self.ctx.config
        for ns in cfg.namesrv_addrs:
            try:
                if cfg.compatible_with_old_name_srv:
                    addrs = await self._fetch_compatible(ns)
                else:
                    addrs = await self._fetch_901(ns)
            except OrbitMQError as e:
                self.last_error = repr(e)
                continue
            if addrs is not None:
                return addrs
        return None

    async def _fetch_901(self, ns: str) -> dict[int, str] | None:
        cfg = self.ctx.config
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP,
                                      {"clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name})
        resp = await self.env.client.invoke(ns, cmd, REQUEST_TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS:
            self.last_error = f"901: code {resp.code} {resp.remark}"
            return None
        if not resp.body:
            return {}
        return BrokerMemberGroup.from_json(resp.body).broker_addrs

    async def _fetch_compatible(self, ns: str) -> dict[int, str] | None:
        cfg = self.ctx.config
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                      {"topic": member_group_topic(cfg.broker_name)})
        resp = await self.env.client.invoke(ns, cmd, REQUEST_TIMEOUT_MS)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return {}
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            self.last_error = f"route: code {resp.code} {resp.remark}"
            return None
        for bd in TopicRouteData.from_json(resp.body).broker_datas:
            if bd.broker_name == cfg.broker_name:
                return dict(bd.broker_addrs)
        return {}

    async def sync_once(self) -> bool:
        addrs = await self.fetch_member_group()
        if addrs is None:
            return False
        self.syncs += 1
        if self.state.update_members(addrs):
            self._apply("member group")
        return True

    def on_notify(self, ext: dict[str, str]) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (905) from a name server."""
        if ext.get("brokerName") not in (None, "", self.ctx.config.broker_name):
            return
        self.notices += 1
        changed = self.state.on_min_broker_id_change(_opt_int(ext.get("minBrokerId")),
                                                     ext.get("minBrokerAddr") or None,
                                                     ext.get("offlineBrokerAddr") or None)
        if changed:
            self._apply("notice")

    def _apply(self, why: str) -> None:
        acting = self.state.is_acting_master
        self.ctx.acting_master = acting
        log.warning("broker %s id %d %s acting master (%s; min live id %d)", self.ctx.config.broker_name,
                    self.ctx.config.broker_id, "is now" if acting else "is no longer", why, self.state.min_broker_id)
        for listener in list(self.ctx.role_listeners):
            try:
                listener(acting)
            except Exception:
                log.exception("acting-master listener failed")

    # ---- runtime info ----
    def runtime(self) -> dict[str, str]:
        return {"actingMaster": str(self.state.is_acting_master).lower(),
                "minBrokerId": str(self.state.min_broker_id)}


def create(ctx: BrokerContext, env: ServiceEnv) -> ActingMasterService:
    return ActingMasterService(ctx, env)
