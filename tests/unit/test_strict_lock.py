"""RIP-32 lockInStrictMode: the quorum rule (queue_locks) and the strict_lock service's forwarding, with the other
members of the replica group simulated by in-memory lock tables behind a fake remoting client (no sockets)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from orbitmq.base.errors import RemotingConnectError
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.queue_locks import (
    QueueLockTable,
    forward_targets,
    lock_quorum,
    quorum_granted,
    replica_count,
)
from orbitmq.broker.services.strict_lock import StrictLockService, create
from orbitmq.model.topic import MessageQueue
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import BrokerMemberGroup, LockBatchBody, LockBatchResponseBody

Q = [MessageQueue("T", "broker-a", i) for i in range(4)]
MASTER, SLAVE1, SLAVE2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


# ---- pure quorum rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("replicas", "quorum"), [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_quorum_is_more_than_half_of_the_replicas(replicas: int, quorum: int) -> None:
    assert lock_quorum(replicas) == quorum


def test_replica_count_prefers_the_configured_total() -> None:
    assert replica_count(3, 1) == 3  # configured: a member that is down still counts
    assert replica_count(0, 2) == 2  # derived from the largest group seen
    assert replica_count(0, 0) == 1


def test_quorum_granted_counts_each_member_once_per_queue() -> None:
    grants = [[Q[0], Q[1], Q[1]], [Q[1]], [Q[0], Q[2]]]  # a duplicate inside one answer counts once
    assert quorum_granted(grants, 2) == [Q[0], Q[1]]
    assert quorum_granted(grants, 3) == []
    assert quorum_granted([[Q[3]]], 1) == [Q[3]]
    assert quorum_granted([], 1) == []


def test_forward_targets_exclude_this_broker_by_id_and_address() -> None:
    members = {0: MASTER, 1: SLAVE1, 2: SLAVE2, 7: MASTER}
    assert forward_targets(members, 0, MASTER) == [SLAVE1, SLAVE2]
    assert forward_targets({1: SLAVE1}, 1, SLAVE1) == []


# ---- the service with simulated peers ----------------------------------------------------------------------
class Peers:
    """RemotingClient stand-in: each live address has its own lock table (a broker answering onlyThisBroker=true);
    an address in `down` refuses connections. Records every forwarded request."""

    def __init__(self, live: list[str], namesrv_members: dict[int, str] | None = None) -> None:
        self.tables = {addr: QueueLockTable(lambda: 0) for addr in live}
        self.down: set[str] = set()
        self.sent: list[tuple[str, int, LockBatchBody]] = []
        self.namesrv_members = namesrv_members

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: int = 3000) -> RemotingCommand:
        if cmd.code == RequestCode.GET_BROKER_MEMBER_GROUP:
            body = BrokerMemberGroup("DefaultCluster", "broker-a", dict(self.namesrv_members or {})).to_json()
            return cmd.response(ResponseCode.SUCCESS, body=body)
        if addr in self.down or addr not in self.tables:
            raise RemotingConnectError(f"connect to {addr} refused")
        body = LockBatchBody.from_json(cmd.body)
        assert body.only_this_broker, "a forwarded lock must say onlyThisBroker=true"
        self.sent.append((addr, cmd.code, body))
        table = self.tables[addr]
        if cmd.code == RequestCode.LOCK_BATCH_MQ:
            granted = table.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
            return cmd.response(ResponseCode.SUCCESS, body=LockBatchResponseBody(granted).to_json())
        table.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(ResponseCode.SUCCESS)


def make_service(peers: Peers, *, total_replicas: int = 3, acting_members: dict[int, str] | None = None,
                 broker_id: int = 0, addr: str = MASTER) -> StrictLockService:
    host, _, port = addr.rpartition(":")
    role = "SLAVE" if broker_id else "ASYNC_MASTER"
    cfg = BrokerConfig(lock_in_strict_mode=True, total_replicas=total_replicas, broker_ip1=host,
                       listen_port=int(port), broker_id=broker_id, broker_role=role, namesrv_addr="127.0.0.1:9876")
    services: dict[str, Any] = {}
    if acting_members is not None:
        services["acting_master"] = SimpleNamespace(member_addrs=acting_members)
    ctx = SimpleNamespace(config=cfg, services=services)
    env = SimpleNamespace(clock=SimpleNamespace(now_ms=lambda: 0), client=peers)
    return StrictLockService(ctx, env)  # type: ignore[arg-type]


def lock(svc: StrictLockService, client: str, mqs: list[MessageQueue], *, only_this_broker: bool = False) -> list:
    return asyncio.run(svc.lock(LockBatchBody("G", client, mqs, only_this_broker=only_this_broker)))


GROUP3 = {0: MASTER, 1: SLAVE1, 2: SLAVE2}


def test_three_replicas_one_slave_down_lock_is_granted_by_quorum() -> None:
    peers = Peers([SLAVE1, SLAVE2], namesrv_members={0: MASTER, 1: SLAVE1})  # slave 2 already gone from the group
    svc = make_service(peers)
    assert lock(svc, "c1", Q[:2]) == Q[:2]  # master + slave 1 = 2 of 3
    assert [a for a, _, _ in peers.sent] == [SLAVE1]
    assert peers.tables[SLAVE1].owner("G", Q[0]) == "c1"


def test_a_queue_still_locked_on_a_member_is_refused_to_another_client() -> None:
    peers = Peers([SLAVE1, SLAVE2])
    peers.down.add(SLAVE2)
    # c9 locked Q[1] on slave 1 while slave 1 acted as master; the master (restarted) has no memory of it
    peers.tables[SLAVE1].try_lock_batch("G", [Q[1]], "c9")
    svc = make_service(peers, acting_members=GROUP3)
    assert lock(svc, "c1", Q[:2]) == [Q[0]]  # Q[1]: master yes, slave 1 no, slave 2 down -> 1 of 3
    assert svc.forward_failures == 1
    # the same request in non-strict form (onlyThisBroker=true) trusts this broker alone
    assert lock(svc, "c1", [Q[1]], only_this_broker=True) == [Q[1]]


def test_two_members_down_nothing_can_be_locked() -> None:
    peers = Peers([SLAVE1, SLAVE2])
    peers.down |= {SLAVE1, SLAVE2}
    svc = make_service(peers, acting_members=GROUP3)
    assert lock(svc, "c1", Q) == []
    assert svc.locks.owner("G", Q[0]) == "c1"  # granted locally, but 1 of 3 is no quorum


def test_two_replicas_cannot_lock_with_one_member_down() -> None:
    peers = Peers([SLAVE1])
    peers.down.add(SLAVE1)
    svc = make_service(peers, total_replicas=2, acting_members={0: MASTER, 1: SLAVE1})
    assert lock(svc, "c1", [Q[0]]) == []
    peers.down.clear()
    assert lock(svc, "c1", [Q[0]]) == [Q[0]]


def test_replica_count_derived_from_the_largest_group_seen() -> None:
    peers = Peers([SLAVE1, SLAVE2])
    members = dict(GROUP3)
    svc = make_service(peers, total_replicas=0, acting_members=members)
    assert lock(svc, "c1", [Q[0]]) == [Q[0]]
    assert svc.largest_group_seen == 3
    del members[1], members[2]  # both slaves left the group: still 3 replicas, quorum 2
    assert lock(svc, "c1", [Q[1]]) == []


def test_forwarded_lock_only_carries_the_queues_granted_here() -> None:
    peers = Peers([SLAVE1, SLAVE2])
    svc = make_service(peers, acting_members=GROUP3)
    svc.locks.try_lock_batch("G", [Q[0]], "other")
    assert lock(svc, "c1", Q[:2]) == [Q[1]]
    assert all(body.mq_set == [Q[1]] for _, _, body in peers.sent)


def test_unlock_is_applied_here_and_forwarded() -> None:
    peers = Peers([SLAVE1, SLAVE2])
    svc = make_service(peers, acting_members=GROUP3)
    assert lock(svc, "c1", [Q[0]]) == [Q[0]]
    asyncio.run(svc.unlock(LockBatchBody("G", "c1", [Q[0]])))
    assert svc.locks.owner("G", Q[0]) is None
    assert all(t.owner("G", Q[0]) is None for t in peers.tables.values())
    assert lock(svc, "c2", [Q[0]]) == [Q[0]]


def test_handlers_answer_bad_bodies_with_a_code_and_oneway_unlock_with_nothing() -> None:
    svc = make_service(Peers([]), acting_members={0: MASTER})
    table = svc.handlers()
    bad = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, b"{not json")
    resp = asyncio.run(table[RequestCode.LOCK_BATCH_MQ](None, bad))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "LockBatchRequestBody" in resp.remark
    ok = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, LockBatchBody("G", "c1", [Q[0]]).to_json())
    resp = asyncio.run(table[RequestCode.LOCK_BATCH_MQ](None, ok))
    assert resp.code == ResponseCode.SUCCESS  # a one-member group: quorum 2 of 3 configured is not reached
    assert LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set == []
    oneway = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None,
                                     LockBatchBody("G", "c1", [Q[0]]).to_json(), oneway=True)
    assert asyncio.run(table[RequestCode.UNLOCK_BATCH_MQ](None, oneway)) is None


def test_service_is_off_by_default() -> None:
    ctx = SimpleNamespace(config=BrokerConfig(broker_ip1="127.0.0.1"), services={})
    assert create(ctx, SimpleNamespace()) is None  # type: ignore[arg-type]


def test_sdk_lock_requests_let_a_strict_broker_forward_them() -> None:
    """Like the Java client, the SDK never sets onlyThisBroker: a broker with lockInStrictMode decides (and
    forwards); only broker-to-broker forwards carry onlyThisBroker=true."""
    from orbitmq.client.broker_api import lock_body

    body = LockBatchBody.from_json(lock_body("c1", "G", [Q[1], Q[0], Q[1]]))
    assert body.only_this_broker is False and body.mq_set == [Q[0], Q[1]]
    forwarded = LockBatchBody("G", "c1", [Q[0]], only_this_broker=True).to_json()
    assert LockBatchBody.from_json(forwarded).only_this_broker is True
