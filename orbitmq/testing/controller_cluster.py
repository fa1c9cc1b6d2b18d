"""ControllerCluster: RIP-44 controller mode on real processes for tests and benches — N `orbitmq controller`s, a
name server and broker groups of 3 (`enableControllerMode=true`) on free ports, each broker reaching the
controllers through its own TcpProxy set and (optionally) serving HA through a forwarder in a network namespace,
so one broker can be partitioned from controllers and replicas while clients still reach it. Test-only: nothing
under orbitmq/ imports this module, and it never changes what the servers do.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import BrokerReplicasInfo, GetMetaDataResponseHeader, KVTable, TopicRouteData
from orbitmq.protocol.bodies.controller import ReplicasInfo, broker_names_body
from orbitmq.testing.procs import (
    LOCALHOST,
    PortPool,
    ServerProcess,
    blocking_request,
    broker_conf_keys,
    start_namesrv,
    write_conf,
)
from orbitmq.testing.tcp_proxy import TcpProxy

T = TypeVar("T")
RAFT_GROUP = "orbit-ctl"
CLUSTER = "DefaultCluster"
# fast but not twitchy on a busy 2-core machine
CONTROLLER_DEFAULTS: dict[str, Any] = {"scanNotActiveBrokerInterval": 500, "scanInactiveMasterInterval": 1000}
BROKER_DEFAULTS: dict[str, Any] = {
    "enableControllerMode": True, "brokerId": -1, "brokerRole": "SLAVE", "allAckInSyncStateSet": True,
    "controllerHeartBeatTimeoutMills": 3000, "brokerHeartbeatInterval": 500, "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000, "haMaxTimeSlaveNotCatchup": 5000, "haHousekeepingInterval": 6000,
    "haSendHeartbeatInterval": 1000, "registerNameServerPeriod": 2000, "flushDiskType": "ASYNC_FLUSH",
}


def wait_until(what: str, check: Callable[[], T | None], timeout_s: float = 20.0, every_s: float = 0.05) -> T:
    """Poll `check` until it returns something truthy (returned); AssertionError naming `what` at the deadline.
    Exceptions from `check` count as "not yet" (the last one is shown)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            got = check()
            if got:
                return got
            last = got
        except (OSError, ConnectionError, RuntimeError, ValueError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")
        time.sleep(every_s)


# ---- controller link proxies: TcpProxy instances on one background event loop ---------------------------
class ProxyLoop:
    """A daemon thread running an event loop that hosts TcpProxy instances; blocking controls for tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxy-loop", daemon=True)
        self._thread.start()
        self.proxies: list[TcpProxy] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def add(self, target: str, name: str, port: int = 0) -> TcpProxy:
        proxy = self.run(TcpProxy(target, port=port, name=name).start())
        self.proxies.append(proxy)
        return proxy

    def block(self, proxy: TcpProxy) -> None:
        self.run(proxy.block())

    def unblock(self, proxy: TcpProxy) -> None:
        self.run(proxy.unblock())

    def close(self) -> None:
        if not self.loop.is_running():
            return
        for p in self.proxies:
            with contextlib.suppress(Exception):
                self.run(p.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


async def _cut(p: TcpProxy) -> None:
    p.cut()


# ---- HA gate: a forwarder per broker inside a network namespace -----------------------------------------
def netns_available() -> bool:
    """Root with `ip` and network namespaces (what HaGate needs)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class HaGate:
    """A network namespace joined to the host by a veth pair (host side `host_ip`, namespace side `ns_ip`).

    A broker advertises `ns_ip:haListenPort` as its HA address (brokerIP2) while it listens on 0.0.0.0 of the host;
    a forwarder process in the namespace listens on `ns_ip:<that port>` and forwards to `host_ip:<port>`. Killing
    the forwarder cuts every replica's HA link to that broker (connections reset, new connects refused); starting it
    again heals. Nothing else of the broker goes through the gate. Needs root (see netns_available())."""

    def __init__(self, root: Path) -> None:
        tag = f"{os.getpid() % 100000}{int(time.monotonic() * 1000) % 1000}"
        self.ns = f"omq{tag}"
        self.veth_host, self.veth_ns = f"oqh{tag}", f"oqn{tag}"
        used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
        third = next(k for k in range((os.getpid() % 200) + 20, 1000) if f"10.213.{k % 250}." not in used) % 250
        self.host_ip, self.ns_ip = f"10.213.{third}.1", f"10.213.{third}.2"
        self.root = root
        self.forwarders: dict[int, ServerProcess] = {}
        _ip("netns", "add", self.ns)
        atexit.register(self.close)
        try:
            _ip("link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
            _ip("link", "set", self.veth_ns, "netns", self.ns)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.veth_host)
            _ip("link", "set", self.veth_host, "up")
            _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.veth_ns)
            _ip("-n", self.ns, "link", "set", self.veth_ns, "up")
            _ip("-n", self.ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def forwarder(self, port: int) -> ServerProcess:
        """The forwarder for HA port `port` (created on first use, started by open())."""
        if port not in self.forwarders:
            argv = ["ip", "netns", "exec", self.ns, sys.executable, "-m", "orbitmq.testing.controller_cluster",
                    "forward", f"{self.ns_ip}:{port}", f"{self.host_ip}:{port}"]
            self.forwarders[port] = ServerProcess(argv, self.root / f"ha-gate-{port}.log", ports=[port],
                                                  host=self.ns_ip, name=f"ha-gate:{port}")
        return self.forwarders[port]

    def open(self, port: int) -> None:
        f = self.forwarder(port)
        if not f.running:
            f.start()

    def cut(self, port: int) -> None:
        self.forwarder(port).kill9()

    def close(self) -> None:
        for f in self.forwarders.values():
            f.close()
        _ip("netns", "del", self.ns, check=False)  # removes the veth pair too
        _ip("link", "del", self.veth_host, check=False)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)


