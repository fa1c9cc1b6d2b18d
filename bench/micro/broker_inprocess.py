"""The whole broker request path in one process, without the network: CPU time or instructions per SEND request.

    .venv/bin/python bench/micro/broker_inprocess.py                     # CPU µs per request, 5 rounds
    .venv/bin/python bench/micro/broker_inprocess.py --callgrind         # instructions per request (valgrind)
    .venv/bin/python bench/micro/broker_inprocess.py --per-read 1        # the C++ client's shape: one per read
    .venv/bin/python bench/micro/broker_inprocess.py --no-dedup          # the broker with dedupEnable=false
    .venv/bin/python bench/micro/broker_inprocess.py --batch 32          # SEND_BATCH_MESSAGE of 32 (per message)
    .venv/bin/python bench/micro/broker_inprocess.py --callgrind --keep cg.out   # and keep the dump to annotate

A real `Broker` (every service and send hook, a real store in a temporary folder, ASYNC_FLUSH) is started on the
event loop. SEND_MESSAGE_V2 frames as the SDK sends them (1 KiB bodies, distinct UNIQ_KEYs, four queues) are fed to
a `Connection` on its router, `--per-read` frames per `data_received` (8: the SDK's eight concurrent senders on one
connection), each read followed by one loop turn; the answers go to a transport stub. What the loopback and the
client add in a real run (system calls, wake-ups, the client's share of the two cores) is not in these figures.

CPU mode: process CPU (user + system) per request in each round after a warm-up. On a shared VM the rounds scatter
by tens of per cent (first touches of new memory, the neighbours): compare trees by instructions.

Callgrind mode: the same run under valgrind with instrumentation off until the warm-up is done, then on for
`--messages` requests (2,000 by default) and dumped; the count is the event-loop thread's (the flush and checkpoint
threads are left out, and broker fast-failure is off so that the slow valgrind run is not answered SYSTEM_BUSY).
Deterministic to ±0.2 % between runs: the figure to compare trees with (PYTHONPATH=<tree>).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # request_ops (the frames and the transport stub)


def _batch_frames(n: int, size: int) -> list[bytes]:
    """n SEND_BATCH_MESSAGE frames of `size` 1 KiB messages each, as the SDK's send_batch writes them."""
    from orbitmq.client.producer import encode_batch_body
    from orbitmq.model import Message
    from orbitmq.model.properties import encode_properties
    from orbitmq.protocol import RemotingCommand, RequestCode, encode_frame, to_send_v2

    body = os.urandom(1024)
    out = []
    for i in range(n):
        msgs = [Message("LoadT", body) for _ in range(size)]
        props = [encode_properties({"UNIQ_KEY": f"7F0000010F3A18B4AAC2{i * size + k:012X}", "WAIT": "true"})
                 for k in range(size)]
        ext = {"producerGroup": "PG", "topic": "LoadT", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": str(i & 3), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
               "properties": encode_properties({"WAIT": "true"}), "reconsumeTimes": "0", "unitMode": "false",
               "batch": "true"}
        out.append(encode_frame(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, to_send_v2(ext),
                                                        encode_batch_body(msgs, props))))
    return out


