"""Request handlers of controller mode on the broker's port: NOTIFY_BROKER_ROLE_CHANGED (1008),
EXCHANGE_BROKER_HA_INFO (906), GET_BROKER_EPOCH_CACHE (1007), GET_BROKER_RUNTIME_INFO (with the controller-mode
fields), UPDATE_CONSUMER_OFFSET (a master answers once the offset is published, a slave forwards it) and
ORBIT_REPLICATE_CONSUMER_OFFSETS (a member stores a master's batch). Translation only: state and decisions belong to
the ReplicasManager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.broker.controller_mode.offset_sync import apply_batch, decode_batch
from orbitmq.broker.handlers import admin as admin_handlers
from orbitmq.broker.handlers import offsets as offset_handlers
from orbitmq.broker.services.metadata_sync import is_forwarded
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import KVTable
from orbitmq.protocol.bodies.controller import EpochEntry, EpochEntryCache
from orbitmq.protocol.ext import HeaderError

if TYPE_CHECKING:
    from orbitmq.broker.controller_mode.replicas_manager import ReplicasManager

SLAVE_ADDR_KEY, SLAVE_ID_KEY, MASTER_ID_KEY = "orbitSlaveAddress", "orbitSlaveBrokerId", "orbitMasterBrokerId"
LONG_MAX = (1 << 63) - 1


def epoch_cache_body(rm: ReplicasManager) -> EpochEntryCache:
    cfg = rm.ctx.config
    store = rm.ctx.store
    entries = store.epoch_entries
    out = []
    for i, (epoch, start) in enumerate(entries):
        end = entries[i + 1][1] if i + 1 < len(entries) else LONG_MAX
        out.append(EpochEntry(epoch, start, end))
    return EpochEntryCache(cfg.broker_cluster_name, cfg.broker_name, rm.broker_id if rm.broker_id is not None else -1,
                           tuple(out), store.max_phys_offset)


def runtime(rm: ReplicasManager) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO additions in controller mode."""
    now = rm.clock.monotonic_ms()
    fence = rm.write_fence() or rm.read_fence()
    out = {
        "controllerRole": rm.role,
        "brokerRole": rm.ctx.config.broker_role,
        "brokerId": str(rm.ctx.config.broker_id),
        "masterEpoch": str(rm.master_epoch),
        "masterAddr": rm.master_addr or "",
        "syncStateSet": ",".join(map(str, sorted(rm.sync_state_set))),
        "syncStateSetEpoch": str(rm.sss_epoch),
        "leaseRemainingMs": str(rm.source.lease_remaining_ms(now, rm.master_epoch)),
        "haConfirmOffset": str(rm.ha.confirm_offset),
        "fenced": "true" if fence is not None else "false",
        "fenceReason": fence[1] if fence is not None else "",
        "roleChanges": str(rm.role_changes),
        "replicaMetadataSyncs": str(rm.metadata_syncs),
        "haServerAddr": rm.ctx.config.ha_server_addr,
        "controllerLastError": rm.last_error,
    }
    out.update(rm.source.runtime())
    for k, v in (*rm.ha.status().items(), *rm.publisher.status().items()):
        out.setdefault(k, v)
    return out


def handlers(rm: ReplicasManager) -> dict[int, Callable[..., Any]]:
    ctx = rm.ctx
    update_offset = offset_handlers.handlers(ctx)[RequestCode.UPDATE_CONSUMER_OFFSET]

    def notify_role_changed(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            rm.on_role_notify(cmd)
        except (HeaderError, ValueError, TypeError) as e:
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, f"bad role notification: {e}")
        return None if cmd.is_oneway else cmd.response()

    def exchange_ha_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cfg = ctx.config
        master = rm.role == "MASTER"
        ext = cmd.ext_fields or {}
        slave_addr, slave_id = ext.get(SLAVE_ADDR_KEY, ""), ext.get(SLAVE_ID_KEY, "")
        if master and slave_addr and slave_id.isdigit():
            rm.source.peer_announced(int(slave_id), slave_addr)
        return cmd.response(ext_fields={
            "masterHaAddress": cfg.ha_server_addr if master else "",
            "masterAddress": cfg.broker_addr if master else (rm.master_addr or ""),
            "masterFlushOffset": str(ctx.store.flushed_offset) if master else "0",
            MASTER_ID_KEY: str(rm.broker_id if rm.broker_id is not None else -1),
        })

    def epoch_cache(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=epoch_cache_body(rm).to_json())

    def runtime_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        table = admin_handlers.runtime_info(ctx, rm.boot_ms)
        table.update(runtime(rm))
        for extra in ctx.runtime_extras:
            table.update(extra())
        return cmd.response(body=KVTable(table).to_json())

    def update_consumer_offset(conn: Any, cmd: RemotingCommand) -> Any:
        ext = dict(cmd.ext_fields or {})
        try:
            resp = update_offset(conn, cmd)
        except HeaderError as e:
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if resp is not None and resp.code != ResponseCode.SUCCESS:
            return resp
        if not is_forwarded(ext):
            rm.forward_offset(ext)
        if resp is None or not ctx.offsets.gated:
            return resp
        return answer_when_published(cmd, resp, ext)

    async def answer_when_published(cmd: RemotingCommand, resp: RemotingCommand,
                                    ext: dict[str, str]) -> RemotingCommand:
        """A master answers a commit once every other SyncStateSet member holds it (or SYSTEM_BUSY after
        offset_sync.PUBLISH_WAIT_S: the value stays pending, the client's next commit carries it again)."""
        if await rm.publisher.wait_published(ext.get("consumerGroup", ""), ext.get("topic", ""),
                                             int(ext.get("queueId", "0"))):
            return resp
        return cmd.response(ResponseCode.SYSTEM_BUSY, "consumer offset not acknowledged by the SyncStateSet in time")

    def replicate_offsets(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """A member stores its master's batch; refused unless we are a slave of that master epoch (a deposed
        master's batch must not be acknowledged)."""
        try:
            epoch, batch = decode_batch(bytes(cmd.body or b""))
        except (ValueError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad offset batch: {e}")
        if rm.role != "SLAVE" or epoch != rm.master_epoch:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"not a slave of master epoch {epoch} (role {rm.role}, epoch {rm.master_epoch})")
        apply_batch(ctx.offsets, batch)
        return cmd.response()

    return {
        int(RequestCode.NOTIFY_BROKER_ROLE_CHANGED): notify_role_changed,
        int(RequestCode.EXCHANGE_BROKER_HA_INFO): exchange_ha_info,
        int(RequestCode.GET_BROKER_EPOCH_CACHE): epoch_cache,
        int(RequestCode.GET_BROKER_RUNTIME_INFO): runtime_info,
        int(RequestCode.UPDATE_CONSUMER_OFFSET): update_consumer_offset,
        int(RequestCode.ORBIT_REPLICATE_CONSUMER_OFFSETS): replicate_offsets,
    }
