"""cProfile (CPU-time timer) of a real `orbitmq standalone` process under single-send load, for the timed window
only: where the broker's CPU per request goes, function by function.

    .venv/bin/python bench/micro/broker_profile.py [--load sdk|cpp] [--messages 20000] [--senders 8] [--out FILE]
    .venv/bin/python bench/micro/broker_profile.py --no-profile ...   # the same load, broker CPU only
    .venv/bin/python bench/micro/broker_profile.py --no-profile --gc0 10000 ...  # broker gen-0 GC threshold
    .venv/bin/python bench/micro/broker_profile.py --no-profile --set dedupEnable=false ...  # a broker.conf setting

The broker runs in its own process (ASYNC_FLUSH, free ports, a temporary store) wrapped by this script's
`--serve` mode: SIGUSR1 enables the profiler, SIGUSR2 disables it and writes the stats (with --no-profile the
signals only time the broker's garbage collections over the window: gc.callbacks, printed per send). Load: `sdk` = one SDK
Producer with `--senders` concurrent senders each waiting for its ack (the clients_bench sdk_c8 row); `cpp` =
`--senders` processes of the official C++ client's synchronous sends (bench/load_worker.py, the cpp_pN rows).
After a warm-up (500 sends / one per worker), the profile covers exactly the timed sends; the broker's
utime+stime over the same window is printed per message. cProfile adds a fixed cost per Python call, so read the
shares, not the absolute times; compare trees with PYTHONPATH=<tree>. PROFILE_TIMER=wall uses perf_counter as the
profiler's clock: far less overhead per call than process_time (a system call per event), so the shares of
call-heavy functions are less inflated, but time descheduled inside a call counts too.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cli_args import key_value  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "bench" / "load_worker.py"


def serve(out: str, argv: list[str]) -> None:
    """The broker process: orbitmq's CLI with the profiler switched by signals."""
    # process_time is a system call per profiler event: it inflates functions that make many small calls; the
    # cheaper perf_counter (PROFILE_TIMER=wall) is right inside one request, as the broker is on-CPU there
    prof = cProfile.Profile(time.perf_counter if os.environ.get("PROFILE_TIMER") == "wall" else time.process_time)

    profiling = os.environ.get("PROFILE_OFF") != "1"
    gc_tally = {"collections": [0, 0, 0], "seconds": 0.0}  # over the timed window
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
            return
        gc_tally["seconds"] += time.perf_counter() - gc_started[0]  # type: ignore[operator]
        gc_tally["collections"][info["generation"]] += 1  # type: ignore[index]

    def start(*_: object) -> None:
        gc.callbacks.append(on_gc)
        if profiling:
            prof.enable()

    def stop(*_: object) -> None:
        gc.callbacks.remove(on_gc)
        if profiling:
            prof.disable()
            prof.dump_stats(out)
        Path(out + ".gc").write_text(json.dumps(gc_tally))
        Path(out + ".done").touch()

    gc0 = int(os.environ.get("PROFILE_GC0", "0"))
    if gc0 > 0:  # --gc0: the collector's generation-0 threshold in the broker (Python's default 700)
        gc.set_threshold(gc0, *gc.get_threshold()[1:])
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from orbitmq.cli.main import main

    sys.argv = ["orbitmq", *argv]
    main()


