"""Requests the console needs that the SDK's `Admin` does not offer: subscription-group tables, who consumes a
topic, reading a queue's messages between two offsets (no offset commit, no heartbeat), and the controller's
metadata and SyncStateSets. Each is one typed call over the shared `ClientInstance` (same sockets as Admin).
"""

from __future__ import annotations

from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin, broker_api
from orbitmq.client.broker_api import PULL_FLAG_SUBSCRIPTION, PullStatus, check
from orbitmq.client.instance import ClientInstance
from orbitmq.model import MessageExt, MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from orbitmq.protocol.acl_sign import SessionCredentials
from orbitmq.protocol.bodies import GroupList
from orbitmq.protocol.bodies.controller import (
    BrokerReplicasInfo,
    GetMetaDataResponseHeader,
    broker_names_body,
)

# the group a console pull names (as mqadmin's tools and rocketmq-dashboard): a built-in group of every broker
TOOLS_GROUP = "TOOLS_CONSUMER"
# built-in groups every broker reports; not shown as consumer groups
SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                           "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS"})


def is_system_group(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")


class SigningAdmin(Admin):
    """The SDK Admin on a client instance that signs every request with the console's access key (RocketMQ ACL);
    Admin itself takes no credentials yet. Without credentials it is the plain Admin."""

    def __init__(self, namesrv: str, *, instance_name: str | None = None,
                 credentials: SessionCredentials | None = None) -> None:
        super().__init__(namesrv, instance_name=instance_name)
        self.credentials = credentials

    async def start(self) -> None:
        if self._inst is None:
            self._inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials)


class ConsoleQueries:
    def __init__(self, namesrv: str, *, instance_name: str | None = None, timeout_ms: int = 5000,
                 credentials: SessionCredentials | None = None) -> None:
        self.namesrv = namesrv
        self.instance_name = instance_name
        self.timeout_ms = timeout_ms
        self.credentials = credentials
        self._inst: ClientInstance | None = None

    async def start(self) -> None:
        if self._inst is None:
            self._inst = await ClientInstance.acquire(self.namesrv, self.instance_name, self.credentials)

    async def close(self) -> None:
        inst, self._inst = self._inst, None
        if inst is not None:
            await inst.release()

    def _i(self) -> ClientInstance:
        if self._inst is None:
            raise OrbitMQError("console queries are not started")
        return self._inst

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None,
                    body: bytes | None = None) -> RemotingCommand:
        return check(await self._i().invoke(addr, RemotingCommand.request(code, ext, body), self.timeout_ms), addr)

    # ---- brokers ------------------------------------------------------------------------------------------
    async def subscription_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> its config (Java field names)."""
        resp = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table = (fastjson.loads(resp.body) or {}).get("subscriptionGroupTable") or {} if resp.body else {}
        return {str(k): dict(v) if isinstance(v, dict) else {} for k, v in table.items()}

    async def topic_consumers(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: groups online for the topic or holding offsets of it on this broker."""
        resp = await self._call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        return sorted(GroupList.from_json(resp.body).group_list) if resp.body else []

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first queue offset stored at or after the time."""
        return await broker_api.search_offset(self._i(), addr, mq, timestamp_ms, self.timeout_ms)

    async def read_queue(self, addr: str, mq: MessageQueue, begin: int, end: int, limit: int) -> list[MessageExt]:
        """Messages of one queue with begin <= queue offset < end, at most `limit`, oldest first (pulls that
        carry their own subscription and commit nothing)."""
        out: list[MessageExt] = []
        offset = begin
        while offset < end and len(out) < limit:
            header = broker_api.pull_header(TOOLS_GROUP, mq, offset, min(32, limit - len(out)),
                                            PULL_FLAG_SUBSCRIPTION, 0, 0, "*", 0)
            res = await broker_api.pull(self._i(), addr, header, self.timeout_ms, None)
            if res.status is not PullStatus.FOUND or not res.msgs:
                if res.status is PullStatus.OFFSET_ILLEGAL or res.next_begin_offset <= offset:
                    break
                offset = res.next_begin_offset
                continue
            out.extend(m for m in res.msgs if m.queue_offset < end)
            if res.next_begin_offset <= offset:
                break
            offset = res.next_begin_offset
        return out[:limit]

    # ---- controllers --------------------------------------------------------------------------------------
    async def controller_metadata(self, addr: str) -> GetMetaDataResponseHeader:
        resp = await self._call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
        return GetMetaDataResponseHeader.from_ext(resp.ext_fields)

    async def sync_state_data(self, leader: str, broker_names: list[str]) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA (1006) at the leader: master, epochs and replicas per broker name."""
        resp = await self._i().invoke(leader, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, broker_names_body(broker_names)), self.timeout_ms)
        if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
            raise OrbitMQError(f"{leader} is no longer the controller leader ({resp.remark})")
        return BrokerReplicasInfo.from_json(check(resp, leader).body)
