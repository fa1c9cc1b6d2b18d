"""Per-record CPU cost on a slave of learning de-duplication keys: append_raw + dispatch of master bytes into a
slave store without / with the DedupService dispatch listener (records with / without UNIQ_KEY), the listener alone,
and the master's before_put / after_put per send (run against two trees with PYTHONPATH=<tree> to compare).
Usage: .venv/bin/python bench/micro/replica_dedup.py [records]; µs of process CPU per record, best of 3 rounds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace

from orbitmq.base.clock import REAL_CLOCK
from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services.dedup import DedupService
from orbitmq.broker.stats import BrokerStats
from orbitmq.model.properties import Prop
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.store import MessageInner, MessageStore, PutResult, PutStatus, StoreConfig
from orbitmq.store.dispatch import DispatchRequest

SEG = 128 * 1024 * 1024
CHUNK = 32 * 1024  # bytes per HA transfer


def _store(d: str) -> MessageStore:
    s = MessageStore(StoreConfig(d, mapped_file_size_commitlog=SEG))
    s.load()
    return s


def _fill(master: MessageStore, n: int, keyed: bool) -> None:
    body = os.urandom(1024)
    for i in range(n):
        props = {"TAGS": "TagA", "WAIT": "true"}
        if keyed:
            props[Prop.UNIQ_KEY] = f"7F0000010F3A18B4AAC27E4D{i:08X}"
        r, _ = master.put_messages_nowait([MessageInner("LoadT", i % 8, body, props)])
        assert r.ok


def _slave_service(store: MessageStore, config_dir: str) -> DedupService:
    cfg = BrokerConfig(broker_ip1="127.0.0.1", broker_role="SLAVE", broker_id=1)
    ctx = SimpleNamespace(config=cfg, stats=BrokerStats(), send_hooks=[], store=store, store_host="127.0.0.1:10911")
    env = SimpleNamespace(clock=REAL_CLOCK, config_dir=config_dir, store_config=store.config,
                          writes=BackgroundWrites())
    svc = DedupService(ctx, env)  # type: ignore[arg-type]
    asyncio.run(svc.start())  # rebuild (empty) + the dispatch listener (in a tree that has it)
    return svc


def _replicate_us(master: MessageStore, n: int, with_dedup: bool) -> float:
    """CPU µs per record to append_raw + dispatch the master's whole CommitLog into a fresh slave store."""
    best = float("inf")
    end = master.max_phys_offset
    for _ in range(3):
        d = tempfile.mkdtemp(prefix="orbitmq-micro-slave-")
        try:
            slave = _store(os.path.join(d, "store"))
            svc = _slave_service(slave, d) if with_dedup else None
            chunks = [master.read_commitlog(p, CHUNK) for p in range(0, end, CHUNK)]
            t0 = time.process_time()
            pos = 0
            for c in chunks:
                pos = slave.append_raw(pos, c)
            best = min(best, time.process_time() - t0)
            if svc is not None and svc.table.entries:
                assert len(svc.table) == min(n, svc.table.max_entries)
            asyncio.run(slave.shutdown())
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return best * 1e6 / n


def _listener_us(n: int, keyed: bool) -> float:
    d = tempfile.mkdtemp(prefix="orbitmq-micro-listener-")
    try:
        store = _store(os.path.join(d, "store"))
        reqs = []
        for i in range(n):
            props = {"TAGS": "TagA", "WAIT": "true"}
            uniq = f"7F0000010F3A18B4AAC27E4D{i:08X}" if keyed else None
            if uniq is not None:
                props[Prop.UNIQ_KEY] = uniq
            reqs.append(DispatchRequest("LoadT", i % 8, i * 1200, 1200, 0, 1_700_000_000_000 + i, i // 8, None, uniq,
                                        0, 0, props))
        best = float("inf")
        for _ in range(3):
            svc = _slave_service(store, d)
            t0 = time.process_time()
            for r in reqs:
                svc.on_dispatch(r)
            best = min(best, time.process_time() - t0)
        asyncio.run(store.shutdown())
        return best * 1e6 / n
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _send_hook_us(n: int) -> dict[str, float]:
    """The master's side, for comparison across trees: before_put of a never-seen key (every first send) and
    after_put of a single send."""
    d = tempfile.mkdtemp(prefix="orbitmq-micro-hook-")
    try:
        store = _store(os.path.join(d, "store"))
        svc = _slave_service(store, d)
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "LoadT"})
        msgs = [[MessageInner("LoadT", 1, b"x", {Prop.UNIQ_KEY: f"7F0000010F3A18B4AAC27E4D{i:08X}", "TAGS": "A"})]
                for i in range(n)]
        results = [PutResult(PutStatus.PUT_OK, i * 1200, 1200, [f"ID{i:016X}"], i, 1, 1_700_000_000_000 + i)
                   for i in range(n)]
        t0 = time.process_time()
        for m in msgs:
            svc.before_put(None, req, m)
        miss = time.process_time() - t0
        t0 = time.process_time()
        for m, r in zip(msgs, results, strict=True):
            svc.after_put(None, req, m, r)
        put = time.process_time() - t0
        asyncio.run(store.shutdown())
        return {"before_put, key never seen": miss * 1e6 / n, "after_put, one message": put * 1e6 / n}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    for name, us in _send_hook_us(n).items():
        print(f"{name:55s} {us:8.2f} us")
    if not hasattr(DedupService, "on_dispatch"):
        return  # a tree before replicas learned keys
    for keyed in (True, False):
        d = tempfile.mkdtemp(prefix="orbitmq-micro-master-")
        try:
            master = _store(d)
            _fill(master, n, keyed)
            label = "with UNIQ_KEY" if keyed else "no UNIQ_KEY"
            before = _replicate_us(master, n, with_dedup=False)
            after = _replicate_us(master, n, with_dedup=True)
            print(f"append_raw+dispatch, {label}, no dedup listener   {before:8.2f} us/record")
            print(f"append_raw+dispatch, {label}, dedup listener      {after:8.2f} us/record  (+{after - before:.2f})")
            asyncio.run(master.shutdown())
        finally:
            shutil.rmtree(d, ignore_errors=True)
        print(f"on_dispatch alone, {label}                         {_listener_us(n, keyed):8.2f} us/record")


if __name__ == "__main__":
    main()