async def _serve(messages: int, rounds: int, per_read: int, dedup: bool, marks: str | None,
                 batch: int = 0) -> list[float]:
    from request_ops import _frames, _Transport  # type: ignore[import-not-found]

    from orbitmq.broker.app import Broker
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.remoting.connection import Connection
    from orbitmq.store.config import StoreConfig

    warm = 800
    with tempfile.TemporaryDirectory(prefix="orbitmq-inprocess-") as root:
        broker = Broker(BrokerConfig(broker_ip1="127.0.0.1", listen_port=0, dedup_enable=dedup),
                        StoreConfig(os.path.join(root, "store"), broker_fast_failure_enable=marks is None))
        await broker.start()
        try:
            # --batch: `messages` counts messages; a frame carries `batch` of them
            frames = (_batch_frames((messages * rounds + warm) // batch, batch) if batch
                      else _frames(messages * rounds + warm))
            step = batch or 1
            chunks = [b"".join(frames[i:i + per_read]) for i in range(0, len(frames), per_read)]
            chunks.reverse()
            conn = Connection(broker._routers[0], idle_timeout_s=0)
            transport = _Transport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            for _ in range(warm // step // per_read):
                conn.data_received(chunks.pop())
                await asyncio.sleep(0)
            if marks is not None:  # callgrind: say "ready", wait for "go" (instrumentation on)
                _signal(marks, "ready")
                _wait(marks, "go")
            out = []
            for _ in range(rounds):
                t0 = os.times()
                for _ in range(messages // step // per_read):
                    conn.data_received(chunks.pop())
                    await asyncio.sleep(0)
                t1 = os.times()
                out.append((t1.user - t0.user + t1.system - t0.system) / messages * 1e6)
            if marks is not None:
                _signal(marks, "done")
                _wait(marks, "go2")
            return out
        finally:
            await broker.stop()


def _signal(d: str, name: str) -> None:
    open(os.path.join(d, name), "w").close()


def _wait(d: str, name: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 600
    while not os.path.exists(os.path.join(d, name)):
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the measured run exited ({proc.returncode}): {proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {name}")
        time.sleep(0.05)


def _callgrind(ns: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="orbitmq-cg-") as d:
        out = os.path.join(d, "cg.out")
        argv = [sys.executable, __file__, "--serve-marks", d, "--messages", str(ns.messages), "--rounds", "1",
                "--per-read", str(ns.per_read), "--batch", str(ns.batch)] + (["--no-dedup"] if ns.no_dedup else [])
        env = dict(os.environ, PYTHONHASHSEED="0")
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                                 f"--callgrind-out-file={out}", *argv], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait(d, "ready", proc)
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
            _signal(d, "go")
            _wait(d, "done", proc)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
            _signal(d, "go2")
            proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        dumps = [f for f in glob.glob(out + ".1-*") if f.endswith("-01")]  # the dump's part, main thread
        if len(dumps) != 1:
            raise SystemExit(f"no callgrind dump of the main thread in {sorted(glob.glob(out + '*'))}")
        if ns.keep:  # for callgrind_annotate (--inclusive=yes: the native functions' shares)
            shutil.copyfile(dumps[0], ns.keep)
        with open(dumps[0]) as f:
            m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        if m is None:
            raise SystemExit("no totals in the callgrind dump")
        what = f"message ({ns.messages} messages in batches of {ns.batch}" if ns.batch else \
            f"request ({ns.messages} requests"
        print(f"{int(m.group(1)) / ns.messages:,.0f} instructions per {what}, {ns.per_read} per read"
              f"{', de-dup off' if ns.no_dedup else ''})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None, help="requests per round (CPU: 20000, callgrind: 2000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-read", type=int, default=8)
    ap.add_argument("--no-dedup", action="store_true")
    ap.add_argument("--batch", type=int, default=0, help="SEND_BATCH_MESSAGE frames of this many messages")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--keep", default="", help="with --callgrind: copy the main thread's dump to this file")
    ap.add_argument("--serve-marks", default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.per_read < 1:
        ap.error("--per-read must be at least 1")
    if ns.messages is None:
        ns.messages = 2000 if ns.callgrind or ns.serve_marks else 20000
    if ns.batch < 0:
        ap.error("--batch must be at least 0")
    ns.messages -= ns.messages % (ns.per_read * (ns.batch or 1))
    if ns.callgrind:
        _callgrind(ns)
        return
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    rounds = asyncio.run(_serve(ns.messages, ns.rounds, ns.per_read, not ns.no_dedup, ns.serve_marks, ns.batch))
    if ns.serve_marks is None:
        print(f"CPU µs per {'message' if ns.batch else 'request'} by round: " + " / ".join(f"{r:.1f}" for r in rounds)
              + f"   lowest {min(rounds):.1f}  ({ns.per_read} per read{', de-dup off' if ns.no_dedup else ''})")


if __name__ == "__main__":
    main()
