"""Lease election, broker side (broker/lease_mode/): the ReplicasManager driven by a LeaseSource whose elector is
replaced by a scripted one (the LeaseElector's own rules are tested in tests/unit/lease/). Fenced until the lease
names a role; the holder becomes master of the lease epoch (brokerId 0, epoch file, stateVersion) only after it
published itself as the only sync member; it acknowledges writes only while may_acknowledge(); a SyncStateSet change
takes effect only once published; losing the lease steps down; another holder makes us its slave. Plus the persisted
replica id and the broker.conf keys. No sockets and no database."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from pathlib import Path
from typing import Any

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.config_file import build_configs
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.controller_mode.replicas_manager import FENCED, MASTER, SLAVE, ReplicasManager
from orbitmq.broker.controller_mode.wire import runtime
from orbitmq.broker.lease_mode.identity import derive_id, lease_broker_id
from orbitmq.broker.lease_mode.source import LeaseSource
from orbitmq.broker.services import ServiceEnv
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from tests.unit.broker.test_replicas_manager import Clock, make_ctx

ME, OTHER = "127.0.0.1:10911", "127.0.0.1:20911"


class State(enum.Enum):
    START = 0
    HEARTBEAT = 1
    OFFLINE = 5


@dataclasses.dataclass(frozen=True)
class View:
    state: State = State.START
    epoch: int = 0
    is_master: bool = False
    master_addr: str | None = None
    master_ha_addr: str | None = None
    master_nonce: str | None = None
    lease_remaining_ms: int | None = None
    db_ok: bool = True
    sync_members: tuple[str, ...] = ()


class ScriptedElector:
    """What LeaseSource needs of a LeaseElector, set by the test."""

    def __init__(self) -> None:
        self.current = View()
        self.ack = True
        self.publish_ok = True
        self.published: list[tuple[str, ...]] = []

    def view(self) -> View:
        return self.current

    def may_acknowledge(self) -> bool:
        return self.ack and self.current.is_master

    async def publish_sync_members(self, members: tuple[str, ...]) -> bool:
        if self.publish_ok:
            self.published.append(tuple(members))
            self.current = dataclasses.replace(self.current, sync_members=tuple(members))
        return self.publish_ok

    async def stop(self, resign: bool = True) -> None:
        return None


class HaInfoClient:
    """The other broker answers EXCHANGE_BROKER_HA_INFO as a master with id 77; everything else succeeds."""

    def __init__(self) -> None:
        self.invoked: list[tuple[str, RemotingCommand]] = []

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        return None

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        self.invoked.append((addr, cmd))
        if cmd.code == RequestCode.EXCHANGE_BROKER_HA_INFO:
            return cmd.response(ext_fields={"masterHaAddress": "127.0.0.1:1", "masterAddress": addr,
                                            "orbitMasterBrokerId": "77"})
        return cmd.response()


def make(tmp_path: Path, **cfg_kw: Any) -> tuple[ReplicasManager, LeaseSource, ScriptedElector, BrokerContext]:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", listen_port=10911, enable_lease_election=True,
                       lease_store_url="sqlite:///unused", broker_role="SLAVE", broker_id=0, **cfg_kw)
    ctx, scfg, config_dir = make_ctx(tmp_path, cfg)
    rm = ReplicasManager(ctx, ServiceEnv(Clock(), HaInfoClient(), config_dir, scfg),  # type: ignore[arg-type]
                         LeaseSource)
    src = rm.source
    assert isinstance(src, LeaseSource)
    elector = ScriptedElector()
    src.elector = elector
    rm.set_broker_id(lease_broker_id(src.id_path, cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr))
    return rm, src, elector, ctx


def test_holder_becomes_master_of_the_lease_epoch_after_publishing_itself(tmp_path: Path) -> None:
    rm, src, elector, ctx = make(tmp_path)

    async def scenario() -> None:
        try:
            assert rm.role == FENCED and ctx.isolated and ctx.write_fence() is not None
            await src._apply_view(elector.view(), force=True)  # no holder yet: still fenced
            assert rm.role == FENCED and ctx.read_fence() is not None
            elector.publish_ok = False
            elector.current = View(State.HEARTBEAT, 5, True, ME, "127.0.0.1:10912", "n", 2000)
            with pytest.raises(Exception, match="sync members not published"):
                await src._apply_view(elector.view(), force=True)
            assert rm.role == FENCED  # not master before the row names it the only in-sync member
            elector.publish_ok = True
            await src._apply_view(elector.view(), force=True)
            assert elector.published == [(ME,)]
            assert rm.role == MASTER and rm.master_epoch == 5 and not ctx.isolated
            assert ctx.config.broker_role == "SYNC_MASTER" and ctx.config.broker_id == 0
            assert ctx.store.epoch_entries[-1][0] == 5 and ctx.topics.data_version.state_version == 5
            assert ctx.write_fence() is None
            elector.ack = False  # local deadline passed without a renewal
            code, remark = ctx.write_fence() or (0, "")
            assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "not renewed in time" in remark
            elector.ack = True
            info = runtime(rm)
            assert info["leaseState"] == "HEARTBEAT" and info["leaseEpoch"] == "5" and info["leaseMaster"] == ME
            assert info["leaseRemainingMs"] == "2000" and info["controllerRole"] == "MASTER"
            assert info["leaseBrokerId"] == str(rm.broker_id)
            # the lease is lost (expired, database unreachable): step down, writes refused
            elector.current = View(State.OFFLINE, 5, False, None, db_ok=False)
            await src._apply_view(elector.view(), force=False)
            assert rm.role == FENCED and ctx.write_fence() is not None and ctx.config.is_slave
        finally:
            await rm.stop()

    asyncio.run(scenario())


def test_another_holder_makes_us_its_slave_and_a_newer_epoch_replaces_the_master(tmp_path: Path) -> None:
    rm, src, elector, ctx = make(tmp_path)
    client = rm.env.client

    async def scenario() -> None:
        try:
            elector.current = View(State.HEARTBEAT, 3, True, ME, "h", "n", 2000)
            await src._apply_view(elector.view(), force=True)
            assert rm.role == MASTER
            # SIGSTOP'd past its TTL: the other node took epoch 4; on waking this one refuses writes at once
            elector.current = View(State.HEARTBEAT, 4, False, OTHER, "127.0.0.1:1", "m", None)
            assert ctx.write_fence() is not None  # the view no longer names us: fenced before the switch
            await src._apply_view(elector.view(), force=False)
            assert rm.role == SLAVE and rm.master_epoch == 4 and rm.master_addr == OTHER
            assert ctx.config.is_slave and ctx.config.broker_id == rm.broker_id != 0
            asked = [c for a, c in client.invoked if c.code == RequestCode.EXCHANGE_BROKER_HA_INFO]
            assert asked[0].ext_fields["orbitSlaveAddress"] == ME
            assert asked[0].ext_fields["orbitSlaveBrokerId"] == str(rm.broker_id)
            assert src.peers == {77: OTHER}  # the master answered its replica id
            assert ctx.store.epoch_entries[-1][0] <= 4
            # an older epoch never moves us back
            elector.current = View(State.HEARTBEAT, 3, True, ME, "h", "n", 2000)
            await src._apply_view(elector.view(), force=True)
            assert rm.role == SLAVE and rm.master_epoch == 4
            # the old master is gone: we take epoch 5, it is not waited for (no offset pull from a dead member)
            elector.current = View(State.HEARTBEAT, 5, True, ME, "h", "n", 2000)
            await src._apply_view(elector.view(), force=True)
            assert rm.role == MASTER and rm.master_epoch == 5
            assert [r.alive for r in await src.replicas()] == [False]
        finally:
            await rm.stop()

    asyncio.run(scenario())


def test_sync_state_set_takes_effect_only_once_published(tmp_path: Path) -> None:
    rm, src, elector, ctx = make(tmp_path, all_ack_in_sync_state_set=True)

    async def scenario() -> None:
        try:
            elector.current = View(State.HEARTBEAT, 2, True, ME, "h", "n", 2000)
            await src._apply_view(elector.view(), force=True)
            me = rm.broker_id
            assert me is not None and rm.sync_state_set == {me}
            await rm._report_sync_state_set({me, 9})  # replica 9 never named its address: refused
            assert rm.sync_state_set == {me} and elector.published == [(ME,)]
            handlers = rm.handlers()
            resp = handlers[RequestCode.EXCHANGE_BROKER_HA_INFO](None, RemotingCommand.request(
                RequestCode.EXCHANGE_BROKER_HA_INFO, {"orbitSlaveAddress": OTHER, "orbitSlaveBrokerId": "9"}))
            assert resp.ext_fields["masterHaAddress"] and resp.ext_fields["orbitMasterBrokerId"] == str(me)
            elector.publish_ok = False
            await rm._report_sync_state_set({me, 9})
            assert rm.sync_state_set == {me}
            elector.publish_ok = True
            await rm._report_sync_state_set({me, 9})
            assert rm.sync_state_set == {me, 9} and elector.published[-1] == (ME, OTHER)
            await rm._report_sync_state_set({me})  # shrink: published before it is used
            assert rm.sync_state_set == {me} and elector.published[-1] == (ME,)
        finally:
            await rm.stop()

    asyncio.run(scenario())


def test_replica_id_is_stable_nonzero_and_belongs_to_its_group(tmp_path: Path) -> None:
    path = str(tmp_path / "leaseBrokerId")
    first = lease_broker_id(path, "C", "b", ME)
    assert first == derive_id(ME) and 0 < first < 2 ** 31
    assert lease_broker_id(path, "C", "b", "10.0.0.9:1") == first  # persisted, not re-derived
    assert derive_id(OTHER) != first
    with pytest.raises(ConfigError, match="belongs to C/b"):
        lease_broker_id(path, "C", "other", ME)


def test_lease_keys_in_broker_conf(tmp_path: Path) -> None:
    props = {"enableLeaseElection": "true", "leaseStoreUrl": "postgresql://u:p@127.0.0.1:5432/db",
             "leaseTtlMillis": "3000", "brokerRole": "ASYNC_MASTER", "brokerId": "3", "brokerClusterName": "C",
             "brokerName": "b", "storePathRootDir": str(tmp_path)}

    def build(**extra: str) -> tuple[BrokerConfig, list[str]]:
        broker, _, warnings = build_configs({**props, **extra}, base_dir=str(tmp_path))
        return broker, warnings

    broker, warnings = build()
    assert broker.enable_lease_election and broker.lease_ttl_millis == 3000
    assert broker.lease_renew_interval_or_default == 1000 and broker.lease_max_db_errors == 3
    assert broker.lease_name_or_default == "C/b" and broker.is_slave and broker.dynamic_role
    assert any("brokerRole ASYNC_MASTER ignored" in w for w in warnings)
    assert any("brokerId 3 ignored" in w for w in warnings)
    with pytest.raises(ConfigError, match="cannot both be true"):
        build(enableControllerMode="true", controllerAddr="127.0.0.1:9878")
    with pytest.raises(ConfigError, match="leaseStoreUrl"):
        build(leaseStoreUrl="")
    with pytest.raises(ConfigError, match="leaseRenewIntervalMillis"):
        build(leaseRenewIntervalMillis="3000")


def test_a_put_completing_after_the_lease_ended_is_not_acknowledged(tmp_path: Path) -> None:
    from orbitmq.store.results import PutResult, PutStatus

    rm, src, elector, ctx = make(tmp_path)

    async def scenario() -> None:
        try:
            assert src.ack_guard in ctx.send_hooks
            elector.current = View(State.HEARTBEAT, 2, True, ME, "h", "n", 2000)
            await src._apply_view(elector.view(), force=True)
            ok = PutResult(PutStatus.PUT_OK)
            src.ack_guard.after_put(None, None, [], ok)
            assert ok.status is PutStatus.PUT_OK  # lease valid: acknowledged
            elector.ack = False  # the put waited for its replica past the local deadline
            late = PutResult(PutStatus.PUT_OK)
            src.ack_guard.after_put(None, None, [], late)
            assert late.status is PutStatus.FLUSH_SLAVE_TIMEOUT and runtime(rm)["leaseLateAcksRefused"] == "1"
            elector.ack = True
            elector.current = View(State.HEARTBEAT, 3, False, OTHER, "127.0.0.1:1", "m", None)
            await src._apply_view(elector.view(), force=True)  # stepped down meanwhile
            after = PutResult(PutStatus.PUT_OK)
            src.ack_guard.after_put(None, None, [], after)
            assert after.status is PutStatus.FLUSH_SLAVE_TIMEOUT
        finally:
            await rm.stop()

    asyncio.run(scenario())
