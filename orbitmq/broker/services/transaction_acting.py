"""Transactions finished on a slave acting as master (RIP-32), and their hand-off to the master when it is back.

The acting slave may not write op messages to its own CommitLog (a replica of its master's), so each commit or
rollback it decides is recorded here (memory + config/transactionActingOps.json). Once a master is live again the
records are handed to it as END_TRANSACTION requests flagged `actingMasterHandOff=true`: the master writes only
the op message (the real message of a commit was already delivered through the escape bridge), so it never checks
those half messages again. A record is dropped once the master answered SUCCESS.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import orjson

from orbitmq.base.errors import OrbitMQError
from orbitmq.base.fsio import atomic_write, read_with_backup
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient

log = logging.getLogger(__name__)

FILE_NAME = "transactionActingOps.json"
HAND_OFF_FLAG = "actingMasterHandOff"
HAND_OFF_TIMEOUT_MS = 3000


@dataclass(frozen=True, slots=True)
class ActingOp:
    half_offset: int  # queue offset of the half message (tranStateTableOffset)
    phys_offset: int  # its CommitLog offset (commitLogOffset)
    group: str  # producer group (PGROUP)
    uniq: str
    kind: int  # SysFlag.TRANSACTION_COMMIT or TRANSACTION_ROLLBACK

    def header(self) -> dict[str, str]:
        return {"producerGroup": self.group, "tranStateTableOffset": str(self.half_offset),
                "commitLogOffset": str(self.phys_offset), "commitOrRollback": str(self.kind),
                "fromTransactionCheck": "true", "msgId": self.uniq, "transactionId": self.uniq,
                HAND_OFF_FLAG: "true"}


class ActingOps:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: list[ActingOp] = []
        self.handed_off = 0

    def load(self) -> None:
        for data in read_with_backup(self.path):
            try:
                self.pending = [ActingOp(int(d["h"]), int(d["p"]), str(d["g"]), str(d["u"]), int(d["k"]))
                                for d in orjson.loads(data)]
                return
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s unreadable (%s); trying its backup", self.path, e)

    def _persist(self) -> None:
        atomic_write(self.path, orjson.dumps([{"h": o.half_offset, "p": o.phys_offset, "g": o.group, "u": o.uniq,
                                               "k": o.kind} for o in self.pending]))

    def record(self, op: ActingOp) -> None:
        self.pending.append(op)
        try:
            self._persist()
        except OSError as e:  # kept in memory; the next record or hand-off writes again
            log.warning("persisting acting transaction ops failed: %s", e)

    async def hand_off(self, client: RemotingClient, master_addr: str) -> int:
        """Send every pending record to the master; returns how many it accepted (the rest are kept)."""
        left: list[ActingOp] = []
        done = 0
        for op in self.pending:
            cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, op.header())
            try:
                resp = await client.invoke(master_addr, cmd, HAND_OFF_TIMEOUT_MS)
            except OrbitMQError as e:
                log.info("hand-off of transaction %s to %s failed: %r", op.uniq, master_addr, e)
                left.append(op)
                continue
            if resp.code == ResponseCode.SUCCESS:
                done += 1
            elif resp.code == ResponseCode.SLAVE_NOT_AVAILABLE:  # not a master (yet): later
                left.append(op)
            else:  # the master cannot find the half (deleted by retention): nothing left to finish
                log.warning("hand-off of transaction %s refused by %s: code %d %s", op.uniq, master_addr,
                            resp.code, resp.remark)
                done += 1
        if done:
            self.pending = left
            self.handed_off += done
            try:
                self._persist()
            except OSError as e:
                log.warning("persisting acting transaction ops failed: %s", e)
        return done
