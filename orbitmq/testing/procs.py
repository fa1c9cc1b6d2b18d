"""Real-process harness for integration and compat tests: free ports, config-file writers and ServerProcess
(launch `python -m orbitmq.cli.main ...` in its own process group, log to a file, wait for its TCP ports,
kill -9 / terminate / restart). Only tests use this module; nothing under orbitmq/ imports it.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCALHOST = "127.0.0.1"
PR_SET_PDEATHSIG = 1

# every ServerProcess ever started in this interpreter, killed at exit whatever the tests did
_STARTED: set[ServerProcess] = set()


def kill_all() -> None:
    for p in list(_STARTED):
        p.close()


atexit.register(kill_all)


def _die_with_parent() -> None:  # runs in the child between fork and exec (Linux only)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


# ---- ports ---------------------------------------------------------------------------------------------
_port_rng = random.Random()  # seeded from os.urandom: parallel test processes pick different ports


def _can_bind(port: int, host: str = LOCALHOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _test_port_range() -> tuple[int, int] | None:
    """Ports just below the kernel's ephemeral range (outgoing connections never take their local port there)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if low < 4096:
        return None
    return max(1025, low - 12_000), low - 4


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nobody uses right now. Chosen below the ephemeral range: a port the OS hands out as the local
    port of an outgoing connection (a broker's connection to a name server, say) could otherwise be taken between
    this check and the server's bind ("address already in use" at start-up). A tiny race remains, as everywhere."""
    span = _test_port_range()
    if span is not None:
        for _ in range(500):
            p = _port_rng.randint(*span)
            if _can_bind(p, host):
                return p
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_broker_port(host: str = LOCALHOST, attempts: int = 200) -> int:
    """A broker listenPort p such that p-2 (VIP port) and p+1 (HA port) are free as well."""
    for _ in range(attempts):
        p = free_port(host)
        if p < 1026 or p > 65534:
            continue
        if all(_can_bind(q, host) for q in (p - 2, p + 1)):
            return p
    raise RuntimeError("no free broker port block (p-2..p+1) found")


class PortPool:
    """Ports for members laid out before any of them listens (the OS cannot tell us about each other's ports yet):
    every port and broker block (VIP p-2 .. HA p+1) handed out is distinct from the earlier ones."""

    def __init__(self) -> None:
        self.reserved: set[int] = set()

    def port(self) -> int:
        while True:
            p = free_port()
            if p not in self.reserved:
                self.reserved.add(p)
                return p

    def broker_port(self) -> int:
        while True:
            p = free_broker_port()
            block = set(range(p - 2, p + 2))
            if not block & self.reserved:
                self.reserved |= block
                return p


def free_port_block(count: int, step: int, host: str = LOCALHOST, attempts: int = 200) -> int:
    """A base port b such that b-2 .. b+1, b+step-2 .. b+step+1, ... (`count` blocks) are all free: the ports of
    `orbitmq cluster init` members (name servers step 1, brokers step 10, each broker using port-2 .. port+1)."""
    for _ in range(attempts):
        base = free_port(host) + 2
        ports = [base + i * step + d for i in range(count) for d in (-2, -1, 0, 1)]
        if max(ports) < 65000 and all(_can_bind(p, host) for p in set(ports)):
            return base
    raise RuntimeError(f"no free block of {count} x {step} ports found")


def port_open(port: int, host: str = LOCALHOST, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# ---- config files --------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_conf(path: str | os.PathLike[str], keys: Mapping[str, Any]) -> Path:
    """Write a Java-properties config file (`key=value` lines; booleans as true/false)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(f"{k}={_fmt(v)}\n" for k, v in keys.items()), encoding="utf-8")
    return p


def write_namesrv_conf(directory: str | os.PathLike[str], port: int, **keys: Any) -> Path:
    """namesrv.conf in `directory` listening on `port`; kvConfig.json kept inside `directory`."""
    d = Path(directory)
    base: dict[str, Any] = {"listenPort": port, "kvConfigPath": str(d / "kvConfig.json")}
    base.update(keys)
    return write_conf(d / "namesrv.conf", base)


def broker_conf_keys(store_dir: str | os.PathLike[str], port: int, namesrv_addr: str, **keys: Any) -> dict[str, Any]:
    store = Path(store_dir)
    base: dict[str, Any] = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": 0,
        "brokerIP1": LOCALHOST,
        "listenPort": port,
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": True,
        # small files keep tests fast and light on tmpfs
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "mappedFileSizeConsumeQueue": 300_000 * 20 // 10,
        # segments are fallocated (a full disk refuses writes instead of SIGBUS): the default index file would take
        # 420 MB of real disk per broker; 4 MB here (the CommitLog above is 64 MiB)
        "maxHashSlotNum": 50_000,
        "maxIndexNum": 200_000,
    }
    base.update(keys)
    return base


def write_broker_conf(directory: str | os.PathLike[str], port: int, namesrv_addr: str,
                      store_dir: str | os.PathLike[str] | None = None, **keys: Any) -> Path:
    """broker.conf in `directory` (store under `directory/store` unless given)."""
    d = Path(directory)
    return write_conf(d / "broker.conf", broker_conf_keys(store_dir or d / "store", port, namesrv_addr, **keys))


def write_standalone_conf(directory: str | os.PathLike[str], namesrv_port: int, broker_port: int,
                          store_dir: str | os.PathLike[str] | None = None, **keys: Any) -> Path:
    """standalone.conf: the broker.conf keys plus `namesrvListenPort` (and the name server's kvConfigPath)."""
    d = Path(directory)
    conf = broker_conf_keys(store_dir or d / "store", broker_port, f"{LOCALHOST}:{namesrv_port}")
    conf["namesrvListenPort"] = namesrv_port
    conf["kvConfigPath"] = str(d / "kvConfig.json")
    conf.update(keys)
    return write_conf(d / "standalone.conf", conf)


# ---- processes -----------------------------------------------------------------------------------------
def _child_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    root = str(REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop("PYTEST_CURRENT_TEST", None)
    if extra:
        env.update(extra)
    return env


class ServerProcess:
    """One server subprocess in its own process group. Log (stdout+stderr) appended to `log_path`.

    `argv` is the full command; use `ServerProcess.cli(...)` for `python -m orbitmq.cli.main <args>`.
    `ports` are the TCP ports that must accept connections before start() returns.
    """

    def __init__(self, argv: Sequence[str], log_path: str | os.PathLike[str], *, ports: Iterable[int] = (),
                 host: str = LOCALHOST, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, ready_timeout_s: float = 20.0,
                 name: str = "server") -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.ports = list(ports)
        self.host = host
        self.env = _child_env(env)
        self.cwd = str(cwd) if cwd is not None else str(self.log_path.parent)
        self.ready_timeout_s = ready_timeout_s
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @classmethod
    def cli(cls, args: Sequence[str], log_path: str | os.PathLike[str], **kw: Any) -> ServerProcess:
        return cls([sys.executable, "-m", "orbitmq.cli.main", *args], log_path, **kw)

    # -- lifecycle --
    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self, wait: bool = True) -> ServerProcess:
        if self.running:
            raise RuntimeError(f"{self.name} already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            shown = " ".join(a if len(a) <= 200 else a[:60] + "..." for a in self.argv)
            log.write(f"\n===== start #{self.starts + 1}: {shown}\n".encode())
            log.flush()
            # PDEATHSIG follows the forking *thread*: only use it from the main thread
            pre = _die_with_parent if (sys.platform == "linux"
                                       and threading.current_thread() is threading.main_thread()) else None
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env, cwd=self.cwd, start_new_session=True, preexec_fn=pre)
        _STARTED.add(self)
        self.starts += 1
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.kill9()
                raise
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every port accepts TCP connections; RuntimeError (with the log tail) on exit/timeout."""
        deadline = time.monotonic() + (self.ready_timeout_s if timeout_s is None else timeout_s)
        pending = list(self.ports)
        while pending:
            if not self.running:
                raise RuntimeError(f"{self.name} exited with code {self.returncode} before listening on "
                                   f"{pending}\n--- log tail ({self.log_path}) ---\n{self.log_tail()}")
            pending = [p for p in pending if not port_open(p, self.host)]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not listening on {pending} after "
                                   f"{self.ready_timeout_s}s\n--- log tail ({self.log_path}) ---\n{self.log_tail()}")
            time.sleep(0.05)
        if self._answers_when_ready():
            while not all(_past_starting(f"{self.host}:{p}") for p in self.ports):
                if not self.running:
                    raise RuntimeError(f"{self.name} exited with code {self.returncode} while starting"
                                       f"\n--- log tail ({self.log_path}) ---\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} still answering 'starting' after {self.ready_timeout_s}s"
                                       f"\n--- log tail ({self.log_path}) ---\n{self.log_tail()}")
                time.sleep(0.05)

    def _answers_when_ready(self) -> bool:
        """A broker (or a standalone) binds its port before it is ready and answers "starting" until then
        (docs/design/restart.md): ready means past that, not just listening."""
        return "orbitmq.cli.main" in self.argv and any(a in ("broker", "standalone") for a in self.argv)

    async def wait_ready_async(self, timeout_s: float | None = None) -> None:
        await asyncio.to_thread(self.wait_ready, timeout_s)

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # own session ⇒ pgid == pid
        except ProcessLookupError:
            pass

    def kill9(self) -> int | None:
        """SIGKILL the whole process group and reap it. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        self._signal_group(signal.SIGKILL)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a D-state process
            return None

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to `timeout` s, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        code = self.kill9()
        self._signal_group(signal.SIGKILL)  # stragglers in the group whose leader already exited
        return code

    def restart(self, wait: bool = True, timeout: float = 10.0) -> ServerProcess:
        """Stop (gracefully, if still running) and start again with the same argv and log file."""
        if self.running:
            self.terminate(timeout)
        return self.start(wait=wait)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Teardown: kill the group whatever state it is in (safe to call repeatedly)."""
        if self.proc is not None:
            self._signal_group(signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        _STARTED.discard(self)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ServerProcess({self.name}, pid={self.pid}, ports={self.ports}, running={self.running})"


# ---- talking to a running server (blocking; for readiness checks) --------------------------------------
def blocking_request(addr: str, cmd: Any, timeout_s: float = 3.0) -> Any:
    """Send one RemotingCommand to `addr` ("ip:port") over a fresh socket and return the response."""
    from orbitmq.protocol import FrameDecoder, encode_frame

    host, _, port = addr.rpartition(":")
    decoder = FrameDecoder()
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(encode_frame(cmd))
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            data = s.recv(65536)
            if not data:
                raise ConnectionError(f"{addr} closed the connection before answering")
            for resp in decoder.feed(data):
                if resp.is_response and resp.opaque == cmd.opaque:
                    return resp


def _past_starting(addr: str) -> bool:
    """False while `addr` answers SERVICE_NOT_AVAILABLE "starting" (or does not answer within a second); True on any
    other answer, or when the port does not speak plain remoting (TLS enforcing closes on our frame)."""
    from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode

    try:
        resp = blocking_request(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 1.0)
    except TimeoutError:
        return False
    except OSError:
        return True
    return not (resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "starting" in (resp.remark or ""))


def registered_broker_addrs(namesrv_addr: str, timeout_s: float = 3.0) -> set[str]:
    """Every broker address the name server currently knows (GET_BROKER_CLUSTER_INFO)."""
    from orbitmq.protocol import RemotingCommand, RequestCode
    from orbitmq.protocol.bodies import ClusterInfo

    resp = blocking_request(namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout_s)
    if resp.code != 0 or not resp.body:
        return set()
    info = ClusterInfo.from_json(resp.body)
    return {a for bd in info.broker_addr_table.values() for a in bd.broker_addrs.values()}


def registered_master(namesrv_addr: str, broker_name: str, timeout_s: float = 3.0) -> str | None:
    """The address the name server lists as brokerId 0 of `broker_name` (None: no master registered)."""
    from orbitmq.protocol import RemotingCommand, RequestCode
    from orbitmq.protocol.bodies import ClusterInfo

    resp = blocking_request(namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout_s)
    if resp.code != 0 or not resp.body:
        return None
    bd = ClusterInfo.from_json(resp.body).broker_addr_table.get(broker_name)
    if bd is None:
        return None
    return bd.broker_addrs.get(0)


def wait_broker_registered(namesrv_addr: str, broker_addr: str, timeout_s: float = 20.0,
                           proc: ServerProcess | None = None) -> None:
    """Block until the name server lists `broker_addr`; RuntimeError (with the log tail of `proc`) otherwise."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.running:
            raise RuntimeError(f"{proc.name} exited with code {proc.returncode} before registering "
                               f"{broker_addr}\n--- log tail ({proc.log_path}) ---\n{proc.log_tail()}")
        try:
            if broker_addr in registered_broker_addrs(namesrv_addr):
                return
        except (OSError, ConnectionError) as e:
            last_error = e
        time.sleep(0.1)
    tail = f"\n--- log tail ({proc.log_path}) ---\n{proc.log_tail()}" if proc is not None else ""
    raise RuntimeError(f"broker {broker_addr} not registered with {namesrv_addr} after {timeout_s}s"
                       f" (last error: {last_error}){tail}")


# ---- ready-made servers ---------------------------------------------------------------------------------
_NAMESRV_SCRIPT = """
import asyncio, signal, sys
from orbitmq.namesrv import NameServer, load_namesrv_conf

async def main():
    config, warnings = load_namesrv_conf(sys.argv[1])
    for w in warnings:
        print('WARN', w, flush=True)
    ns = NameServer(config)
    await ns.start()
    print('namesrv listening on', ns.port, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await ns.stop()
    print('namesrv stopped', flush=True)

asyncio.run(main())
"""


def namesrv_python_argv(conf_path: str | os.PathLike[str]) -> list[str]:
    """argv running orbitmq.namesrv.NameServer directly (no CLI): graceful exit on SIGTERM."""
    return [sys.executable, "-c", _NAMESRV_SCRIPT, str(conf_path)]


def start_namesrv(directory: str | os.PathLike[str], *, use_cli: bool = True, port: int | None = None,
                  **keys: Any) -> ServerProcess:
    """A name server process with its conf, kvConfig and log in `directory`; returns once it listens."""
    d = Path(directory)
    port = port or free_port()
    conf = write_namesrv_conf(d, port, **keys)
    argv = ([sys.executable, "-m", "orbitmq.cli.main", "namesrv", "-c", str(conf)] if use_cli
            else namesrv_python_argv(conf))
    return ServerProcess(argv, d / "namesrv.log", ports=[port], name=f"namesrv:{port}").start()


def start_broker(directory: str | os.PathLike[str], namesrv_addr: str, *, port: int | None = None,
                 wait_registered: bool = True, **keys: Any) -> ServerProcess:
    """`orbitmq broker -c` with a broker.conf in `directory` (store in directory/store)."""
    d = Path(directory)
    port = port or free_broker_port()
    conf = write_broker_conf(d, port, namesrv_addr, **keys)
    proc = ServerProcess.cli(["broker", "-c", str(conf)], d / "broker.log", ports=[port], name=f"broker:{port}")
    proc.start()
    if wait_registered and namesrv_addr:
        try:
            wait_broker_registered(namesrv_addr.split(";")[0], f"{LOCALHOST}:{port}", proc=proc)
        except BaseException:
            proc.close()
            raise
    return proc


class BrokerCluster:
    """A name server plus broker processes (master/slave groups) under `root`, all killed by close().

    `broker_defaults` go into every broker.conf (a call's own keys win); `namesrv_keys` into namesrv.conf."""

    def __init__(self, root: str | os.PathLike[str], *, broker_defaults: Mapping[str, Any] | None = None,
                 **namesrv_keys: Any) -> None:
        self.root = Path(root)
        self.defaults = dict(broker_defaults or {})
        self.procs: list[ServerProcess] = []
        self.ns = start_namesrv(self.root / "ns", **namesrv_keys)
        self.procs.append(self.ns)
        self.ns_addr = f"{LOCALHOST}:{self.ns.ports[0]}"

    def broker(self, name: str, broker_id: int, role: str, *, directory: str | None = None,
               **keys: Any) -> tuple[ServerProcess, str]:
        """Start one broker (data in root/<directory or name-id>); returns the process and its address."""
        conf = dict(self.defaults, brokerName=name, brokerId=broker_id, brokerRole=role)
        conf.update(keys)
        p = start_broker(self.root / (directory or f"{name}-{broker_id}"), self.ns_addr, **conf)
        self.procs.append(p)
        return p, f"{LOCALHOST}:{p.ports[0]}"

    def close(self) -> None:
        for p in reversed(self.procs):
            p.close()

    def __enter__(self) -> BrokerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Standalone:
    """`orbitmq standalone -c standalone.conf`: a name server and a broker in one process."""

    def __init__(self, directory: str | os.PathLike[str], **broker_keys: Any) -> None:
        self.dir = Path(directory)
        self.namesrv_port = free_port()
        self.broker_port = free_broker_port()
        while self.broker_port in (self.namesrv_port, self.namesrv_port + 2, self.namesrv_port - 1):
            self.broker_port = free_broker_port()
        self.namesrv_addr = f"{LOCALHOST}:{self.namesrv_port}"
        self.broker_addr = f"{LOCALHOST}:{self.broker_port}"
        self.store_dir = self.dir / "store"
        self.conf_path = write_standalone_conf(self.dir, self.namesrv_port, self.broker_port, self.store_dir,
                                               **broker_keys)
        self.log_path = self.dir / "standalone.log"
        self.proc = ServerProcess.cli(["standalone", "-c", str(self.conf_path)], self.log_path,
                                      ports=[self.namesrv_port, self.broker_port], name="standalone")

    @property
    def vip_addr(self) -> str:
        return f"{LOCALHOST}:{self.broker_port - 2}"

    def start(self, wait_registered: bool = True) -> Standalone:
        self.proc.start()
        if wait_registered:
            try:
                wait_broker_registered(self.namesrv_addr, self.broker_addr, proc=self.proc)
            except BaseException:
                self.proc.close()
                raise
        return self

    def kill9(self) -> int | None:
        return self.proc.kill9()

    def terminate(self, timeout: float = 10.0) -> int | None:
        return self.proc.terminate(timeout)

    def restart(self, wait_registered: bool = True) -> Standalone:
        if self.proc.running:
            self.proc.terminate()
        return self.start(wait_registered)

    def close(self) -> None:
        self.proc.close()

    def __enter__(self) -> Standalone:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Standalone(namesrv={self.namesrv_addr}, broker={self.broker_addr}, {self.proc!r})"
