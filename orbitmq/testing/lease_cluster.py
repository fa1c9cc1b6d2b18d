"""LeaseCluster: lease election (enableLeaseElection) on real processes for tests and benches — a name server and
one broker group of `size` members (two by default) on free ports, every broker reaching the lease database through
its own TcpProxy (PostgreSQL / MySQL URLs) so the database can be cut off or black-holed per broker, plus kill -9,
SIGSTOP / SIGCONT and restarts. Test-only: nothing under orbitmq/ imports this module.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from orbitmq.testing.controller_cluster import CLUSTER, ControllerCluster, ProxyLoop, _cut, wait_until
from orbitmq.testing.procs import (
    LOCALHOST,
    PortPool,
    ServerProcess,
    broker_conf_keys,
    start_namesrv,
    write_conf,
)
from orbitmq.testing.tcp_proxy import TcpProxy

GROUP = "broker-a"
# fast but not twitchy on a busy 2-core machine; lease timing comes from the test (ttl_ms)
BROKER_DEFAULTS: dict[str, Any] = {
    "allAckInSyncStateSet": True, "checkSyncStateSetPeriod": 1000, "haMaxTimeSlaveNotCatchup": 5000,
    "haHousekeepingInterval": 6000, "haSendHeartbeatInterval": 1000, "registerNameServerPeriod": 2000,
    "syncBrokerMetadataPeriod": 1000, "flushDiskType": "ASYNC_FLUSH",
}


async def _set_delay(p: TcpProxy, ms: float) -> None:
    p.delay_ms = ms


@dataclass
class LeaseMember:
    index: int
    port: int
    dir: Path
    proc: ServerProcess
    db_proxy: TcpProxy | None = None
    stopped: bool = False  # SIGSTOP'd

    group: str = GROUP

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def name(self) -> str:
        return f"{GROUP}#{self.index}"


def _through(url: str, proxy_addr: str) -> str:
    """`url` with its host:port replaced by the proxy's."""
    parts = urlsplit(url)
    creds = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{creds}@{proxy_addr}" if creds else proxy_addr))


