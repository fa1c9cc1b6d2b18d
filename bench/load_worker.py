"""One load-generator process for bench/clients_bench.py: synchronous single-message sends, one at a time.

    python bench/load_worker.py cpp  '{"namesrv": ..., "topic": ..., "group": ..., "count": N, "size": 1024}'
    python bench/load_worker.py nats '{"url": ..., "subject": ..., "count": N, "size": 1024}'

`cpp`: the official RocketMQ C++ client (pip rocketmq==0.4.4), Producer.send_sync in a loop. `nats`: nats-py,
`await js.publish(...)` in a loop (each publish waits for JetStream's ack). The worker connects, sends one warm-up
message (not counted), prints "ready", waits for a line on stdin, then sends `count` messages and prints one JSON
line {"sent": n, "errors": e, "first_error": str, "seconds": s}. The orchestrator measures the server's CPU
between the "go" line and the last worker's report, so connection set-up is outside the window.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time


def _report(sent: int, errors: int, first_error: str, seconds: float) -> None:
    print(json.dumps({"sent": sent, "errors": errors, "first_error": first_error, "seconds": seconds}), flush=True)


def run_cpp(a: dict) -> None:
    from rocketmq.client import Message, Producer
    from rocketmq.ffi import dll

    body = os.urandom(a["size"])
    p = Producer(a["group"], timeout=10_000)
    p.set_namesrv_addr(a["namesrv"])
    p.start()
    sent = errors = 0
    first = ""

    def one() -> None:
        nonlocal sent, errors, first
        m = Message(a["topic"])
        # the whole body: Message.set_body passes a C string, which ends at the first NUL byte (a random 1 KiB
        # body went out as ~256 bytes on average, and as nothing — refused by the client — 1 time in 256)
        dll.SetByteMessageBody(m._handle, body, len(body))
        try:
            r = p.send_sync(m)
            if int(r.status) == 0:
                sent += 1
                return
            err = f"status {int(r.status)}"
        except Exception as e:  # noqa: BLE001 - counted and reported
            err = f"{type(e).__name__}: {e}"
        errors += 1
        first = first or err

    try:
        one()
        if errors:
            sys.exit(f"load_worker cpp: warm-up send failed: {first}")
        sent = 0
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.perf_counter()
        for _ in range(a["count"]):
            one()
        _report(sent, errors, first, time.perf_counter() - t0)
    finally:
        p.shutdown()


async def run_nats(a: dict) -> None:
    import nats

    body = os.urandom(a["size"])
    nc = await nats.connect(a["url"], max_reconnect_attempts=2)
    js = nc.jetstream(timeout=30)
    subject = a["subject"]
    sent = errors = 0
    first = ""

    async def one() -> None:
        nonlocal sent, errors, first
        try:
            await js.publish(subject, body)
            sent += 1
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors += 1
            first = first or f"{type(e).__name__}: {e}"

    try:
        await one()
        if errors:
            sys.exit(f"load_worker nats: warm-up publish failed: {first}")
        sent = 0
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        t0 = time.perf_counter()
        for _ in range(a["count"]):
            await one()
        _report(sent, errors, first, time.perf_counter() - t0)
    finally:
        await nc.drain()


def main() -> None:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    if kind == "cpp":
        run_cpp(args)
    elif kind == "nats":
        asyncio.run(run_nats(args))
    else:
        sys.exit(f"load_worker: unknown kind {kind!r} (cpp or nats)")


if __name__ == "__main__":
    main()