def _cpu(pid: int) -> tuple[float, float, int]:
    """The process's CPU seconds (user + system), user seconds and minor page faults so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tck, int(fields[11]) / tck, int(fields[7])


async def drive(ns: argparse.Namespace) -> None:
    from orbitmq.client import Message, Producer
    from orbitmq.testing.procs import free_broker_port, free_port, wait_broker_registered, write_conf

    work = Path(tempfile.mkdtemp(prefix="orbitmq-profile-"))
    ns_port, port = free_port(), free_broker_port()
    conf = write_conf(work / "broker.conf", {
        "brokerClusterName": "ProfCluster", "brokerName": "prof-broker", "brokerIP1": "127.0.0.1",
        "listenPort": port, "namesrvAddr": f"127.0.0.1:{ns_port}", "storePathRootDir": str(work / "store"),
        "flushDiskType": "ASYNC_FLUSH", "autoCreateTopicEnable": "true", "defaultTopicQueueNums": 8,
        **dict(ns.set)})
    out = ns.out or str(work / "broker.prof")
    cmd = [sys.executable, __file__, "--serve", out, "--log-level", "WARNING", "standalone", "-c", str(conf),
           "--namesrv-port", str(ns_port)]
    env = {**os.environ, "PROFILE_GC0": str(ns.gc0), "PROFILE_OFF": "1" if ns.no_profile else "0"}
    with open(work / "broker.log", "w") as log:
        broker = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    namesrv = f"127.0.0.1:{ns_port}"
    topic, body, n, k = "ProfileTopic", os.urandom(1024), ns.messages, ns.senders
    profile = not ns.no_profile  # the signals run in both modes: they also time the broker's GC
    try:
        await asyncio.to_thread(wait_broker_registered, namesrv, f"127.0.0.1:{port}", 60.0)
        if ns.load == "sdk":
            producer = Producer("profile-producer", namesrv=namesrv, send_timeout_ms=10_000)
            await producer.start()
            for _ in range(500):
                await producer.send(Message(topic, body))

            async def sender(count: int) -> None:
                for _ in range(count):
                    await producer.send(Message(topic, body))

            c0 = _cpu(broker.pid)
            broker.send_signal(signal.SIGUSR1)
            t0 = time.perf_counter()
            await asyncio.gather(*(sender(n // k) for _ in range(k)))
        else:
            args = {"namesrv": namesrv, "topic": topic, "size": len(body), "count": n // k}
            env = {**os.environ, "HOME": str(work)}  # librocketmq writes its logs under $HOME
            workers = [subprocess.Popen([sys.executable, str(WORKER), "cpp", json.dumps({**args, "group": f"pg{i}"})],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                       for i in range(k)]
            for w in workers:
                assert w.stdout is not None and w.stdout.readline().strip() == "ready"
            c0 = _cpu(broker.pid)
            broker.send_signal(signal.SIGUSR1)
            t0 = time.perf_counter()
            for w in workers:
                assert w.stdin is not None
                w.stdin.write("go\n")
                w.stdin.flush()
            for w in workers:
                assert w.stdout is not None
                w.stdout.readline()
        elapsed = time.perf_counter() - t0
        c1 = _cpu(broker.pid)
        broker.send_signal(signal.SIGUSR2)
        if ns.load == "sdk":
            await producer.shutdown()
        else:
            for w in workers:
                w.wait(60)
        sent = n // k * k
        print(f"{ns.load}, {k} senders, {sent} sends: {sent / elapsed:,.0f} msgs/s, broker "
              f"{(c1[0] - c0[0]) / sent * 1e6:.1f} µs CPU per send (user {(c1[1] - c0[1]) / sent * 1e6:.1f}), "
              f"{(c1[2] - c0[2]) / sent:.3f} minor page faults per send, "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        deadline = time.monotonic() + 30
        while not Path(out + ".done").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        tally = json.loads(Path(out + ".gc").read_text())
        print(f"broker GC in the window (perf_counter): {tally['seconds'] / sent * 1e6:.2f} µs per send, "
              f"collections by generation {tally['collections']}, threshold {ns.gc0 or 'default'}", flush=True)
        if profile:
            stats = pstats.Stats(out)
            stats.sort_stats("cumulative").print_stats(ns.top)
            stats.sort_stats("tottime").print_stats(ns.top)
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)  # the store's segments are fallocated: never left behind


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", choices=("sdk", "cpp"), default="sdk")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--out", default="", help="keep the stats file here")
    p.add_argument("--top", type=int, default=30, help="rows of each listing")
    p.add_argument("--no-profile", action="store_true", help="the load and broker CPU only")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=key_value,
                   help="a broker.conf setting (repeatable), e.g. --set dedupEnable=false")
    p.add_argument("--gc0", type=int, default=0, help="the broker's gen-0 GC threshold (default: Python's)")
    ns = p.parse_args()
    asyncio.run(drive(ns))


if __name__ == "__main__":
    main()
