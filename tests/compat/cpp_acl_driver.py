"""Drives the official RocketMQ C++ client (PyPI rocketmq==0.4.4) with ACL session credentials, in its own process.

Run as: python cpp_acl_driver.py <produce|consume> <json-args>. Prints JSON lines on stdout: {"sent": ...} or
{"send_error": ...} per message (produce), {"received": ...} per message (consume), and a final {"done": ...}.
Credentials: args "access_key", "secret_key" (and "channel", default ALIYUN as the C++ client's own default).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def produce(a: dict) -> None:
    p = Producer(a["group"], timeout=a.get("timeout_ms", 4000))
    p.set_namesrv_addr(a["namesrv"])
    p.set_session_credentials(a["access_key"], a["secret_key"], a.get("channel", "ALIYUN"))
    p.start()
    emit({"started": True})
    ok = 0
    try:
        for i in range(a["count"]):
            msg = Message(a["topic"])
            msg.set_keys(f"{a['run']}-key-{i}")
            msg.set_tags("TagA")
            msg.set_body(f"{a['run']}-body-{i}")
            try:
                r = p.send_sync(msg)
                emit({"sent": {"i": i, "status": int(r.status), "msg_id": r.msg_id}})
                ok += 1
            except Exception as e:  # noqa: BLE001 - the test reads the reason
                emit({"send_error": {"i": i, "error": f"{type(e).__name__}: {e}"}})
    finally:
        p.shutdown()
    emit({"done": ok})


def consume(a: dict) -> None:
    c = PushConsumer(a["group"])
    c.set_namesrv_addr(a["namesrv"])
    c.set_session_credentials(a["access_key"], a["secret_key"], a.get("channel", "ALIYUN"))
    got: dict[str, str] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def on_message(msg) -> None:
        with lock:
            got[msg.keys.decode()] = msg.body.decode()
            emit({"received": {"key": msg.keys.decode(), "body": msg.body.decode()}})
            if len(got) >= a["expect"]:
                enough.set()

    c.subscribe(a["topic"], on_message, "*")
    c.start()
    emit({"started": True})
    try:
        enough.wait(a.get("timeout_s", 60))
        time.sleep(0.2)  # let the last consumption result be acknowledged before shutdown
    finally:
        c.shutdown()
    emit({"done": len(got)})


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](json.loads(sys.argv[2]))
