"""The live members of this broker's group as the name servers see them (RIP-32), shared by the HA, pre-online
and strict-lock code: GET_BROKER_MEMBER_GROUP (901), or this group's entry of the cluster info on a name server
that does not know 901."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbitmq.base.errors import OrbitMQError
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import BrokerMemberGroup, ClusterInfo

if TYPE_CHECKING:
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)


async def fetch_group_members(client: RemotingClient, cfg: BrokerConfig,
                              timeout_ms: int = 3000) -> dict[int, str] | None:
    """{brokerId: addr} from the first name server that answers; None if none did."""
    for ns in cfg.namesrv_addrs:
        header = {"clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name}
        try:
            resp = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_MEMBER_GROUP, header),
                                       timeout_ms)
            if resp.code == ResponseCode.SUCCESS:
                return dict(BrokerMemberGroup.from_json(resp.body).broker_addrs) if resp.body else {}
            resp = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout_ms)
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                continue
            bd = ClusterInfo.from_json(resp.body).broker_addr_table.get(cfg.broker_name)
        except (OrbitMQError, OSError, ValueError, TypeError) as e:
            log.debug("member group from %s failed: %r", ns, e)
            continue
        return dict(bd.broker_addrs) if bd is not None else {}
    return None
