"""Test helpers for ACL-enabled brokers: a plain_acl.yml with the accounts the ACL tests use, and a signed
read of how many messages a topic holds (to prove a refused send stored nothing)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from orbitmq.client.instance import ClientInstance
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import SessionCredentials
from orbitmq.protocol.bodies import TopicStatsTable

APP = SessionCredentials("appUser1", "appSecret1")  # PUB|SUB on TopicAcl, SUB on groups, nothing else
ADMIN = SessionCredentials("adminUser", "adminSecret")  # admin, every topic and group

PLAIN_ACL = """\
globalWhiteRemoteAddresses: [{global_white}]
accounts:
  - accessKey: appUser1
    secretKey: appSecret1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicAcl=PUB|SUB
      - TBW102=PUB|SUB
      - TopicSubOnly=SUB
{extra_topic_perms}
  - accessKey: adminUser
    secretKey: adminSecret
    admin: true
"""


def plain_acl_text(*extra_topic_perms: str, global_white: tuple[str, ...] = ()) -> str:
    return PLAIN_ACL.format(extra_topic_perms="\n".join(f"      - {p}" for p in extra_topic_perms),
                            global_white=", ".join(global_white))


def write_plain_acl(path: str | os.PathLike[str], *extra_topic_perms: str, global_white: tuple[str, ...] = ()) -> Path:
    """Write (atomically: a reader never sees half a file) the test ACL, plus `extra_topic_perms` for appUser1 and
    `global_white` address patterns."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(plain_acl_text(*extra_topic_perms, global_white=global_white), encoding="utf-8")
    os.replace(tmp, p)
    return p


async def stored_count(namesrv: str, broker_addr: str, topic: str, creds: SessionCredentials = ADMIN) -> int:
    """Messages the broker holds for `topic` (sum of max - min over its queues; 0 for an unknown topic)."""
    inst = await ClientInstance.acquire(namesrv, f"acl-check-{os.getpid()}", creds)
    try:
        resp = await inst.invoke(broker_addr, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO,
                                                                      {"topic": topic}), 5000)
    finally:
        await inst.release()
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return 0
    if resp.code != ResponseCode.SUCCESS:
        raise AssertionError(f"GET_TOPIC_STATS_INFO {topic}: code {resp.code} {resp.remark}")
    table = TopicStatsTable.from_json(resp.body or b"{}")
    return sum(o.max_offset - o.min_offset for o in table.offset_table.values())


def stored_count_sync(namesrv: str, broker_addr: str, topic: str, creds: SessionCredentials = ADMIN) -> int:
    return asyncio.run(stored_count(namesrv, broker_addr, topic, creds))
