"""A local Raft broker group for tests (issue 14): one name server and N brokers with enableDLegerCommitLog, each a
real process (ServerProcess), on free ports. Test-only; nothing under orbitmq/ imports it."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.testing.controller_cluster import wait_until
from orbitmq.testing.procs import (
    LOCALHOST,
    PortPool,
    ServerProcess,
    blocking_request,
    registered_master,
    start_namesrv,
    wait_broker_registered,
    write_broker_conf,
)


class RaftGroup:
    def __init__(self, directory: Path, size: int = 3, broker_name: str = "raft-a", **keys: Any) -> None:
        self.dir = Path(directory)
        self.size = size
        self.broker_name = broker_name
        self.keys = keys
        self.ns: ServerProcess | None = None
        pool = PortPool()  # distinct: a Raft port equal to another member's broker or HA port fails its start
        self.ports = [pool.broker_port() for _ in range(size)]
        self.raft_ports = [pool.port() for _ in range(size)]
        self.ids = [f"n{i}" for i in range(size)]
        self.peers = ";".join(f"{i}-{LOCALHOST}:{p}" for i, p in zip(self.ids, self.raft_ports, strict=True))
        self.brokers: list[ServerProcess] = []

    @property
    def ns_addr(self) -> str:
        assert self.ns is not None
        return f"{LOCALHOST}:{self.ns.ports[0]}"

    def addr(self, i: int) -> str:
        return f"{LOCALHOST}:{self.ports[i]}"

    def start(self) -> RaftGroup:
        self.ns = start_namesrv(self.dir / "namesrv")
        for i in range(self.size):
            d = self.dir / self.ids[i]
            conf = write_broker_conf(d, self.ports[i], self.ns_addr, brokerName=self.broker_name,
                                     enableDLegerCommitLog=True, dLegerGroup=self.broker_name,
                                     dLegerPeers=self.peers, dLegerSelfId=self.ids[i], **self.keys)
            p = ServerProcess.cli(["broker", "-c", str(conf)], d / "broker.log", ports=[self.ports[i]],
                                  name=f"raft-broker-{self.ids[i]}")
            self.brokers.append(p.start(wait=False))
        for i, p in enumerate(self.brokers):
            p.wait_ready()
            wait_broker_registered(self.ns_addr, self.addr(i), 30.0, proc=p)
        return self

    def runtime(self, i: int, timeout_s: float = 2.0) -> dict[str, str]:
        resp = blocking_request(self.addr(i), RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s)
        table: dict[str, str] = json.loads(resp.body)["table"]
        return table

    def _safe_runtime(self, i: int) -> dict[str, str]:
        if not self.brokers[i].running:
            return {}
        try:
            return self.runtime(i)
        except (OSError, ConnectionError, ValueError, KeyError):
            return {}

    def leader(self, timeout_s: float = 30.0, exclude: int | None = None) -> int:
        """Index of the member that is leader (and says so in a term nobody else leads in), once the name server
        lists it as the group's brokerId 0 (clients route sends to it: before that a client finds no route)."""
        def find() -> tuple[int] | None:  # a tuple: wait_until wants a truthy answer, and 0 is a member
            leaders = [i for i in range(self.size) if i != exclude
                       and self._safe_runtime(i).get("dLegerRole") == "LEADER"]
            if len(leaders) != 1:
                return None
            try:
                routed = registered_master(self.ns_addr, self.broker_name) == self.addr(leaders[0])
            except (OSError, ConnectionError):
                routed = False
            return (leaders[0],) if routed else None
        return wait_until("a Raft leader registered as brokerId 0", find, timeout_s, 0.05)[0]

    def kill9(self, i: int) -> float:
        self.brokers[i].kill9()
        return time.monotonic()

    def restart(self, i: int) -> None:
        self.brokers[i].restart()
        wait_broker_registered(self.ns_addr, self.addr(i), 30.0, proc=self.brokers[i])

    def wait_same_log(self, timeout_s: float = 60.0) -> str:
        def same() -> str | None:
            offs = {self._safe_runtime(i).get("commitLogMaxOffset") for i in range(self.size)}
            return offs.pop() if len(offs) == 1 and None not in offs else None
        return wait_until("the same CommitLog end on every member", same, timeout_s, 0.1)

    def pids(self, i: int) -> set[int]:
        """Member i's process and its children."""
        pid = self.brokers[i].pid
        if pid is None:
            return set()
        import psutil

        try:
            return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            return set()

    def bytes_sent(self, i: int) -> dict[str, int]:
        """The kernel's TCP bytes_sent of every socket member i's process holds now ("local peer" -> bytes), from
        `ss -tinp`: what the process sent over each connection (client, peer and name-server sockets alike)."""
        return tcp_bytes_sent(self.pids(i))

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(lines)}" for p in self.brokers)

    def close(self) -> None:
        for p in self.brokers:
            p.close()
        if self.ns is not None:
            self.ns.close()

    def __enter__(self) -> RaftGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SS_PID = re.compile(r"pid=(\d+),")
_SS_SENT = re.compile(r"\bbytes_sent:(\d+)")


def tcp_bytes_sent(pids: set[int]) -> dict[str, int]:
    """"local peer" -> bytes_sent for the TCP sockets held by `pids` (ss -tinp; Linux)."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, timeout=10, check=True).stdout
    pairs: list[list[str]] = []
    for line in out.splitlines():
        if line[:1].isspace() and pairs:
            pairs[-1].append(line)  # the info line of the socket above
        else:
            pairs.append([line])
    sent: dict[str, int] = {}
    for head, *rest in pairs:
        info = " ".join(rest)
        owners = {int(p) for p in _SS_PID.findall(head)}
        if not owners & pids:
            continue
        cols = head.split()
        m = _SS_SENT.search(info)
        if len(cols) >= 5 and m is not None:
            sent[f"{cols[3]} {cols[4]}"] = int(m.group(1))
    return sent


def sent_between(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes sent between two tcp_bytes_sent readings (sockets opened meanwhile count from 0)."""
    return sum(v - before.get(k, 0) for k, v in after.items() if v >= before.get(k, 0))
