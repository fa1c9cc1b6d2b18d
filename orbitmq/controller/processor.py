"""ControllerProcessor: decodes controller requests (904, 1001-1006, 1009-1013), runs them through the service's
read/write paths and encodes the answers. Bad headers or bodies -> SYSTEM_ERROR with the reason.

Owns no state: the replicated metadata is ReplicasInfoManager's, liveness the BrokerLiveTable's, sequencing and
leadership the service's. Never talks to Raft directly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from orbitmq.base.errors import ConfigError, ProtocolError
from orbitmq.base.properties import parse_properties
from orbitmq.controller.config import controller_config_from_properties
from orbitmq.controller.state import ControllerResult
from orbitmq.protocol import HeaderError, RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
    broker_names_from_body,
)

if TYPE_CHECKING:
    from orbitmq.controller.service import ControllerService

log = logging.getLogger(__name__)

Route = Callable[[object, RemotingCommand], Awaitable[RemotingCommand | None]]

CONTROLLER_CODES = frozenset({
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.UPDATE_CONTROLLER_CONFIG, RequestCode.GET_CONTROLLER_CONFIG, RequestCode.CLEAN_BROKER_DATA,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, RequestCode.CONTROLLER_APPLY_BROKER_ID,
})


def respond(cmd: RemotingCommand, r: ControllerResult) -> RemotingCommand:
    return cmd.response(r.code, r.remark, ext_fields=dict(r.header) or None, body=r.body)


class ControllerProcessor:
    def __init__(self, service: ControllerService) -> None:
        self.svc = service
        C = RequestCode
        self._routes: dict[int, Route] = {
            C.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            C.CONTROLLER_ELECT_MASTER: self.elect_master,
            C.CONTROLLER_REGISTER_BROKER: self.register_broker,
            C.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            C.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            C.CLEAN_BROKER_DATA: self.clean_broker_data,
            C.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            C.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
        }

    def handles(self, code: int) -> bool:
        return code in CONTROLLER_CODES

    def __call__(self, conn: object, cmd: RemotingCommand) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        """The remoting Handler: quick requests answered inline, leader requests as coroutines."""
        code = cmd.code
        try:
            if code == RequestCode.BROKER_HEARTBEAT:
                resp = self.heartbeat(conn, cmd)
                return None if cmd.is_oneway else resp
            if code == RequestCode.CONTROLLER_GET_METADATA_INFO:
                return self.get_metadata(cmd)
            if code == RequestCode.GET_CONTROLLER_CONFIG:
                return cmd.response(body=self.svc.config.to_properties().encode())
            if code == RequestCode.UPDATE_CONTROLLER_CONFIG:
                return self.update_config(cmd)
        except (HeaderError, ProtocolError, ConfigError, ValueError) as e:
            return self._bad(conn, cmd, e)
        route = self._routes.get(code)
        if route is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")
        return self._guarded(route, conn, cmd)

    async def _guarded(self, route: Route, conn: object, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            return await route(conn, cmd)
        except (HeaderError, ProtocolError, ValueError) as e:
            return self._bad(conn, cmd, e)

    @staticmethod
    def _bad(conn: object, cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        log.warning("controller request %d from %s rejected: %s", cmd.code, getattr(conn, "remote_addr", "?"), e)
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))

    # ---- local (any controller) ---------------------------------------------------------------------------
    def heartbeat(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        if h.broker_id is None:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST, "brokerId is null in the heartbeat")
        self.svc.on_heartbeat(conn, h)
        return cmd.response()

    def get_metadata(self, cmd: RemotingCommand) -> RemotingCommand:
        svc = self.svc
        leader = svc.leader_id
        peers = svc.config.peers
        header = GetMetaDataResponseHeader(
            svc.config.controller_dleger_group, leader or None, peers.get(leader) if leader else None,
            svc.is_serving, ";".join(f"{pid}:{addr}" for pid, addr in peers.items()))
        return cmd.response(ext_fields=header.to_ext())

    def update_config(self, cmd: RemotingCommand) -> RemotingCommand:
        """Runtime change of the tunable keys (not persisted); black-listed keys -> NO_PERMISSION."""
        props = parse_properties((cmd.body or b"").decode("utf-8", "replace"))
        if not props:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
        black = self.svc.config.black_list()
        refused = sorted({k for _, k, _ in props if k in black})
        if refused:
            return cmd.response(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {refused}")
        new, warnings = controller_config_from_properties(props, "UPDATE_CONTROLLER_CONFIG", self.svc.config)
        self.svc.update_config(new)
        log.info("controller config updated: %s", ", ".join(f"{k}={v}" for _, k, v in props))
        return cmd.response(remark="; ".join(warnings) or None)

    # ---- leader reads ---------------------------------------------------------------------------------------
    async def get_replica_info(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = GetReplicaInfoRequestHeader.from_ext(cmd.ext_fields)
        return respond(cmd, await self.svc.read(lambda: self.svc.state.get_replica_info(h)))

    async def get_sync_state_data(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        names = broker_names_from_body(cmd.body)
        return respond(cmd, await self.svc.read(lambda: self.svc.state.get_sync_state_data(names, self.svc.alive)))

    async def get_next_broker_id(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = GetNextBrokerIdRequestHeader.from_ext(cmd.ext_fields)
        return respond(cmd, await self.svc.read(lambda: self.svc.state.get_next_broker_id(h)))

    # ---- leader writes --------------------------------------------------------------------------------------
    async def alter_sync_state_set(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = AlterSyncStateSetRequestHeader.from_ext(cmd.ext_fields)
        body = SyncStateSet.from_json(cmd.body)
        r = await self.svc.write(lambda: self.svc.state.alter_sync_state_set(h, body, self.svc.alive))
        return respond(cmd, r)

    async def elect_master(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = ElectMasterRequestHeader.from_ext(cmd.ext_fields)
        r = await self.svc.write(lambda: self.svc.elect(h))
        if r.ok:
            self.svc.after_election(h.broker_name, r)
        return respond(cmd, r)

    async def register_broker(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerToControllerRequestHeader.from_ext(cmd.ext_fields)
        return respond(cmd, await self.svc.write(lambda: self.svc.state.register_broker(h, self.svc.alive)))

    async def apply_broker_id(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = ApplyBrokerIdRequestHeader.from_ext(cmd.ext_fields)
        return respond(cmd, await self.svc.write(lambda: self.svc.state.apply_broker_id(h)))

    async def clean_broker_data(self, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        h = CleanControllerBrokerDataRequestHeader.from_ext(cmd.ext_fields)
        return respond(cmd, await self.svc.write(lambda: self.svc.state.clean_broker_data(h, self.svc.alive)))


__all__ = ["CONTROLLER_CODES", "ControllerProcessor"]