@dataclass
class LeaseCluster:
    """`with LeaseCluster(tmp, url) as c: c.start()`; then c.master(), c.kill9(m), c.sigstop(m), c.cut_db(m) ..."""

    root: Path
    url: str
    size: int = 2
    ttl_ms: int = 2000
    broker_keys: dict[str, Any] = field(default_factory=dict)
    members: list[LeaseMember] = field(default_factory=list)
    ns: ServerProcess | None = None
    ns_addr: str = ""

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.proxies = ProxyLoop()
        self._ports = PortPool()
        self.first_group = GROUP

    # the same as ControllerCluster's (they read only ns_addr, first_group and a member's addr / proc)
    kill9 = ControllerCluster.kill9  # kill -9; returns time.monotonic() before the signal
    restart = ControllerCluster.restart  # start a killed member again with the same conf and data
    runtime_info = ControllerCluster.runtime_info
    has_topic = ControllerCluster.has_topic
    route = ControllerCluster.route
    route_master_addr = ControllerCluster.route_master_addr
    logs = ControllerCluster.logs  # the tail of every process's log
    _free_broker_port = ControllerCluster._free_broker_port  # a port block no member laid out earlier uses

    # -- layout and lifecycle --
    def _lay_out(self, index: int) -> LeaseMember:
        port = self._free_broker_port()
        d = self.root / f"{GROUP}-{index}"
        proxy = None
        url = self.url
        if not url.startswith("sqlite:"):
            target = urlsplit(url)
            proxy = self.proxies.run(TcpProxy(f"{target.hostname}:{target.port}", frames=False,
                                              name=f"{GROUP}#{index}->db").start())
            self.proxies.proxies.append(proxy)
            url = _through(url, proxy.addr)
        keys = broker_conf_keys(d / "store", port, self.ns_addr)
        keys.update(BROKER_DEFAULTS)
        keys.update(brokerName=GROUP, brokerClusterName=CLUSTER, haListenPort=port + 1, brokerIP2=LOCALHOST,
                    enableLeaseElection=True, leaseStoreUrl=url, leaseTtlMillis=self.ttl_ms)
        keys.pop("brokerRole", None)
        keys.pop("brokerId", None)
        keys.update(self.broker_keys)
        conf = write_conf(d / "broker.conf", keys)
        proc = ServerProcess.cli(["broker", "-c", str(conf)], d / "broker.log", ports=[port], name=f"{GROUP}#{index}")
        return LeaseMember(index, port, d, proc, proxy)

    def start(self, timeout_s: float = 60.0) -> LeaseCluster:
        """The name server, then member 0 (it takes the first lease), then the others; returns when a master is in
        the route and every member is in its SyncStateSet."""
        self.ns = start_namesrv(self.root / "namesrv")
        self.ns_addr = f"{LOCALHOST}:{self.ns.ports[0]}"
        self.members = [self._lay_out(i) for i in range(self.size)]
        self.members[0].proc.start()
        wait_until("member 0 holds the first lease", lambda: self.master() is self.members[0], timeout_s)
        for m in self.members[1:]:
            m.proc.start()
        self.wait_group_ready(timeout_s=timeout_s)
        return self

    def all_procs(self) -> list[ServerProcess]:
        return ([self.ns] if self.ns else []) + [m.proc for m in self.members]

    def close(self) -> None:
        for m in self.members:
            if m.stopped:
                self.sigcont(m)
        for p in reversed(self.all_procs()):
            p.close()
        self.proxies.close()

    def __enter__(self) -> LeaseCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults --
    def sigstop(self, m: LeaseMember) -> float:
        """Freeze the broker (its sockets stay open, nothing answers); returns time.monotonic() before the signal."""
        assert m.proc.pid is not None
        t = time.monotonic()
        os.killpg(m.proc.pid, signal.SIGSTOP)
        m.stopped = True
        return t

    def sigcont(self, m: LeaseMember) -> float:
        assert m.proc.pid is not None
        t = time.monotonic()
        os.killpg(m.proc.pid, signal.SIGCONT)
        m.stopped = False
        return t

    def cut_db(self, m: LeaseMember, silent: bool = True) -> None:
        """The broker loses its database: black-holed (silent: connections stay open, nothing passes, statements
        time out) or refused (connections reset, new ones refused)."""
        assert m.db_proxy is not None, "sqlite URLs have no proxy"
        if silent:
            self.proxies.run(_set_delay(m.db_proxy, 1e12))  # in effect when this returns
        else:
            self.proxies.block(m.db_proxy)

    def heal_db(self, m: LeaseMember) -> None:
        assert m.db_proxy is not None
        self.proxies.run(_set_delay(m.db_proxy, 0.0))
        self.proxies.unblock(m.db_proxy)
        self.proxies.run(_cut(m.db_proxy))  # black-holed connections are reset: the driver reconnects

    # -- what the brokers and the name server say --
    def member_by_addr(self, addr: str | None) -> LeaseMember | None:
        return next((m for m in self.members if m.addr == addr), None)

    def _info_or_empty(self, m: LeaseMember) -> dict[str, str]:
        if not m.proc.running or m.stopped:
            return {}
        try:
            return self.runtime_info(m, 1.0)
        except (OSError, ConnectionError, TimeoutError, RuntimeError):
            return {}

    def master(self, group: str | None = None, topic: str | None = None) -> LeaseMember | None:
        """The running member that is master of its lease epoch and acknowledges writes (and, with `topic`, is
        brokerId 0 in the route)."""
        for m in self.members:
            info = self._info_or_empty(m)
            if info.get("controllerRole") == "MASTER" and info.get("fenced") == "false":
                if topic is None or self.route_master_addr(topic) == m.addr:
                    return m
        return None

    def wait_master(self, group: str | None = None, *, topic: str | None = None, not_addr: str | None = None,
                    timeout_s: float = 30.0) -> LeaseMember:
        def check() -> LeaseMember | None:
            m = self.master(group, topic)
            return m if m is not None and m.addr != not_addr else None

        return wait_until(f"a lease master other than {not_addr}", check, timeout_s)

    def sync_state_set_size(self) -> int:
        m = self.master()
        if m is None:
            return 0
        members = self._info_or_empty(m).get("syncStateSet", "")
        return len([x for x in members.split(",") if x])

    def wait_group_ready(self, group: str | None = None, size: int | None = None, timeout_s: float = 60.0) -> None:
        want = size if size is not None else sum(1 for m in self.members if m.proc.running and not m.stopped)
        wait_until(f"{want} members in the lease master's SyncStateSet", lambda: self.sync_state_set_size() >= want,
                   timeout_s, 0.1)
