"""LeaseSource: a lease row in a SQL database as the RoleSource of a ReplicasManager (controller_mode/role_source.py).

Every member of the group runs a LeaseElector (orbitmq/lease/) with its broker and HA addresses and a start-up nonce.
Its view is turned into the RoleInfo the controller would send:
- we hold the lease of epoch E -> master of epoch E (registered as brokerId 0; the epoch goes into the epoch file,
  every HA frame and the name-server DataVersion.stateVersion, exactly like a controller's master epoch);
- another candidate holds it -> slave of that holder's broker address at epoch E (HA address from its 906 answer);
- nobody holds it (expired, database unreachable) -> a master steps down (fenced); a slave stays a slave.
A master acknowledges writes only while the elector says may_acknowledge() (its local deadline, measured from before
the renewal was sent) for the epoch it switched to. Before a new master acknowledges anything it publishes itself as
the only sync member; a SyncStateSet change is published (LeaseElector.publish_sync_members, addresses) before the
master uses it, so a candidate that missed acknowledged writes is never named in-sync. Replica addresses are learnt
from the EXCHANGE_BROKER_HA_INFO handshake (slaves name themselves; masters answer their id).
Design: docs/design/lease-election.md ("Broker side").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from typing import TYPE_CHECKING, Any

from orbitmq.base.errors import ConfigError, OrbitMQError
from orbitmq.broker.controller_mode.role_source import Replica
from orbitmq.broker.controller_mode.rules import RoleInfo
from orbitmq.broker.lease_mode.identity import lease_broker_id
from orbitmq.protocol.bodies.controller import SyncStateSet
from orbitmq.store.results import PutStatus

if TYPE_CHECKING:
    from orbitmq.broker.controller_mode.replicas_manager import ReplicasManager

log = logging.getLogger(__name__)

POLL_S = 1.0  # the view is applied at least this often (a failed switch is retried sooner, through wake())
MASTER_ID = 0  # the id a master registers with; the holder's replica id is not in the lease row


class LeaseStartError(OrbitMQError):
    """The lease store cannot be used with these settings."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class LateAckGuard:
    """SendHook: a put that waited for its replica and completes when this broker no longer may acknowledge (its
    lease ended meanwhile, e.g. the process was paused, or it stepped down) is answered FLUSH_SLAVE_TIMEOUT (stored,
    not confirmed: the client may retry) instead of SEND_OK. write_fence only guards the moment before the append."""

    def __init__(self, source: LeaseSource) -> None:
        self.source = source
        self.refused = 0

    before_put_acts_on: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # never: skipped

    def before_put(self, conn: Any, req: Any, msgs: list[Any]) -> None:
        return None

    def after_put(self, conn: Any, req: Any, msgs: list[Any], result: Any) -> None:
        if result.status is not PutStatus.PUT_OK:
            return
        rm = self.source.rm
        if rm.role != "MASTER" or self.source.write_permit(self.source.clock.monotonic_ms(), rm.master_epoch):
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            self.refused += 1


