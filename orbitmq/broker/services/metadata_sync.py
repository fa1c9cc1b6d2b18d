"""Replica metadata sync shared by classic HA (services/ha.py) and controller mode (controller_mode/): pull a master's
topics, subscription groups, consumer and delay offsets (offsets merged so they never roll back), and forward
committed consumer offsets between the members of a group (oneway, marked so the receiver does not forward again);
in controller mode a slave keeps topics it holds data of and offers them to the master. Owns no schedule and no
role logic: the callers decide when and from whom.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.base.errors import OrbitMQError
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.metadata.data_version import DataVersion, loads_lenient
from orbitmq.broker.metadata.groups import decode_group_wrapper
from orbitmq.broker.metadata.offset_versions import DelayOffsetTable, version_of
from orbitmq.broker.metadata.offsets import decode_offset_file, decode_offset_stamps
from orbitmq.broker.metadata.topics import _decode_wrapper as decode_topic_wrapper
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies.admin import DelayOffsetSerializeWrapper
from orbitmq.protocol.bodies.register import DataVersion as WireDataVersion
from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 3000
# ext field on a forwarded UPDATE_CONSUMER_OFFSET (master <-> slave): store it, do not forward it again
FORWARDED = "orbitForwarded"
# ext field on a forwarded UPDATE_CONSUMER_OFFSET: the commit's stamp (metadata/offsets.py), so the receiver keeps
# the newer of its value and the forwarded one whatever the order of arrival
STAMP = "orbitOffsetStamp"
PULL_COMMIT_FLUSH_MS = 100  # offsets committed inside PULLs reach the other members within this (coalesced)


async def fetch_body(client: RemotingClient, addr: str, code: int) -> bytes | None:
    resp = await client.invoke(addr, RemotingCommand.request(code), REQUEST_TIMEOUT_MS)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    return bytes(resp.body)


async def sync_metadata_from(ctx: BrokerContext, client: RemotingClient, addr: str,
                             keep: Callable[[str], bool] | None = None) -> list[TopicConfig]:
    """Pull topics, consumer offsets, delay offsets and subscription groups from the master at `addr`. Topics and
    groups are replaced when the master's data version differs; offsets are merged (never rolled back). `keep`
    (controller mode): a topic the master lacks is kept here when keep(topic) (we hold its data); those are
    returned."""
    kept: list[TopicConfig] = []
    body = await fetch_body(client, addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    if body is not None:
        table, version = decode_topic_wrapper(loads_lenient(body))
        if version.to_json_obj() != ctx.topics.data_version.to_json_obj():
            if keep is not None:
                kept = [tc for name, tc in ctx.topics.all().items() if name not in table and keep(name)]
                table = {**table, **{tc.topic_name: tc for tc in kept}}
            ctx.topics.replace_all(table, version)
    await pull_offsets_from(ctx, client, addr)
    body = await fetch_body(client, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    if body is not None:
        groups, gversion = decode_group_wrapper(loads_lenient(body))
        if gversion.to_json_obj() != ctx.groups.data_version.to_json_obj():
            ctx.groups.replace_all(groups, gversion)
    return kept


async def offer_topics(client: RemotingClient, addr: str, topics: list[TopicConfig]) -> list[str]:
    """Controller mode, a slave holding data of topics its master has no config for: UPDATE_AND_CREATE_TOPIC to
    the master, but only for a topic the master holds data of too (a topic deleted on the master lost its data
    there: it is not brought back). Returns the topics sent."""
    sent: list[str] = []
    for tc in topics:
        maxes = []
        for qid in range(tc.write_queue_nums):
            ext = {"topic": tc.topic_name, "queueId": str(qid)}
            resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext),
                                       REQUEST_TIMEOUT_MS)
            maxes.append(int((resp.ext_fields or {}).get("offset", "0")) if resp.code == ResponseCode.SUCCESS else 0)
        if max(maxes, default=0) <= 0:
            continue
        ext = {"topic": tc.topic_name, "defaultTopic": "TBW102", "readQueueNums": str(tc.read_queue_nums),
               "writeQueueNums": str(tc.write_queue_nums), "perm": str(tc.perm),
               "topicFilterType": tc.topic_filter_type, "topicSysFlag": str(tc.topic_sys_flag),
               "order": "true" if tc.order else "false"}
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext),
                                   REQUEST_TIMEOUT_MS)
        if resp.code == ResponseCode.SUCCESS:
            sent.append(tc.topic_name)
    return sent


async def pull_offsets_from(ctx: BrokerContext, client: RemotingClient, addr: str) -> tuple[bool, bool]:
    """Fetch `addr`'s consumer and delay offset tables and merge them in (per queue the larger offset, the newer
    data version). Returns (consumer offsets fetched, delay offsets fetched)."""
    got_consumer = got_delay = False
    body = await fetch_body(client, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    if body is not None:
        obj = loads_lenient(body)
        table, version = decode_offset_file(obj)
        ctx.offsets.merge_from(table, version if version_of(obj) is not None else None, decode_offset_stamps(obj))
        got_consumer = True
    body = await fetch_body(client, addr, RequestCode.GET_ALL_DELAY_OFFSET)
    if body is not None:
        delay_wrapper = DelayOffsetSerializeWrapper.from_json(body)
        adopt_delay_offsets(ctx, delay_wrapper.offset_table, local_version(delay_wrapper.data_version))
        got_delay = True
    return got_consumer, got_delay


async def adopt_missing_metadata(ctx: BrokerContext, client: RemotingClient, addr: str) -> int:
    """Add the topics and subscription groups `addr` has and we lack (nothing is replaced or removed): a promoted
    replica may have missed the last topic changes of the old master, which its other replicas synced. Returns how
    many were added."""
    added = 0
    body = await fetch_body(client, addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    if body is not None:
        table, _ = decode_topic_wrapper(loads_lenient(body))
        for name, tc in table.items():
            if ctx.topics.get(name) is None:
                ctx.topics.create_or_update(tc)
                added += 1
    body = await fetch_body(client, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    if body is not None:
        groups, _ = decode_group_wrapper(loads_lenient(body))
        for name, gc in groups.items():
            if ctx.groups.get(name) is None:
                ctx.groups.update(gc)
                added += 1
    return added


def adopt_delay_offsets(ctx: BrokerContext, table: dict[int, int], version: DataVersion | None) -> None:
    delay = ctx.services.get("delay")
    offsets = getattr(delay, "offsets", None)
    if isinstance(offsets, DelayOffsetTable):
        if not offsets.merge_from(table, version):
            return
    elif isinstance(offsets, dict):
        for level, off in table.items():
            if off > offsets.get(level, -1):
                offsets[level] = off
    else:
        return
    with contextlib.suppress(OSError):
        delay.persist()  # type: ignore[union-attr]


def local_version(v: WireDataVersion | None) -> DataVersion | None:
    return None if v is None else DataVersion(v.counter, v.timestamp, v.state_version)


class OffsetForwarder:
    """Oneway UPDATE_CONSUMER_OFFSET copies to other members of the group (best effort: a member that is down
    catches up through its metadata sync or pre-online)."""

    def __init__(self, client: RemotingClient) -> None:
        self.client = client
        self.forwarded = 0
        self.failures = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._coalesced: dict[tuple[str, str, int], tuple[int, int]] = {}  # (group, topic, queue) -> offset, stamp
        self._coalesced_to: Callable[[], list[str]] = list

    def forward_commit(self, addrs: list[str], ext: dict[str, str], stamp: int) -> None:
        """A commit made here (UPDATE_CONSUMER_OFFSET ext fields) to each of `addrs`, with its stamp."""
        for addr in addrs:
            self.forward(addr, {**ext, STAMP: str(stamp)} if stamp > 0 else ext)

    def forward_coalesced(self, addrs: Callable[[], list[str]], group: str, topic: str, queue_id: int, offset: int,
                          stamp: int) -> None:
        """A commit made inside a PULL (a consumer commits in every pull): coalesced per queue, the latest sent to
        addrs() every PULL_COMMIT_FLUSH_MS."""
        first = not self._coalesced
        self._coalesced[(group, topic, queue_id)] = (offset, stamp)
        self._coalesced_to = addrs
        if first:
            asyncio.get_running_loop().call_later(PULL_COMMIT_FLUSH_MS / 1000, self._flush_coalesced)

    def _flush_coalesced(self) -> None:
        commits, self._coalesced = self._coalesced, {}
        addrs = self._coalesced_to()
        for (group, topic, queue_id), (offset, stamp) in commits.items():
            ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
            self.forward_commit(addrs, ext, stamp)

    def forward(self, addr: str, ext: dict[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(self._send(addr, {**ext, FORWARDED: "true"}))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, addr: str, ext: dict[str, str]) -> None:
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext, oneway=True)
        try:
            await self.client.invoke_oneway(addr, cmd)
            self.forwarded += 1
        except OrbitMQError as e:
            self.failures += 1
            log.debug("forwarding a consumer offset to %s failed: %r", addr, e)

    def cancel_all(self) -> None:
        for t in list(self._tasks):
            t.cancel()


def is_forwarded(ext: dict[str, Any]) -> bool:
    return ext.get(FORWARDED) == "true"


def forwarded_stamp(ext: dict[str, Any]) -> int:
    """The commit stamp a forwarded UPDATE_CONSUMER_OFFSET carries (0: none, e.g. from an older member)."""
    try:
        return int(ext.get(STAMP) or 0)
    except (TypeError, ValueError):
        return 0