async def _forward(listen: str, target: str) -> None:
    lhost, _, lport = listen.rpartition(":")
    thost, _, tport = target.rpartition(":")

    async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await r.read(1 << 18):
                w.write(data)
                await w.drain()
        w.transport.abort()

    async def serve(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cw.transport.abort()
            return
        await asyncio.gather(pump(cr, tw), pump(tr, cw))

    server = await asyncio.start_server(serve, lhost, int(lport), reuse_address=True)
    async with server:
        await server.serve_forever()


# ---- cluster members ------------------------------------------------------------------------------------
@dataclass
class Controller:
    node: str
    addr: str
    proc: ServerProcess


@dataclass
class BrokerMember:
    """One broker of a group: its ports, its controller proxies, its process."""

    group: str
    index: int
    port: int
    ha_port: int
    dir: Path
    proc: ServerProcess
    ctl_proxies: list[TcpProxy] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def name(self) -> str:
        return f"{self.group}#{self.index}"

    @property
    def store_dir(self) -> Path:
        return self.dir / "store"


class ControllerCluster:
    """`with ControllerCluster(tmp) as c: c.start()`; then c.master(), c.kill9(m), c.restart(m), c.isolate(m) ...

    broker_keys / controller_keys / namesrv_keys go into every broker.conf / controller.conf / namesrv.conf (they win
    over the defaults above). ha_gate: put each broker's HA port behind an HaGate forwarder (needs root; see
    netns_available()); without it brokerIP2 is 127.0.0.1 and cut_ha() is unavailable."""

    def __init__(self, root: str | os.PathLike[str], *, controllers: int = 3, groups: tuple[str, ...] = ("broker-a",),
                 group_size: int = 3, broker_keys: dict[str, Any] | None = None,
                 controller_keys: dict[str, Any] | None = None, namesrv_keys: dict[str, Any] | None = None,
                 ha_gate: bool = False) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.broker_keys = {**BROKER_DEFAULTS, **(broker_keys or {})}
        self.namesrv_keys = dict(namesrv_keys or {})
        self.proxies = ProxyLoop()
        self._ports = PortPool()
        self.gate = HaGate(self.root) if ha_gate else None
        self.controllers = self._lay_out_controllers(controllers, {**CONTROLLER_DEFAULTS, **(controller_keys or {})})
        self.ns: ServerProcess | None = None
        self.ns_addr = ""
        self.groups: dict[str, list[BrokerMember]] = {g: [] for g in groups}
        self.group_size = group_size

    # -- layout --
    def _lay_out_controllers(self, n: int, keys: dict[str, Any]) -> list[Controller]:
        ports = [self._ports.port() for _ in range(n)]
        peers = ";".join(f"n{i}-{LOCALHOST}:{p}" for i, p in enumerate(ports))
        out = []
        for i, port in enumerate(ports):
            d = self.root / f"controller-n{i}"
            conf = write_conf(d / "controller.conf", {
                "controllerDLegerGroup": RAFT_GROUP, "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
                "controllerStorePath": str(d / "store"), **keys})
            proc = ServerProcess.cli(["controller", "-c", str(conf)], d / "controller.log", ports=[port],
                                     name=f"controller-n{i}")
            out.append(Controller(f"n{i}", f"{LOCALHOST}:{port}", proc))
        return out

    def _free_broker_port(self) -> int:
        """A broker port whose block (VIP p-2 .. HA p+1) overlaps no port handed out earlier (PortPool)."""
        return self._ports.broker_port()

    def _lay_out_broker(self, group: str, index: int) -> BrokerMember:
        port = self._free_broker_port()
        d = self.root / f"{group}-{index}"
        proxies = [self.proxies.add(c.addr, f"{group}#{index}->{c.node}") for c in self.controllers]
        keys = broker_conf_keys(d / "store", port, self.ns_addr)
        keys.update(brokerName=group, brokerClusterName=CLUSTER, haListenPort=port + 1,
                    controllerAddr=";".join(p.addr for p in proxies),
                    brokerIP2=self.gate.ns_ip if self.gate else LOCALHOST)
        keys.update(self.broker_keys)
        conf = write_conf(d / "broker.conf", keys)
        proc = ServerProcess.cli(["broker", "-c", str(conf)], d / "broker.log", ports=[port], name=f"{group}#{index}")
        return BrokerMember(group, index, port, port + 1, d, proc, proxies)

    # -- lifecycle --
    def start(self, timeout_s: float = 60.0) -> ControllerCluster:
        """Controllers (until a leader serves), the name server, then each group: member 0 first (it becomes the
        first master), the others after it; returns when every group has a master in its route and the controller
        lists all members in the SyncStateSet."""
        for c in self.controllers:
            c.proc.start(wait=False)
        for c in self.controllers:
            c.proc.wait_ready()
        self.ns = start_namesrv(self.root / "namesrv", **self.namesrv_keys)
        self.ns_addr = f"{LOCALHOST}:{self.ns.ports[0]}"
        self.controller_leader(timeout_s)
        for group in self.groups:
            members = self.groups[group] = [self._lay_out_broker(group, i) for i in range(self.group_size)]
            for m in members:
                if self.gate is not None:
                    self.gate.open(m.ha_port)
            members[0].proc.start()
            wait_until(f"{members[0].name} elected first master",
                       lambda m0=members[0], g=group: self._controller_master_addr(g) == m0.addr, timeout_s)
            for m in members[1:]:
                m.proc.start()
        for group in self.groups:
            self.wait_group_ready(group, timeout_s=timeout_s)
        return self

    def members(self, group: str | None = None) -> list[BrokerMember]:
        return self.groups[group or self.first_group]

    @property
    def first_group(self) -> str:
        return next(iter(self.groups))

    def all_procs(self) -> list[ServerProcess]:
        procs = [c.proc for c in self.controllers] + ([self.ns] if self.ns else [])
        return procs + [m.proc for ms in self.groups.values() for m in ms]

    def close(self) -> None:
        for p in reversed(self.all_procs()):
            p.close()
        self.proxies.close()
        if self.gate is not None:
            self.gate.close()

    def __enter__(self) -> ControllerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def logs(self, lines: int = 25) -> str:
        """The tail of every log (for a failing test's report)."""
        return "\n".join(f"--- {p.name} ({p.log_path}) ---\n{p.log_tail(lines)}" for p in self.all_procs())

    # -- faults --
    def kill9(self, m: BrokerMember | Controller) -> float:
        """kill -9 a broker or controller; returns time.monotonic() just before the signal."""
        t = time.monotonic()
        m.proc.kill9()
        return t

    def restart(self, m: BrokerMember | Controller, wait: bool = True) -> None:
        """Start a killed member again with the same conf and data."""
        if m.proc.running:
            m.proc.terminate()
        m.proc.start(wait=wait)

    def kill_everything(self) -> None:
        for p in self.all_procs():
            if p is not self.ns:
                p.kill9()

    def restart_everything(self, timeout_s: float = 60.0) -> None:
        """Controllers first, then every broker at once (no ordering help)."""
        for c in self.controllers:
            c.proc.start(wait=False)
        for ms in self.groups.values():
            for m in ms:
                m.proc.start(wait=False)
        for p in self.all_procs():
            p.wait_ready(timeout_s)

    def cut_controller_links(self, m: BrokerMember, silent: bool = False) -> None:
        """Partition the broker from every controller. Default: its live connections reset and new connects are
        refused (the controllers see the close at once). silent=True: a black hole — connections stay open (new ones
        are accepted) but no byte passes either way, so the controllers only notice through heartbeat expiry."""
        for p in m.ctl_proxies:
            if silent:
                self.proxies.loop.call_soon_threadsafe(setattr, p, "delay_ms", 1e12)
            else:
                self.proxies.block(p)

    def heal_controller_links(self, m: BrokerMember) -> None:
        """Undo either kind of cut (black-holed connections are reset; the broker reconnects)."""
        for p in m.ctl_proxies:
            self.proxies.loop.call_soon_threadsafe(setattr, p, "delay_ms", 0.0)
            self.proxies.unblock(p)
            self.proxies.run(_cut(p))

    def cut_ha(self, m: BrokerMember) -> None:
        """Cut every replica's HA link to this broker (needs ha_gate=True)."""
        if self.gate is None:
            raise RuntimeError("cut_ha needs ControllerCluster(ha_gate=True)")
        self.gate.cut(m.ha_port)

    def heal_ha(self, m: BrokerMember) -> None:
        if self.gate is None:
            raise RuntimeError("heal_ha needs ControllerCluster(ha_gate=True)")
        self.gate.open(m.ha_port)

    def isolate(self, m: BrokerMember, silent: bool = True) -> None:
        """The isolated-master partition: no controller (black-holed unless silent=False), no replica (HA links cut);
        clients and the name server still reach it."""
        self.cut_controller_links(m, silent)
        self.cut_ha(m)

    def heal(self, m: BrokerMember) -> None:
        self.heal_controller_links(m)
        self.heal_ha(m)

    # -- what the controllers say --
    def controller_metadata(self, c: Controller, timeout_s: float = 1.0) -> GetMetaDataResponseHeader:
        resp = blocking_request(c.addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO), timeout_s)
        return GetMetaDataResponseHeader.from_ext(resp.ext_fields)

    def controller_leader(self, timeout_s: float = 30.0) -> Controller:
        """The one running controller that says it is the leader (polled until exactly one does)."""
        def check() -> Controller | None:
            leaders = []
            for c in self.controllers:
                if not c.proc.running:
                    continue
                with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                    if self.controller_metadata(c).is_leader:
                        leaders.append(c)
            return leaders[0] if len(leaders) == 1 else None

        return wait_until("a controller leader", check, timeout_s)

    def replicas_info(self, group: str | None = None, timeout_s: float = 1.5) -> ReplicasInfo | None:
        """CONTROLLER_GET_SYNC_STATE_DATA of the group from the current leader (None when no leader answers)."""
        g = group or self.first_group
        for c in self.controllers:
            if not c.proc.running:
                continue
            with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                resp = blocking_request(c.addr, RemotingCommand.request(
                    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=broker_names_body([g])), timeout_s)
                if resp.code == ResponseCode.SUCCESS:
                    return BrokerReplicasInfo.from_json(resp.body).replicas_info_table.get(g)
        return None

    def _controller_master_addr(self, group: str) -> str | None:
        info = self.replicas_info(group)
        return info.master_address if info is not None else None

    def sync_state_set(self, group: str | None = None) -> set[str]:
        """Addresses of the controller's SyncStateSet members (master included)."""
        info = self.replicas_info(group)
        return set() if info is None else {r.broker_address for r in info.in_sync_replicas if r.broker_address}

    # -- what the name server says --
    def route(self, topic: str, timeout_s: float = 1.5) -> TopicRouteData | None:
        resp = blocking_request(self.ns_addr, RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}), timeout_s)
        return TopicRouteData.from_json(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else None

    def route_master_addr(self, topic: str, group: str | None = None) -> str | None:
        """brokerId 0's address of the group in the topic's route (None when absent)."""
        r = self.route(topic)
        g = group or self.first_group
        for bd in (r.broker_datas if r else []):
            if bd.broker_name == g:
                return bd.broker_addrs.get(0)
        return None

    def runtime_info(self, m: BrokerMember, timeout_s: float = 2.0) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of a broker (commitLogMaxOffset, haRole, haTruncations, ...)."""
        resp = blocking_request(m.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return {}
        return dict(KVTable.from_json(resp.body).table)

    def has_topic(self, m: BrokerMember, topic: str, timeout_s: float = 2.0) -> bool:
        """Whether the broker's topic config table (GET_ALL_TOPIC_CONFIG) lists `topic` (a slave gets it by sync)."""
        resp = blocking_request(m.addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), timeout_s)
        return resp.code == ResponseCode.SUCCESS and f'"{topic}"'.encode() in bytes(resp.body or b"")

    def member_by_addr(self, addr: str | None) -> BrokerMember | None:
        return next((m for ms in self.groups.values() for m in ms if m.addr == addr), None)

    def master(self, group: str | None = None, topic: str | None = None) -> BrokerMember | None:
        """The member the controller names master (and, with `topic`, that the route lists as brokerId 0)."""
        g = group or self.first_group
        addr = self._controller_master_addr(g)
        if addr is None or (topic is not None and self.route_master_addr(topic, g) != addr):
            return None
        m = self.member_by_addr(addr)
        return m if m is not None and m.proc.running else None

    def wait_master(self, group: str | None = None, *, topic: str | None = None, not_addr: str | None = None,
                    timeout_s: float = 30.0) -> BrokerMember:
        """Wait for a running master (other than `not_addr`), agreed by the controller and (with topic) the route."""
        def check() -> BrokerMember | None:
            m = self.master(group, topic)
            return m if m is not None and m.addr != not_addr else None

        return wait_until(f"a master of {group or self.first_group} other than {not_addr}", check, timeout_s)

    def wait_group_ready(self, group: str | None = None, size: int | None = None, timeout_s: float = 60.0) -> None:
        """Every running member of the group is in the controller's SyncStateSet (or `size` members are)."""
        g = group or self.first_group
        want = size if size is not None else sum(1 for m in self.groups[g] if m.proc.running)
        wait_until(f"{want} members of {g} in the SyncStateSet",
                   lambda: len(self.sync_state_set(g)) >= want and self.master(g) is not None, timeout_s, 0.1)


def main(argv: list[str]) -> None:
    """`python -m orbitmq.testing.controller_cluster forward <listen host:port> <target host:port>` (HaGate)."""
    if len(argv) != 3 or argv[0] != "forward":
        raise SystemExit("usage: python -m orbitmq.testing.controller_cluster forward LISTEN TARGET")
    asyncio.run(_forward(argv[1], argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