class LeaseSource:
    kind = "lease"

    def __init__(self, rm: ReplicasManager) -> None:
        self.rm = rm
        self.clock = rm.clock
        cfg = rm.ctx.config
        self.id_path = os.path.join(rm.env.store_config.store_path_root_dir, "leaseBrokerId")
        self.nonce = secrets.token_hex(8)
        self.elector: Any = None
        self.peers: dict[int, str] = {}  # replica id -> broker address of the other members we have talked to
        self.dead_masters: set[str] = set()  # holders whose lease we saw end: not waited for when taking over
        self.published_epoch = -1  # the epoch whose holder (we) already published itself as the only sync member
        self.lease_name = cfg.lease_name_or_default
        self._wake: asyncio.Event | None = None
        self._applied_key: tuple[Any, ...] | None = None
        self.view_changes = 0
        self.ack_guard = LateAckGuard(self)
        rm.ctx.send_hooks.append(self.ack_guard)

    # ---- RoleSource -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        rm = self.rm
        cfg = rm.ctx.config
        rm.set_broker_id(lease_broker_id(self.id_path, cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr))
        self._wake = asyncio.Event()
        from orbitmq.lease import Candidate, LeaseConfig, LeaseElector, LeaseStoreError, open_config_store

        url = cfg.lease_store_url.strip()
        lcfg = LeaseConfig(url=url, name=self.lease_name, ttl_ms=cfg.lease_ttl_millis,
                           renew_interval_ms=cfg.lease_renew_interval_or_default, max_db_errors=cfg.lease_max_db_errors)
        me = Candidate(cfg.broker_addr, cfg.ha_server_addr, self.nonce)
        try:
            self.elector = LeaseElector(open_config_store(lcfg), lcfg, me, clock=self.clock.monotonic_ms)
            self.elector.subscribe(self._on_view)  # before start: the first view is delivered too
            await self.elector.start()
        except LeaseStoreError as e:  # wrong password, missing database, unreachable: one line, exit 2
            raise ConfigError(f"lease election cannot start: {_one_line(e)}") from None
        log.info("lease election: %s as candidate %s (replica id %s, nonce %s)", self.lease_name, cfg.broker_addr,
                 rm.broker_id, self.nonce)

    async def run(self) -> None:
        assert self._wake is not None
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._wake.wait()
                    woken = True
            self._wake.clear()
            try:
                await self._apply_view(self.elector.view(), force=woken)
            except OrbitMQError as e:
                self.rm.last_error = f"lease: {e}"
                log.info("lease view not applied: %r", e)

    async def stop(self) -> None:
        if self.elector is not None:
            with contextlib.suppress(Exception):
                await self.elector.stop(resign=True)

    def write_permit(self, now_ms: int, epoch: int) -> str | None:
        view = self.elector.view() if self.elector is not None else None
        if view is None or not view.is_master or view.epoch != epoch:
            return f"master of epoch {epoch} no longer holds the lease (fenced)"
        if not self.elector.may_acknowledge():
            return f"master of epoch {epoch}: lease not renewed in time (fenced)"
        return None

    def lease_remaining_ms(self, now_ms: int, epoch: int) -> int:
        view = self.elector.view() if self.elector is not None else None
        if view is None or not view.is_master or view.epoch != epoch or view.lease_remaining_ms is None:
            return 0
        return max(0, int(view.lease_remaining_ms))

    def drop_lease(self) -> None:
        return None  # the elector owns the lease; write_permit follows its view and the manager's epoch

    def applied(self, info: RoleInfo, send_ms: int | None) -> None:
        return None

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def elect(self) -> tuple[RoleInfo, int | None] | None:
        return None  # the elector challenges on its own when the lease expires

    async def alter_sync_state_set(self, proposed: set[int], master_epoch: int,
                                   sss_epoch: int) -> SyncStateSet | None:
        """Publish the members' addresses in the lease row first; the set takes effect only once that succeeded."""
        me = self.rm.broker_id
        addrs = [self.rm.ctx.config.broker_addr]
        for bid in sorted(proposed - {me} if me is not None else proposed):
            addr = self.peers.get(bid)
            if addr is None:
                log.info("SyncStateSet %s: replica %d has not named its address yet", sorted(proposed), bid)
                return None
            addrs.append(addr)
        view = self.elector.view()
        if not view.is_master or view.epoch != master_epoch:
            return None
        if not await self.elector.publish_sync_members(tuple(addrs)):
            log.info("SyncStateSet %s not published in the lease row: not applied", sorted(proposed))
            return None
        return SyncStateSet(frozenset(proposed), sss_epoch + 1)

    async def replicas(self) -> list[Replica]:
        return [Replica(bid, addr, addr not in self.dead_masters) for bid, addr in sorted(self.peers.items())]

    def peer_announced(self, broker_id: int, addr: str) -> None:
        if addr == self.rm.ctx.config.broker_addr or broker_id <= 0:
            return
        for other in [b for b, a in self.peers.items() if a == addr and b != broker_id]:
            del self.peers[other]
        if self.peers.get(broker_id) != addr:
            log.info("replica %d is %s", broker_id, addr)
        self.peers[broker_id] = addr
        self.dead_masters.discard(addr)

    def runtime(self) -> dict[str, str]:
        view = self.elector.view() if self.elector is not None else None
        out = {"leaseMode": "true", "leaseName": self.lease_name, "leaseBrokerId": str(self.rm.broker_id),
               "leaseNonce": self.nonce, "leaseViewChanges": str(self.view_changes),
               "leaseLateAcksRefused": str(self.ack_guard.refused)}
        if view is None:
            return {**out, "leaseState": "START", "leaseEpoch": "-1", "leaseMaster": ""}
        remaining = view.lease_remaining_ms if view.is_master and view.lease_remaining_ms is not None else 0
        return {**out, "leaseState": view.state.name, "leaseEpoch": str(view.epoch), "leaseRemainingMs": str(remaining),
                "leaseMaster": view.master_addr or "", "leaseDbOk": "true" if view.db_ok else "false",
                "leaseSyncMembers": ",".join(view.sync_members)}

    # ---- the elector's view -> RoleInfo ----------------------------------------------------------------------
    async def _on_view(self, view: Any) -> None:
        self.view_changes += 1
        if not view.is_master and self.rm.role == "MASTER" and self.rm.master_epoch >= 0:
            log.warning("lease of epoch %d lost (state %s): stepping down", self.rm.master_epoch, view.state.name)
        self.wake()

    def _info(self, view: Any) -> RoleInfo:
        rm = self.rm
        cfg = rm.ctx.config
        if view.is_master and view.epoch > 0:
            assert rm.broker_id is not None
            return RoleInfo(rm.broker_id, cfg.broker_addr, view.epoch, frozenset({rm.broker_id}), 0)
        if view.master_addr and view.master_addr != cfg.broker_addr and view.epoch > 0:
            return RoleInfo(MASTER_ID, view.master_addr, view.epoch, frozenset(), 0)
        # nobody holds the lease (or we cannot reach the database): a master steps down, a slave stays
        epoch = max(view.epoch, rm.master_epoch) if rm.role == "MASTER" else view.epoch
        return RoleInfo(None, None, epoch, frozenset(), 0)

    async def _apply_view(self, view: Any, *, force: bool) -> None:
        rm = self.rm
        info = self._info(view)
        key = (info.master_addr, info.master_epoch, rm.role, rm.master_epoch)
        if not force and key == self._applied_key:
            return
        self._applied_key = key
        if info.master_addr and rm.master_addr and rm.master_addr != info.master_addr:
            self.dead_masters.add(rm.master_addr)  # replaced: its lease ended
        if (info.master_addr == rm.ctx.config.broker_addr and info.master_epoch > rm.master_epoch
                and self.published_epoch != info.master_epoch):
            # a new master acknowledges nothing before the row names it the only in-sync member: the old set may
            # name a replica that will miss our writes
            if not await self.elector.publish_sync_members((rm.ctx.config.broker_addr,)):
                self._applied_key = None
                raise OrbitMQError(f"epoch {info.master_epoch}: sync members not published yet")
            self.published_epoch = info.master_epoch
        await rm.apply(info, None, "lease")
