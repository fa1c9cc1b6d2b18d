"""Per-operation cost of the hot paths with and without the native extension, as callgrind instruction counts
(deterministic on a loaded machine) and process CPU time.

    .venv/bin/python bench/micro/native_ops.py                 # CPU µs per op, native vs ORBITMQ_PURE_PYTHON=1
    .venv/bin/python bench/micro/native_ops.py --callgrind     # instructions per op (valgrind, slow: ~2 min)
    .venv/bin/python bench/micro/native_ops.py --run OP N [P]  # one op N times (what the two modes above spawn);
                                                               # P: inputs prepared up front (default warm-up + N)
    NATIVE_OPS_WARMUP=20000 ...                                # more warm-up runs (default 300)

The send ops run the broker's in-process path for one request: frame decode → SendProcessor.dispatch (header
checks, CommitLog append, CQ + index dispatch) → response frame encode, ASYNC_FLUSH, 1 KiB bodies.
Instruction counts leave out the kernel (page faults of the fresh mmap segments), CPU time includes it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

# bench/micro/callgrind.py: this folder is sys.path[0] when the script runs
from callgrind import instructions

OPS = ["java_hash", "decode_properties", "encode_record", "decode_record", "decode_pull32", "store_put",
       "store_put_batch32", "send_single", "send_batch32"]
PER_OP_MESSAGES = {"send_batch32": 32, "decode_pull32": 32, "store_put_batch32": 32}
WARMUP = int(os.environ.get("NATIVE_OPS_WARMUP", "300"))


def _codec_op(name: str) -> Callable[[], object]:
    from orbitmq.model.properties import decode_properties, encode_properties
    from orbitmq.model.record import decode_record, encode_record_into, iter_records, pack_host_port
    from orbitmq.model.tags import java_hash

    props = {"UNIQ_KEY": "7F0000010F3A18B4AAC27E4D3C5A0000", "WAIT": "true", "TAGS": "TagA", "CLUSTER": "C"}
    text = encode_properties(props)
    body = os.urandom(1024)
    born, store = pack_host_port("127.0.0.1:5555"), pack_host_port("127.0.0.1:10911")
    buf = bytearray(4096)
    n = encode_record_into(buf, 0, b"LoadT", body, text.encode(), 1, 0, 0, 1, born, store, 0, 0, 7, 4096, 2, None)
    rec = bytes(buf[:n])
    key = "LoadT#7F0000010F3A18B4AAC27E4D3C5A0000"
    if name == "java_hash":
        return lambda: java_hash(key)
    if name == "decode_properties":
        return lambda: decode_properties(text)
    if name == "encode_record":
        tb, pb = b"LoadT", text.encode()
        return lambda: encode_record_into(buf, 0, tb, body, pb, 1, 0, 0, 1, born, store, 0, 0, 7, 4096, 2, None)
    if name == "decode_record":
        return lambda: decode_record(rec, 0)
    if name == "decode_pull32":  # the SDK consumer: one pull body of 32 records
        body32 = rec * 32
        return lambda: list(iter_records(body32))
    raise ValueError(name)


class _Conn:
    remote_addr = "127.0.0.1:5555"
    closed = False
    attrs: dict[str, object] = {}


def _send_op(name: str, root: str) -> tuple[Callable[[], object], Callable[[], None]]:
    from orbitmq.broker.client_registry import ClientRegistry
    from orbitmq.broker.config import BrokerConfig
    from orbitmq.broker.context import BrokerContext
    from orbitmq.broker.handlers.send import SendProcessor
    from orbitmq.broker.metadata.groups import SubscriptionGroupManager
    from orbitmq.broker.metadata.offsets import ConsumerOffsetManager
    from orbitmq.broker.metadata.topics import TopicConfigManager
    from orbitmq.broker.stats import BrokerStats
    from orbitmq.client.producer import encode_batch_body
    from orbitmq.model.message import Message
    from orbitmq.model.properties import encode_properties
    from orbitmq.protocol import RemotingCommand, RequestCode, encode_frame, to_send_v2
    from orbitmq.protocol.frame import FrameDecoder
    from orbitmq.store import MessageInner, MessageStore, StoreConfig

    store = MessageStore(StoreConfig(os.path.join(root, "store"), flush_disk_type="ASYNC_FLUSH"))
    store.load()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(store.start())
    body = os.urandom(1024)
    seq = [0]

    def close() -> None:
        loop.run_until_complete(store.shutdown())
        loop.close()

    if name == "store_put":
        def put() -> None:
            seq[0] += 1
            props = {"UNIQ_KEY": f"7F0000010F3A18B4AAC2{seq[0]:012X}", "WAIT": "true", "TAGS": "TagA", "CLUSTER": "C"}
            store.put_messages_nowait([MessageInner("LoadT", seq[0] & 3, body, props, 0, 0, 1_700_000_000_000,
                                                    "127.0.0.1:5555", "127.0.0.1:10911", 0, 0)])
        return put, close

    if name == "store_put_batch32":  # what SEND_BATCH_MESSAGE hands the store: 32 messages of one queue
        batches: list[list[MessageInner]] = []

        def make_batch() -> list[MessageInner]:
            seq[0] += 1
            out = []
            for i in range(32):
                props = {"UNIQ_KEY": f"7F0000010F3A18B4AAC2{seq[0]:010X}{i:02X}", "WAIT": "true", "TAGS": "TagA",
                         "CLUSTER": "C"}
                out.append(MessageInner("LoadT", seq[0] & 3, body, props, 0, 0, 1_700_000_000_000,
                                        "127.0.0.1:5555", "127.0.0.1:10911", 0, 0))
            return out

        def prepare_batches(n: int) -> None:  # built before the measured part
            batches.extend(make_batch() for _ in range(n))
            batches.reverse()

        def put_batch() -> None:
            store.put_messages_nowait(batches.pop())

        put_batch.prepare = prepare_batches  # type: ignore[attr-defined]
        return put_batch, close

    cfg = BrokerConfig(listen_port=10911, broker_ip1="127.0.0.1")
    cfg_dir = os.path.join(root, "config")
    ctx = BrokerContext(cfg, store, TopicConfigManager(cfg_dir, cfg), SubscriptionGroupManager(cfg_dir, cfg),
                        ConsumerOffsetManager(cfg_dir), ClientRegistry(), BrokerStats(), "127.0.0.1:10911")
    proc = SendProcessor(ctx)
    conn = _Conn()
    decoder = FrameDecoder()
    frames: list[bytes] = []

    def make_frame() -> bytes:
        seq[0] += 1
        uniq = f"7F0000010F3A18B4AAC2{seq[0]:012X}"
        ext = {"producerGroup": "PG", "topic": "LoadT", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": str(seq[0] & 3), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
               "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        if name == "send_single":
            ext["properties"] = encode_properties({"UNIQ_KEY": uniq, "WAIT": "true", "TAGS": "TagA"})
            return encode_frame(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, to_send_v2(ext), body))
        msgs = [Message("LoadT", body, {"UNIQ_KEY": f"{uniq}{i:02d}", "TAGS": "TagA"}) for i in range(32)]
        ext["batch"] = "true"
        bb = encode_batch_body(msgs, [encode_properties(m.properties) for m in msgs])
        return encode_frame(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, to_send_v2(ext), bb))

    def prepare(n: int) -> None:  # client side: built before the measured part
        frames.extend(make_frame() for _ in range(n))
        frames.reverse()

    def send() -> None:
        for req in decoder.feed(frames.pop()):
            encode_frame(proc.dispatch(conn, req))  # type: ignore[arg-type]  # ASYNC_FLUSH: answered at once

    send.prepare = prepare  # type: ignore[attr-defined]
    return send, close


def run(name: str, n: int, prepared: int | None = None) -> float:
    """Run `name` WARMUP + n times; returns CPU seconds of the n measured runs. Ops with inputs built up front
    build `prepared` of them (at least WARMUP + n): the callgrind mode builds as many for its 0-op run as for
    its n-op run, so building inputs is not counted per op."""
    with tempfile.TemporaryDirectory(prefix="orbitmq-ops-") as root:
        close: Callable[[], None] = lambda: None  # noqa: E731
        if name in ("store_put", "store_put_batch32", "send_single", "send_batch32"):
            fn, close = _send_op(name, root)
        else:
            fn = _codec_op(name)
        prep = getattr(fn, "prepare", None)
        if prep is not None:
            prep(max(prepared or 0, WARMUP + n))
        for _ in range(WARMUP):
            fn()
        t0 = time.process_time()
        for _ in range(n):
            fn()
        spent = time.process_time() - t0
        close()
        return spent


def _spawn(args: list[str], pure: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pure:
        env["ORBITMQ_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, __file__, "--run", *args], env=env, text=True,
                          capture_output=True, check=True)


def _instructions(name: str, n: int, pure: bool, prepared: int = 0) -> int:
    env = dict(os.environ)
    if pure:
        env["ORBITMQ_PURE_PYTHON"] = "1"
    return instructions([sys.executable, __file__, "--run", name, str(n), str(prepared)], env)


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--run":
        secs = run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
        print(f"{secs:.6f}")
        return
    callgrind = "--callgrind" in sys.argv
    print(f"{'operation':22s} {'per':>4s} {'pure':>10s} {'native':>10s}  unit")
    for name in OPS:
        per = PER_OP_MESSAGES.get(name, 1)
        row = []
        for pure in (True, False):
            if callgrind:
                n = 300 if name.startswith(("send", "store")) else 2000
                prepared = WARMUP + n  # the same inputs built in both runs: only the n ops differ
                cost = (_instructions(name, n, pure, prepared) - _instructions(name, 0, pure, prepared)) / (n * per)
            else:
                n = 3000 if name.startswith(("send", "store")) else 50_000
                cost = min(float(_spawn([name, str(n)], pure).stdout) for _ in range(3)) * 1e6 / (n * per)
            row.append(cost)
        unit = "instructions/msg" if callgrind else "µs CPU/msg"
        print(f"{name:22s} {per:4d} {row[0]:10.2f} {row[1]:10.2f}  {unit}", flush=True)


if __name__ == "__main__":
    main()
