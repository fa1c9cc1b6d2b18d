"""Per-operation CPU cost of the broker/SDK hot paths, in-process (stable on a loaded machine, unlike end-to-end
throughput). Run the same file against two source trees to compare:

    PYTHONPATH=<tree> .venv/bin/python bench/micro/hotpaths.py

Each line: operation, microseconds of process CPU per operation (best of 3 rounds).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from orbitmq.model.properties import decode_properties, encode_properties
from orbitmq.model.record import decode_record, encode_record, pack_host_port
from orbitmq.model.tags import java_hash
from orbitmq.protocol import RemotingCommand, encode_frame, normalize_send_header, to_send_v2
from orbitmq.store import MessageInner, MessageStore, StoreConfig


def cpu_us(fn: Callable[[int], None], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn(n)
        best = min(best, time.process_time() - t0)
    return best * 1e6 / n


def bench_codec() -> dict[str, float]:
    key = "LoadT#7F0000010F3A18B4AAC27E4D3C5A0000"
    props = {"UNIQ_KEY": "7F0000010F3A18B4AAC27E4D3C5A0000", "WAIT": "true", "TAGS": "TagA", "CLUSTER": "C"}
    text = encode_properties(props)
    v2 = to_send_v2({"producerGroup": "PG", "topic": "LoadT", "defaultTopic": "TBW102",
                     "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000",
                     "flag": "0", "properties": text, "reconsumeTimes": "0", "unitMode": "false", "batch": "false"})
    rec = encode_record(topic=b"LoadT", body=os.urandom(1024), properties=text.encode(), queue_id=1, flag=0,
                        sys_flag=0, born_timestamp=1, born_host=pack_host_port("127.0.0.1:5555"),
                        store_host=pack_host_port("127.0.0.1:10911"))
    body32 = rec * 32

    def hash_(n: int) -> None:
        for _ in range(n):
            java_hash(key)

    def enc_props(n: int) -> None:
        for _ in range(n):
            encode_properties(props)

    def dec_props(n: int) -> None:
        for _ in range(n):
            decode_properties(text)

    def norm(n: int) -> None:
        for _ in range(n):
            normalize_send_header(v2)

    def dec_rec(n: int) -> None:
        for _ in range(n // 32):
            pos = 0
            while pos < len(body32):
                pos += decode_record(body32, pos).store_size

    def frame(n: int) -> None:
        cmd = RemotingCommand.request(310, v2, b"x" * 1024)
        for _ in range(n):
            encode_frame(cmd)

    return {"java_hash (38-char index key)": cpu_us(hash_, 50_000),
            "encode_properties (4 props)": cpu_us(enc_props, 50_000),
            "decode_properties (4 props)": cpu_us(dec_props, 50_000),
            "normalize_send_header (V2)": cpu_us(norm, 50_000),
            "decode_record (1 KiB, per msg)": cpu_us(dec_rec, 32_000),
            "encode_frame (send request)": cpu_us(frame, 50_000)}


def bench_store() -> dict[str, float]:
    d = tempfile.mkdtemp(prefix="orbitmq-micro-")
    store = MessageStore(StoreConfig(d))
    store.load()
    body = os.urandom(1024)
    counter = [0]

    def put(n: int) -> None:
        for _ in range(n):
            counter[0] += 1
            props = {"UNIQ_KEY": f"7F0000010F3A18B4AAC2{counter[0]:012X}", "WAIT": "true", "CLUSTER": "C"}
            msg = MessageInner("LoadT", counter[0] & 3, body, props, 0, 0, 1_700_000_000_000, "127.0.0.1:5555",
                               "127.0.0.1:10911", 0, 0)
            if hasattr(store, "put_messages_nowait"):
                store.put_messages_nowait([msg])
            else:  # an older tree: the coroutine runs to completion without suspending in ASYNC_FLUSH
                coro = store.put_messages([msg])
                try:
                    coro.send(None)
                except StopIteration:
                    pass

    try:
        put(2000)
        return {"store put (1 KiB, ASYNC_FLUSH, CQ+index)": cpu_us(put, 20_000)}
    finally:
        asyncio.run(store.shutdown())
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    results = {**bench_codec(), **bench_store()}
    for name, us in results.items():
        print(f"{name:45s} {us:8.2f} us")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
