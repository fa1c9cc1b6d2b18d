"""RaftGroupService: one member of a Raft-replicated broker group (enableDLegerCommitLog; docs/design/raft-group.md).

Owns the Raft member (RaftDriver over RaftStorage in <storePathRootDir>/dledger, RaftTransport), the listening
socket of its dLegerPeers address (ORBIT_RAFT_MESSAGE only), and the GroupStateMachine. Its factory replaces
ctx.store with the RaftStore proxy, so every write of the broker becomes a proposal. Raft roles become broker roles:
the leader is brokerId 0 (SYNC_MASTER) with the term as its name-server stateVersion, followers are slaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.acl.cluster import cluster_guarded, cluster_signer
from orbitmq.base.errors import ConfigError, OrbitMQError, ProtocolError, RemotingError
from orbitmq.broker.handlers.admin import SLAVE_REMARK, validate_group_config
from orbitmq.broker.handlers.admin import handlers as admin_handlers
from orbitmq.broker.metadata import SubscriptionGroupConfig
from orbitmq.broker.metadata.topics import validate_topic_name
from orbitmq.broker.raft_mode.batcher import BATCH, CommandBatcher, decode_batch, encode_batch, encode_results
from orbitmq.broker.raft_mode.codec import (
    GROUP_CONFIG,
    GROUP_DELETE,
    METADATA_PART,
    OFFSET_DELTA,
    OFFSETS,
    TOPIC_DELETE,
    TOPICS,
    check_command_type,
    encode_command,
)
from orbitmq.broker.raft_mode.commitlog_log import CommitLogRaftStorage
from orbitmq.broker.raft_mode.state_machine import (
    CommandApply,
    CommitListener,
    GroupStateMachine,
    MessagesListener,
)
from orbitmq.broker.raft_mode.store_proxy import RaftStore
from orbitmq.model.topic import TopicConfig
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode, ext_bool, ext_str, fastjson
from orbitmq.raft import (
    NotLeaderError,
    RaftConfig,
    RaftDriver,
    RaftStoppedError,
    RaftTransport,
    Role,
    RoleListener,
    parse_peers,
)
from orbitmq.remoting import RemotingClient, RemotingServer
from orbitmq.store.results import PutResult, PutStatus

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.services import ServiceEnv

log = logging.getLogger("orbitmq.broker.raft_mode")

RAFT_DIR = "dledger"
TICK_MS = 50
ELECTION_TICKS = 10  # 0.5-1 s randomized election timeout; heartbeats every tick
PROPOSE_TIMEOUT_MS = 5_000
ADOPT_EVERY_S = 0.5
TOPICS_EVERY_S = 1.0  # the leader proposes its topic configs this often when they changed (and at once on admin)
OFFSETS_EVERY_S = 0.05  # the leader proposes the consumer offsets committed since the last round this often
TOMBSTONES_MAX = 10_000  # deleted topic names kept for the group snapshot
FETCH_CHUNK = 1024 * 1024  # CommitLog bytes per ORBIT_RAFT_GROUP_READ_LOG answer

def group_peers(spec: str) -> dict[str, str]:
    """dLegerPeers -> {id: host:port}; ConfigError naming dLegerPeers when malformed."""
    try:
        peers = parse_peers(spec)
    except ConfigError as e:
        raise ConfigError(str(e).replace("controllerDLegerPeers", "dLegerPeers")) from None
    if not peers:
        raise ConfigError("dLegerPeers: enableDLegerCommitLog=true needs n0-host:port;n1-host:port;...")
    return peers

def follower_broker_id(peers: dict[str, str], self_id: str) -> int:
    """A follower's brokerId: its position in dLegerPeers + 1 (n0 -> 1, n1 -> 2, ...)."""
    return list(peers).index(self_id) + 1

def slave_read_target(peers: dict[str, str], leader_id: str, wanted: int) -> int:
    """The follower the leader sends a slow consumer to. The leader is brokerId 0 in the route and each follower
    its position in dLegerPeers + 1, so the group's whichBrokerWhenConsumeSlowly (1 by default) may name the
    leader's own follower id, absent from the route (a C++ client then falls back to the master and no follower
    ever serves). Keeps `wanted` when it is another member's id, else the lowest such id."""
    ids = sorted(follower_broker_id(peers, p) for p in peers if p != leader_id)
    return wanted if wanted in ids or not ids else ids[0]


