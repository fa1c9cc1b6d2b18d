"""Drives the official RocketMQ C++ client (PyPI rocketmq==0.4.4) as a failover load: sends numbered messages with
send_sync until a stop file appears, and prints one JSON line per acknowledgement (SEND_OK) or failure.

Run as: python cpp_failover_driver.py '<json args>' with namesrv, group, topic, run, stop_file (timeout_ms, pause_s
optional). Ack lines: {"ack": {"body", "offset", "t"}} where t is time.monotonic() (CLOCK_MONOTONIC, comparable
with the test process). A separate process, so a crash or hang of the native library cannot take the test down.
"""

from __future__ import annotations

import json
import os
import sys
import time

from rocketmq.client import Message, Producer, SendStatus


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(a: dict) -> None:
    p = Producer(a["group"], timeout=a.get("timeout_ms", 3000))
    p.set_namesrv_addr(a["namesrv"])
    p.start()
    acked = failed = 0
    i = 0
    try:
        while not os.path.exists(a["stop_file"]):
            i += 1
            body = f"{a['run']}-{i}"
            msg = Message(a["topic"])
            msg.set_keys(body)
            msg.set_body(body)
            try:
                r = p.send_sync(msg)
            except Exception as e:  # noqa: BLE001 - the native client raises its own exception types
                failed += 1
                emit({"fail": {"body": body, "error": str(e)[:200], "t": time.monotonic()}})
                time.sleep(0.05)
                continue
            if r.status == SendStatus.OK:
                acked += 1
                emit({"ack": {"body": body, "offset": r.offset, "t": time.monotonic()}})
            else:
                failed += 1
                emit({"fail": {"body": body, "status": int(r.status), "t": time.monotonic()}})
            time.sleep(a.get("pause_s", 0.005))
    finally:
        p.shutdown()
    emit({"done": {"acked": acked, "failed": failed}})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
