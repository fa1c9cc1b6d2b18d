"""Raft broker group hooks for other modules (issue 14, docs/design/raft-group.md "Hooks"), three in-process brokers
with enableDLegerCommitLog in one event loop: a command registered on every member is applied everywhere in log
order; forward_command from a follower is proposed by the leader and returns the apply result; messages listeners
see each stored MESSAGES entry on every member; snapshot parts are saved in the group snapshot and restored."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orbitmq.broker.raft_mode.service import RaftGroupService
from orbitmq.broker.raft_mode.state_machine import GroupStateMachine
from orbitmq.store.results import MessageInner
from tests.unit.broker.raft_inprocess import raft_brokers, until


def test_commands_forwarding_messages_listeners_and_snapshot_parts(tmp_path: Path) -> None:
    async def main() -> None:
        brokers = raft_brokers(tmp_path, "raft-x", raft_snapshot_every=5)
        applied: dict[str, list[tuple[int, bytes]]] = {}
        stored: dict[str, list[str]] = {}
        parts: dict[str, list[bytes]] = {}
        for b in brokers:
            await b.start()
        try:
            groups: list[RaftGroupService] = [b.ctx.services["raft_group"] for b in brokers]  # type: ignore[union-attr,misc]
            for g in groups:
                me = g.self_id
                applied[me], stored[me], parts[me] = [], [], []
                g.register_command(0x10, lambda i, p, me=me: applied[me].append((i, p)) or p[::-1])
                g.add_messages_listener(lambda i, msgs, r, me=me: stored[me].extend(m.topic for m in msgs))
                g.register_snapshot_part(0x10, lambda me=me: f"state-of-{me}".encode(),
                                         lambda data, me=me: parts[me].append(data))
            def agreed() -> RaftGroupService | None:
                ids = {g.driver.leader_id for g in groups}
                lead = next((g for g in groups if g.driver.is_leader), None)
                return lead if lead is not None and ids == {lead.self_id} else None

            leader = await until("a leader every member knows", agreed)
            follower = next(g for g in groups if g is not leader)
            assert await follower.forward_command(0x10, b"abc") == b"cba"
            assert await leader.forward_command(0x10, b"xyz") == b"zyx"
            await until("both commands on every member",
                         lambda: all([p for _, p in applied[g.self_id]] == [b"abc", b"xyz"] for g in groups))
            indexes = {tuple(i for i, _ in applied[g.self_id]) for g in groups}
            assert len(indexes) == 1  # the same log index on every member
            for n in range(6):  # enough entries for a snapshot (raftSnapshotEvery=5)
                result = await leader.ctx.store.put_message(MessageInner("RaftHooks", 0, b"m%d" % n, {}))
                assert result.ok, result
            await until("every member stored the 6 messages",
                         lambda: all(stored[g.self_id] == ["RaftHooks"] * 6 for g in groups))
            # the group snapshot carries each module's part; restoring it hands the part back
            sm: GroupStateMachine = leader.sm
            snap = sm.snapshot()
            sm.restore(snap)
            assert parts[leader.self_id] == [f"state-of-{leader.self_id}".encode()]
        finally:
            for b in reversed(brokers):
                await b.stop()

    asyncio.run(asyncio.wait_for(main(), 90))