class RaftGroupService:
    name = "raft_group"

    def __init__(self, ctx: BrokerContext, env: ServiceEnv) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.peers = group_peers(cfg.dleger_peers)
        self.self_id = cfg.dleger_self_id
        if self.self_id not in self.peers:
            raise ConfigError(f"dLegerSelfId: {self.self_id!r} is not one of dLegerPeers ({', '.join(self.peers)})")
        self.group = cfg.dleger_group or cfg.broker_name
        self.follower_id = follower_broker_id(self.peers, self.self_id)
        self.real_store = ctx.store
        self.raft_dir = os.path.join(env.store_config.store_path_root_dir, RAFT_DIR)
        self.raft_log = CommitLogRaftStorage(self.raft_dir, self.real_store, self._fetch_to)
        self.sm = GroupStateMachine(self.real_store, self.raft_log)
        self.transport = RaftTransport(self.group, self.self_id, self.peers, sign=cluster_signer(cfg.cluster_secret))
        self.driver = RaftDriver(RaftConfig(self.self_id, tuple(self.peers), election_ticks=ELECTION_TICKS,
                                            tick_ms=TICK_MS),
                                 self.raft_log, self.transport, self.sm,
                                 snapshot_every=cfg.raft_snapshot_every)
        host, _, port = self.peers[self.self_id].rpartition(":")
        bind = cfg.bind_address if cfg.bind_address not in ("", "0.0.0.0") else host  # noqa: S104
        self.server = RemotingServer(cluster_guarded(self._handle, cfg.cluster_secret,
                                                     (int(RequestCode.ORBIT_RAFT_MESSAGE),
                                                      int(RequestCode.ORBIT_RAFT_GROUP_READ_LOG),
                                                      int(RequestCode.ORBIT_RAFT_GROUP_PROPOSE))),
                                     bind, int(port), name="raft-group")
        self._sign = cluster_signer(cfg.cluster_secret)
        self._stopping = False
        self._delete_listeners: list[Callable[[str | None, str | None], None]] = []
        self._stamps: dict[int, Callable[[bytes], bytes]] = {}
        self._forward_client: RemotingClient | None = None
        self.fetched_bytes = 0
        self.sm.on_restored = self._on_restored
        self.sm.register_command(OFFSETS, self._apply_offsets, internal=True)
        self.sm.register_command(TOPICS, self._apply_topics, internal=True)
        self.sm.register_command(TOPIC_DELETE, self._apply_topic_delete, internal=True)
        self.sm.register_command(GROUP_CONFIG, self._apply_group_config, internal=True)
        self.sm.register_command(GROUP_DELETE, self._apply_group_delete, internal=True)
        self.sm.register_command(OFFSET_DELTA, self._apply_offset_delta, internal=True)
        self.sm.register_command(BATCH, self._apply_batch, internal=True)
        self.commands = CommandBatcher(self._send_batch)
        self.sm.register_snapshot_part(METADATA_PART, self._snapshot_metadata, self._restore_metadata)
        self._topics_sent: dict[str, TopicConfig] = {}
        self._offset_changes: dict[tuple[str, int], int] = {}  # leader: commits not proposed yet
        ctx.offsets.on_commit = self._on_offset_commit
        self._tombstones: dict[str, None] = {}  # deleted topics (insertion order), for the snapshot part
        self._started = False  # a snapshot restored after start was installed from the leader
        self.offsets_applied = 0
        self.offset_deltas = 0  # OFFSET_DELTA entries proposed here
        self.role_changes = 0
        self.topics_adopted = 0
        ctx.store = RaftStore(self.real_store, self)  # type: ignore[assignment]
        ctx.slave_read_target = self.slave_read_target
        ctx.set_role("SLAVE", self.follower_id)  # a fenced follower until Raft names a leader

    def slave_read_target(self, wanted: int) -> int:
        return slave_read_target(self.peers, self.self_id, wanted)

    # ---- hooks for other modules (docs/design/raft-group.md, "Hooks") -----------------------------------------
    def register_command(self, entry_type: int, apply: CommandApply,
                         stamp: Callable[[bytes], bytes] | None = None) -> None:
        """`stamp(payload) -> payload`: run by the leader on every command of this type that goes through
        forward_command, right before it is proposed (e.g. to put the leader's clock into it)."""
        self.sm.register_command(entry_type, apply)
        if stamp is not None:
            self._stamps[entry_type] = stamp

    async def propose_command(self, entry_type: int, payload: bytes, timeout_ms: int = PROPOSE_TIMEOUT_MS) -> object:
        return await self.driver.propose(encode_command(entry_type, payload), timeout_ms)

    def add_role_listener(self, cb: RoleListener) -> None:
        self.driver.add_role_listener(cb)

    def add_commit_listener(self, cb: CommitListener) -> None:
        self.sm.add_commit_listener(cb)

    def add_messages_listener(self, cb: MessagesListener) -> None:
        self.sm.add_messages_listener(cb)

    def add_delete_listener(self, cb: Callable[[str | None, str | None], None]) -> None:
        """cb(topic, None) when a TOPIC_DELETE is applied, cb(None, group) for a GROUP_DELETE (every member, log
        order, deterministic)."""
        self._delete_listeners.append(cb)

    def register_snapshot_part(self, part_type: int, snapshot: Callable[[], bytes],
                               restore: Callable[[bytes], None]) -> None:
        self.sm.register_snapshot_part(part_type, snapshot, restore)

    async def forward_command(self, entry_type: int, payload: bytes, timeout_ms: int = PROPOSE_TIMEOUT_MS) -> bytes:
        """propose_command from any member, batched (batcher.py): on the leader one BATCH entry per commit round,
        from a follower one ORBIT_RAFT_GROUP_PROPOSE per round to the leader, which merges what its members send.
        The apply result must be bytes (or None: b""). NotLeaderError when no leader is known or the leader refused;
        OrbitMQError for an apply that raised."""
        check_command_type(entry_type)
        return await self.commands.submit(entry_type, payload, timeout_ms)

    async def _send_batch(self, data: bytes) -> bytes:
        if self.driver.is_leader:
            if self._stamps:
                data = encode_batch([(k, self._stamp(k, p)) for k, p in decode_batch(data[1:])])
            return _result_bytes(await self.driver.propose(data, PROPOSE_TIMEOUT_MS))
        leader = self.driver.leader_id
        if not leader or leader == self.self_id:
            raise NotLeaderError("", "no leader known to forward the command to")
        cmd = RemotingCommand.request(RequestCode.ORBIT_RAFT_GROUP_PROPOSE,
                                      {"group": self.group, "type": str(BATCH)}, data[1:])
        client = self._forward_client
        if client is None:
            client = self._forward_client = RemotingClient(name="raft-group-forward", sign=self._sign)
        resp = await client.invoke(self.peers[leader], cmd, PROPOSE_TIMEOUT_MS + 1000)
        if resp.code == ResponseCode.SUCCESS:
            return bytes(resp.body or b"")
        if resp.ext_fields and resp.ext_fields.get("notLeader") == "true":
            raise NotLeaderError(resp.ext_fields.get("leader", ""), resp.remark or "")
        raise OrbitMQError(f"forwarded commands refused by {leader}: {resp.remark}")

    def _stamp(self, kind: int, payload: bytes) -> bytes:
        fn = self._stamps.get(kind)
        if fn is None:
            return payload
        try:
            return fn(payload)
        except Exception:  # noqa: BLE001 - a malformed command goes as it came: its apply refuses it on every member
            return payload

    async def _propose_forwarded(self, cmd: RemotingCommand) -> RemotingCommand:
        """A follower's BATCH of commands, merged into this leader's batches; the answer has one result each."""
        ext = cmd.ext_fields or {}
        try:
            if int(ext.get("type", "")) != BATCH:
                raise ValueError(f"type {ext.get('type')!r} is not a command batch ({BATCH})")
            items = decode_batch(bytes(cmd.body or b""))
            for kind, _ in items:
                check_command_type(kind)
        except (ValueError, ProtocolError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad command: {e}")
        if ext.get("group") != self.group:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"this member is in group {self.group}")
        if not self.driver.is_leader:
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, f"member {self.self_id} is not the leader")
            resp.ext_fields = {"notLeader": "true", "leader": self.driver.leader_id}
            return resp
        got = await asyncio.gather(*(self.commands.submit(k, p, PROPOSE_TIMEOUT_MS) for k, p in items),
                                   return_exceptions=True)
        results: list[tuple[bool, bytes]] = []
        for r in got:
            if isinstance(r, NotLeaderError):
                resp = cmd.response(ResponseCode.SYSTEM_ERROR, str(r))
                resp.ext_fields = {"notLeader": "true", "leader": r.leader_id}
                return resp
            if isinstance(r, OrbitMQError):
                results.append((False, str(r).encode()))
            elif isinstance(r, BaseException):
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(r).__name__}: {r}")
            else:
                results.append((True, r))
        return cmd.response(body=encode_results(results))

    def _apply_batch(self, index: int, payload: bytes) -> bytes:
        """Every command of a BATCH entry, in order; each one's result or error (deterministic on every member)."""
        results: list[tuple[bool, bytes]] = []
        for kind, p in decode_batch(payload):
            fn = self.sm.command(kind)
            if fn is None or kind == BATCH:
                results.append((False, f"entry type {kind:#x} is not a registered command".encode()))
                continue
            try:
                results.append((True, _result_bytes(fn(index, p))))
            except Exception as e:  # noqa: BLE001 - the proposer gets it; every member raises the same
                results.append((False, f"{type(e).__name__}: {e}".encode()))
        return encode_results(results)

    # ---- writes -----------------------------------------------------------------------------------------------
    def accepting_writes(self) -> bool:
        return self.driver.is_leader

    async def finish_put(self, fut: asyncio.Future[object], count: int) -> PutResult:
        """SEND_OK once a majority logged the entry (its records are in their CommitLogs) and it is applied here."""
        try:
            out = await self.driver.wait_proposal(fut, PROPOSE_TIMEOUT_MS)
        except (NotLeaderError, TimeoutError) as e:  # proposed: may still commit under a new leader
            log.warning("raft group %s: a put of %d messages is not confirmed: %s", self.group, count, e)
            return PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT)
        if not isinstance(out, tuple):
            return PutResult(PutStatus.UNKNOWN_ERROR)
        return out[0]  # type: ignore[no-any-return]

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[..., Any]]:
        """Admin metadata changes go through the Raft log: topic deletion and subscription-group create/update/
        delete become commands applied on every member (the answer waits for the commit and the leader's own
        apply); a topic create/update is answered once the leader's topic table is proposed."""
        create_topic = admin_handlers(self.ctx)[int(RequestCode.UPDATE_AND_CREATE_TOPIC)]

        async def update_and_create_topic(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
            resp = create_topic(conn, cmd)
            if inspect.isawaitable(resp):
                resp = await resp
            if resp.code == ResponseCode.SUCCESS and self.driver.is_leader:
                self._tombstones.pop(ext_str(cmd.ext_fields, "topic"), None)
                await self._propose_topics()  # not confirmed: the next round retries, the answer stays SUCCESS
            return resp

        return {RequestCode.UPDATE_AND_CREATE_TOPIC: update_and_create_topic,
                RequestCode.DELETE_TOPIC_IN_BROKER: self._admin_delete_topic,
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self._admin_update_group,
                RequestCode.DELETE_SUBSCRIPTIONGROUP: self._admin_delete_group}

    async def _admin_delete_topic(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not self.driver.is_leader:
            return cmd.response(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
        topic = ext_str(cmd.ext_fields, "topic")
        err = validate_topic_name(topic)
        if err:
            return cmd.response(ResponseCode.SYSTEM_ERROR, err)
        if self.ctx.topics.is_system_topic(topic):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        return await self._replicate(cmd, TOPIC_DELETE, {"topic": topic}, self.ctx.topics)

    async def _admin_update_group(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not self.driver.is_leader:
            return cmd.response(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
        if not cmd.body:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "request body (SubscriptionGroupConfig JSON) is empty")
        try:
            cfg = SubscriptionGroupConfig.from_json_obj(fastjson.loads(cmd.body))
        except (ProtocolError, ValueError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {e}")
        err = validate_group_config(cfg)
        if err:
            return cmd.response(ResponseCode.SYSTEM_ERROR, err)
        return await self._replicate(cmd, GROUP_CONFIG, cfg.to_json_obj(), self.ctx.groups)

    async def _admin_delete_group(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not self.driver.is_leader:
            return cmd.response(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
        body = {"group": ext_str(cmd.ext_fields, "groupName"),
                "removeOffset": ext_bool(cmd.ext_fields, "removeOffset", False)}
        return await self._replicate(cmd, GROUP_DELETE, body, self.ctx.groups)

    async def _replicate(self, cmd: RemotingCommand, entry_type: int, body: object, table: Any) -> RemotingCommand:
        """Propose an admin change; SUCCESS once committed, applied here and the table written to disk."""
        try:
            await self.driver.propose(bytes((entry_type,)) + orjson.dumps(body), PROPOSE_TIMEOUT_MS)
        except NotLeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{SLAVE_REMARK} (Raft group {self.group}: this member "
                                f"lost the leadership to {e.leader_id or 'an unknown member'})")
        except TimeoutError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"Raft group {self.group}: the change was not committed "
                                f"within {PROPOSE_TIMEOUT_MS} ms (it may still be applied)")
        answer = table.answer_when_written(cmd.response())
        return await answer if inspect.isawaitable(answer) else answer

    async def start(self) -> None:
        store = self.real_store
        if not os.path.isdir(self.raft_dir) and store.max_phys_offset > store.min_phys_offset:
            raise ConfigError(f"enableDLegerCommitLog: the store {store.config.store_path_root_dir} already holds "
                              "messages written outside a Raft group; start the group on an empty store")
        try:
            await self.server.start()
        except OSError as e:
            raise ConfigError(f"dLegerPeers: cannot listen on {self.peers[self.self_id]}: {e.strerror or e}") from None
        self.driver.add_role_listener(self._on_role)
        try:
            await self.driver.start()
        except BaseException:
            await self.server.stop()
            raise
        self._started = True  # the own snapshot is restored: a later restore is one installed from the leader
        log.info("raft group %s: member %s listening on %s (peers %s)", self.group, self.self_id,
                 self.peers[self.self_id], ", ".join(f"{k}={v}" for k, v in self.peers.items()))

    async def run(self) -> None:
        """Every 0.05 s the leader proposes the consumer offsets committed meanwhile; every 0.5 s a member that holds
        queues of a topic it has no config for (created on another leader, not yet in a TOPICS entry) adopts the
        topic, and the applied checkpoint is written; every second the leader proposes its changed topic table."""
        loop = asyncio.get_running_loop()
        last_adopt = last_topics = loop.time()
        while True:
            await asyncio.sleep(OFFSETS_EVERY_S)
            await self._propose_offsets()
            now = loop.time()
            if now - last_adopt >= ADOPT_EVERY_S:
                last_adopt = now
                self.adopt_topics()
            if now - last_topics >= TOPICS_EVERY_S:
                last_topics = now
                await self._propose_topics()

    # ---- topic configs: the leader's table goes through the log, followers adopt it ------------------------------
    async def _propose_topics(self) -> None:
        if not self.driver.is_leader:
            return
        topics = self.ctx.topics
        table = {n: tc for n, tc in topics.all().items() if not topics.is_system_topic(n)}
        if table == self._topics_sent:
            return
        payload = orjson.dumps([tc.to_json_obj() for tc in table.values()])
        try:
            await self.driver.propose(bytes((TOPICS,)) + payload, PROPOSE_TIMEOUT_MS)
        except (NotLeaderError, TimeoutError) as e:
            log.info("raft group %s: topic configs not replicated this round: %s", self.group, e)
            return
        self._topics_sent = table

    def _apply_topics(self, index: int, payload: bytes) -> None:
        """Followers take the leader's topic configs (queue counts, permissions, order); system topics stay each
        member's own. Deletions are TOPIC_DELETE commands; a topic in the table is no longer a deleted one."""
        leader = {tc.topic_name: tc for tc in (TopicConfig.from_json_obj(o) for o in orjson.loads(payload))}
        for name in leader:
            self._tombstones.pop(name, None)
        if self.driver.is_leader:
            return
        topics = self.ctx.topics
        changed = False
        for name, tc in leader.items():
            if topics.get(name) != tc:
                topics.create_or_update(tc)
                changed = True
        if changed:
            with contextlib.suppress(OSError):
                topics.persist()
            self.ctx.request_register()

    # ---- admin metadata commands: applied on every member, the leader included ----------------------------------
    def _apply_topic_delete(self, index: int, payload: bytes) -> None:
        """The topic's config, its consumer offsets and its queues (ConsumeQueue files) go on every member. Applied
        again at start, in log order, it drops the queue entries of the records before it (dispatched again from
        the snapshot on), so the queues are as they were."""
        topic = str(orjson.loads(payload)["topic"])
        ctx = self.ctx
        existed = ctx.topics.delete(topic)
        ctx.offsets.remove_topic(topic)
        self.real_store.delete_topics({topic})
        self._tell_deleted(topic, None)
        self._topics_sent.pop(topic, None)
        self._tombstones.pop(topic, None)
        self._tombstones[topic] = None
        while len(self._tombstones) > TOMBSTONES_MAX:
            self._tombstones.pop(next(iter(self._tombstones)))
        if existed:
            ctx.request_register()

    def _apply_group_config(self, index: int, payload: bytes) -> None:
        cfg = SubscriptionGroupConfig.from_json_obj(orjson.loads(payload))
        if self.ctx.groups.get(cfg.group_name) != cfg:
            self.ctx.groups.update(cfg)

    def _apply_group_delete(self, index: int, payload: bytes) -> None:
        body = orjson.loads(payload)
        group = str(body["group"])
        self.ctx.groups.delete(group)
        if body.get("removeOffset"):
            self.ctx.offsets.remove_group(group)
        self._tell_deleted(None, group)

    def _tell_deleted(self, topic: str | None, group: str | None) -> None:
        for cb in list(self._delete_listeners):
            try:
                cb(topic, group)
            except Exception:
                log.exception("raft group %s: delete listener failed", self.group)

    # ---- consumer offsets: the leader's commits go through the log every OFFSETS_EVERY_S --------------------------
    def _on_offset_commit(self, key: str, queue_id: int, offset: int) -> None:
        if self.driver.is_leader:
            self._offset_changes[(key, queue_id)] = offset

    async def _propose_offsets(self) -> None:
        """The commits made here since the last round (latest value per queue) as one OFFSET_DELTA entry."""
        if not self.driver.is_leader or not self._offset_changes:
            return
        changes, self._offset_changes = self._offset_changes, {}
        table: dict[str, dict[str, int]] = {}
        for (key, queue_id), offset in changes.items():
            table.setdefault(key, {})[str(queue_id)] = offset
        payload = orjson.dumps({"by": self.self_id, "term": self.driver.term, "offsets": table})
        try:
            await self.driver.propose(bytes((OFFSET_DELTA,)) + payload, PROPOSE_TIMEOUT_MS)
        except (NotLeaderError, TimeoutError) as e:
            log.info("raft group %s: consumer offsets not replicated this round: %s", self.group, e)
            for slot, offset in changes.items():  # again next round, unless a newer commit came meanwhile
                self._offset_changes.setdefault(slot, offset)
            return
        self.offset_deltas += 1

    def _apply_offset_delta(self, index: int, payload: bytes) -> None:
        """Every member but the leader that proposed it in its current term (its table holds these values or
        newer commits) takes the offsets."""
        body = orjson.loads(payload)
        if self.driver.is_leader and body.get("by") == self.self_id and body.get("term") == self.driver.term:
            return
        offsets = self.ctx.offsets
        for key, queues in body.get("offsets", {}).items():
            for q, o in queues.items():
                offsets.publish(str(key), int(q), int(o))
        self.offsets_applied += 1

    def _apply_offsets(self, index: int, payload: bytes) -> None:
        """(OFFSETS entries of earlier versions, which proposed the whole table once a second.) Followers take the
        leader's table as it stands; the leader that proposed it has it already."""
        if self.driver.is_leader:
            return
        raw = orjson.loads(payload)
        self.ctx.offsets.replace_all({k: {int(q): int(o) for q, o in v.items()} for k, v in raw.items()})
        self.offsets_applied += 1

    # ---- metadata in the group snapshot --------------------------------------------------------------------------
    def _snapshot_metadata(self) -> bytes:
        topics, groups = self.ctx.topics, self.ctx.groups
        return orjson.dumps({
            "topics": [tc.to_json_obj() for n, tc in topics.all().items() if not topics.is_system_topic(n)],
            "groups": [cfg.to_json_obj() for cfg in groups.all().values()],
            "offsets": {k: {str(q): o for q, o in v.items()} for k, v in self.ctx.offsets.table().items()},
            "deleted": list(self._tombstones)})

    def _restore_metadata(self, data: bytes) -> None:
        """This member's own snapshot at start: its configs are taken over what its files hold (the entries after
        the snapshot are applied again next) and its offsets replace the table. A snapshot installed from the
        leader (this member was behind its compaction) replaces topic and group configs too: what the leader no
        longer has was deleted; the queues of deleted topics go once the CommitLog transfer has finished."""
        body = orjson.loads(data)
        ctx = self.ctx
        topics, groups = ctx.topics, ctx.groups
        snap_topics = {tc.topic_name: tc for tc in (TopicConfig.from_json_obj(o) for o in body.get("topics", ()))}
        snap_groups = {c.group_name: c for c in
                       (SubscriptionGroupConfig.from_json_obj(o) for o in body.get("groups", ()))}
        for name, tc in snap_topics.items():
            if topics.get(name) != tc:
                topics.create_or_update(tc)
        for name, cfg in snap_groups.items():
            if groups.get(name) != cfg:
                groups.update(cfg)
        if self._started:
            for name in [n for n in topics.all() if not topics.is_system_topic(n) and n not in snap_topics]:
                topics.delete(name)
            for name in [n for n in groups.all() if n not in snap_groups]:
                groups.delete(name)
        self._tombstones = dict.fromkeys(str(t) for t in body.get("deleted", ()))
        offsets = body.get("offsets", {})
        ctx.offsets.replace_all({k: {int(q): int(o) for q, o in v.items()} for k, v in offsets.items()})
        ctx.request_register()

    def _drop_deleted_queues(self) -> None:
        """After a CommitLog transfer: the fetched records re-created the queues of topics deleted since."""
        gone = {t for t in self._tombstones if t not in self.ctx.topics}
        if gone:
            self.real_store.delete_topics(gone)
            log.info("raft group %s: queues of deleted topics %s dropped after the transfer", self.group,
                     ", ".join(sorted(gone)))

    def adopt_topics(self) -> None:
        adopted = self.ctx.topics.adopt_topics_with_data(self.real_store.cq_table.queue_max_offsets())
        if adopted:
            self.topics_adopted += len(adopted)
            log.info("raft group %s: adopted topics %s (data but no config here)", self.group,
                     ", ".join(tc.topic_name for tc in adopted))
            with contextlib.suppress(OSError):
                self.ctx.topics.persist()
            self.ctx.request_register()

    async def stop(self) -> None:
        self._stopping = True
        await self.commands.stop()
        await self.driver.stop()
        with contextlib.suppress(Exception):
            await self.server.stop()
        if self._forward_client is not None:
            await self._forward_client.close()

    def _handle(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.ORBIT_RAFT_MESSAGE:
            return self.transport.handle(conn, cmd)
        if cmd.code == RequestCode.ORBIT_RAFT_GROUP_READ_LOG:
            return self._read_log(cmd)
        if cmd.code == RequestCode.ORBIT_RAFT_GROUP_PROPOSE:
            return self._propose_forwarded(cmd)  # type: ignore[return-value]  # the server awaits a coroutine
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"request code {cmd.code} not supported on the Raft peer port")

    # ---- catching up behind the leader's compaction: CommitLog transfer ------------------------------------------
    def _read_log(self, cmd: RemotingCommand) -> RemotingCommand:
        """A member behind our snapshot asks for CommitLog bytes from `offset` (at most `max`, one segment)."""
        ext = cmd.ext_fields or {}
        try:
            offset, most = int(ext.get("offset", "")), int(ext.get("max", ""))
        except ValueError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "offset and max must be integers")
        store = self.real_store
        if ext.get("group") != self.group:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"this member is in group {self.group}")
        if not store.min_phys_offset <= offset <= store.max_phys_offset or most < 1:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"offset {offset} outside the CommitLog "
                                f"{store.min_phys_offset}..{store.max_phys_offset}")
        return cmd.response(body=store.read_commitlog(offset, min(most, FETCH_CHUNK)))

    async def _fetch_to(self, target: int) -> None:
        """Copy the leader's (committed) CommitLog bytes from our end up to `target`, the end of a snapshot installed
        from the leader (CommitLogRaftStorage.prepare awaits this before the snapshot is saved)."""
        client = RemotingClient(name="raft-group-fetch", sign=self._sign)
        try:
            while (have := self.real_store.max_phys_offset) < target:
                if self._stopping:
                    raise RaftStoppedError("the member stops during a CommitLog transfer")
                leader = self.driver.leader_id
                if not leader or leader == self.self_id:
                    await asyncio.sleep(0.2)
                    continue
                cmd = RemotingCommand.request(RequestCode.ORBIT_RAFT_GROUP_READ_LOG, {
                    "group": self.group, "offset": str(have), "max": str(min(FETCH_CHUNK, target - have))})
                try:
                    resp = await client.invoke(self.peers[leader], cmd, 5000)
                except (RemotingError, OSError) as e:
                    log.warning("raft group %s: CommitLog fetch from %s failed: %s", self.group, leader, e)
                    await asyncio.sleep(0.5)
                    continue
                if resp.code != ResponseCode.SUCCESS or not resp.body:
                    log.warning("raft group %s: CommitLog fetch from %s at %d: %s", self.group, leader, have,
                                resp.remark or "no bytes")
                    await asyncio.sleep(0.5)
                    continue
                self.real_store.append_raw(have, bytes(resp.body))
                self.fetched_bytes += len(resp.body)
        finally:
            await client.close()
        log.warning("raft group %s: CommitLog copied from the leader up to %d", self.group, target)

    def _on_restored(self) -> None:
        """A snapshot installed from the leader: the copied records re-created the queues of topics deleted since."""
        if self._started:
            self._drop_deleted_queues()
            self.adopt_topics()

    # ---- roles ------------------------------------------------------------------------------------------------
    def _on_role(self, role: Role, term: int, leader_id: str) -> None:
        ctx = self.ctx
        dv = ctx.topics.data_version
        if role == Role.LEADER:
            self.adopt_topics()
            self._offset_changes.clear()  # later commits here go as deltas
            ctx.set_role("SYNC_MASTER", 0)
        else:
            ctx.set_role("SLAVE", self.follower_id)
        dv.state_version = term  # name servers prefer the route of the newest term
        dv.next_version()
        with contextlib.suppress(OSError):
            ctx.topics.persist()
        self.role_changes += 1
        log.warning("raft group %s: member %s is %s in term %d (leader %s)", self.group, self.self_id, role.name,
                    term, leader_id or "unknown")
        ctx.request_register()

    def runtime(self) -> dict[str, str]:
        st = self.driver.status()
        out = {"dLegerGroup": self.group, "dLegerSelfId": self.self_id, "dLegerRole": str(st.get("role", "")),
               "dLegerLeaderId": str(st.get("leader", "")), "dLegerTerm": str(st.get("term", 0)),
               "dLegerCommitIndex": str(st.get("commit", 0)), "dLegerAppliedIndex": str(self.sm.applied),
               "dLegerLastIndex": str(st.get("last_index", 0))}
        progress = st.get("progress")
        if isinstance(progress, dict):
            last = int(st.get("last_index", 0))  # type: ignore[call-overload]
            out["dLegerPeerLag"] = ";".join(f"{p}:{max(0, last - int(v['match']))}" for p, v in progress.items())
        behind = self.raft_log.behind
        if behind is not None:
            out["dLegerBehind"] = f"{self.real_store.max_phys_offset}..{behind[1]}"
        out["dLegerFetchedBytes"] = str(self.fetched_bytes)
        return out

def _result_bytes(result: object) -> bytes:
    if result is None:
        return b""
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result)
    raise TypeError(f"a forwarded command's apply must return bytes or None, not {type(result).__name__}")


def create(ctx: BrokerContext, env: ServiceEnv) -> RaftGroupService | None:
    if not ctx.config.enable_dleger_commit_log:
        return None
    return RaftGroupService(ctx, env)


__all__ = ["RaftGroupService", "create", "follower_broker_id", "group_peers", "slave_read_target"]

