"""Requests the console needs that the SDK's `Admin` has no method for: a broker's subscription-group table and
the controller's metadata and SyncStateSets. Each goes through `Admin.request` (same client instance, same
ACL signing, same error mapping).
"""

from __future__ import annotations

from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.client import Admin
from orbitmq.client.errors import ResponseError
from orbitmq.model import MessageExt, MessageQueue
from orbitmq.protocol import RequestCode, ResponseCode, fastjson
from orbitmq.protocol.bodies.controller import (
    BrokerReplicasInfo,
    GetMetaDataResponseHeader,
    broker_names_body,
)

# built-in groups every broker reports; not shown as consumer groups
SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                           "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_RMQ_SYS_TRANS"})


def is_system_group(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")


async def subscription_groups(admin: Admin, addr: str) -> dict[str, dict[str, Any]]:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> its config (Java field names)."""
    resp = await admin.request(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    table = (fastjson.loads(resp.body) or {}).get("subscriptionGroupTable") or {} if resp.body else {}
    return {str(k): dict(v) if isinstance(v, dict) else {} for k, v in table.items()}


async def read_messages(admin: Admin, mq: MessageQueue, addr: str, start: int, end: int,
                        limit: int) -> list[MessageExt]:
    """At most `limit` messages of one queue with start <= offset < end (Admin.read_queue: nothing committed)."""
    out: list[MessageExt] = []
    if end <= start or limit <= 0:
        return out
    async for m in admin.read_queue(mq, addr, start, end):
        out.append(m)
        if len(out) >= limit:
            break
    return out


async def controller_metadata(admin: Admin, addr: str) -> GetMetaDataResponseHeader:
    resp = await admin.request(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
    return GetMetaDataResponseHeader.from_ext(resp.ext_fields)


async def sync_state_data(admin: Admin, leader: str, broker_names: list[str]) -> BrokerReplicasInfo:
    """CONTROLLER_GET_SYNC_STATE_DATA (1006) at the leader: master, epochs and replicas per broker name."""
    try:
        resp = await admin.request(leader, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                   body=broker_names_body(broker_names))
    except ResponseError as e:
        if e.code == ResponseCode.CONTROLLER_NOT_LEADER:
            raise OrbitMQError(f"{leader} is no longer the controller leader ({e.remark})") from None
        raise
    return BrokerReplicasInfo.from_json(resp.body)
