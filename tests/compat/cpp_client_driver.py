"""Drives the official RocketMQ C++ client (PyPI rocketmq==0.4.4, bundled librocketmq) in its own process.

Run as: python cpp_client_driver.py <action> <json-args>. Prints one JSON object per line on stdout and a final
{"done": ...} line. Runs in a subprocess so a crash or hang of the native library cannot take the test runner down.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def make_message(topic: str, i: int, tag: str, run: str) -> tuple[Message, dict]:
    body = f"{run}-body-{i}-" + "x" * (i % 50)
    key = f"{run}-key-{i}"
    msg = Message(topic)
    msg.set_keys(key)
    msg.set_tags(tag)
    msg.set_body(body)
    msg.set_property("seq", str(i))
    msg.set_property("run", run)
    return msg, {"i": i, "key": key, "tags": tag, "body": body, "props": {"seq": str(i), "run": run}}


def produce(a: dict) -> None:
    p = Producer(a["group"], timeout=a.get("timeout_ms", 5000))
    p.set_namesrv_addr(a["namesrv"])
    p.start()
    mode = a["mode"]
    n = a["count"]
    tags = a.get("tags", ["TagA", "TagB"])
    pending = threading.Semaphore(0)
    errors: list[str] = []
    sent = 0
    try:
        if mode == "batch":
            for start in range(0, n, 8):
                msgs, metas = [], []
                for i in range(start, min(n, start + 8)):
                    m, meta = make_message(a["topic"], i, tags[i % len(tags)], a["run"])
                    msgs.append(m)
                    metas.append(meta)
                r = p.send_batch(msgs)
                for meta in metas:
                    meta["status"] = int(r.status)
                    emit({"sent": meta})
                    sent += 1
        else:
            for i in range(n):
                m, meta = make_message(a["topic"], i, tags[i % len(tags)], a["run"])
                if a.get("delay"):  # delay level (SCHEDULE_TOPIC_XXXX)
                    m.set_delay_time_level(int(a["delay"]))
                    meta["sent_ms"] = int(time.time() * 1000)
                if mode == "sync":
                    r = p.send_sync(m)
                    meta["status"] = int(r.status)
                    meta["msg_id"] = r.msg_id
                elif mode == "orderly":
                    r = p.send_orderly(m, i % 4)
                    meta["status"] = int(r.status)
                    meta["msg_id"] = r.msg_id
                elif mode == "oneway":
                    p.send_oneway(m)
                elif mode == "async":
                    def ok(res, meta=meta):
                        meta["status"] = int(res.status)
                        meta["msg_id"] = res.msg_id
                        emit({"sent": meta})
                        pending.release()

                    def fail(exc, meta=meta):
                        errors.append(str(exc))
                        pending.release()

                    p.send_async(m, ok, fail)
                    continue
                emit({"sent": meta})
                sent += 1
            if mode == "async":
                for _ in range(n):
                    if not pending.acquire(timeout=30):
                        errors.append("async send callback timeout")
                        break
                sent = n - len(errors)
    finally:
        p.shutdown()
    emit({"done": {"sent": sent, "errors": errors}})


def received(msg) -> dict:
    return {
        "topic": msg.topic,
        "tags": msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
        "keys": msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys,
        "body": msg.body.decode() if isinstance(msg.body, bytes) else msg.body,
        "seq": (msg.get_property("seq") or b"").decode() if isinstance(msg.get_property("seq"), bytes)
        else msg.get_property("seq"),
        "run": (msg.get_property("run") or b"").decode() if isinstance(msg.get_property("run"), bytes)
        else msg.get_property("run"),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "id": msg.id.decode() if isinstance(msg.id, bytes) else msg.id,
    }


def push(a: dict) -> None:
    model = MessageModel.BROADCASTING if a.get("model") == "broadcasting" else MessageModel.CLUSTERING
    c = PushConsumer(a["group"], orderly=a.get("orderly", False), message_model=model)
    c.set_namesrv_addr(a["namesrv"])
    if a.get("instance"):
        c.set_instance_name(a["instance"])
    c.set_thread_count(2)
    lock = threading.Lock()
    count = [0]

    def on_message(msg) -> None:
        r = received(msg)
        with lock:
            if not a.get("count_run") or r["run"] == a["count_run"]:
                count[0] += 1
        emit({"recv": r})

    c.subscribe(a["topic"], on_message, a.get("expression", "*"))
    c.start()
    emit({"started": True})
    deadline = time.time() + a.get("timeout_s", 60)
    idle_until = None
    while time.time() < deadline:
        time.sleep(0.2)
        with lock:
            n = count[0]
        if n >= a["expect"]:
            if idle_until is None:
                idle_until = time.time() + a.get("linger_s", 2.0)  # catch duplicates / extras
            elif time.time() >= idle_until:
                break
    c.shutdown()
    emit({"done": {"received": count[0]}})


def pull(a: dict) -> None:
    c = PullConsumer(a["group"])
    c.set_namesrv_addr(a["namesrv"])
    c.start()
    n = 0
    deadline = time.time() + a.get("timeout_s", 60)
    while n < a["expect"] and time.time() < deadline:
        for msg in c.pull(a["topic"], a.get("expression", "*"), a.get("batch", 32)):
            emit({"recv": received(msg)})
            n += 1
        if n < a["expect"]:
            time.sleep(0.2)
    c.shutdown()
    emit({"done": {"received": n}})


if __name__ == "__main__":
    action, args = sys.argv[1], json.loads(sys.argv[2])
    {"produce": produce, "push": push, "pull": pull}[action](args)
