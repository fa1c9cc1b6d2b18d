"""In-process Raft broker groups for the raft-mode unit tests: brokers on loopback with free Raft ports, and an
asyncio condition wait."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orbitmq.broker.app import Broker
from orbitmq.broker.config import BrokerConfig
from orbitmq.store import StoreConfig
from orbitmq.testing.procs import free_port


def raft_peers(ids: Sequence[str] = ("n0", "n1", "n2")) -> str:
    return ";".join(f"{i}-127.0.0.1:{free_port()}" for i in ids)


def raft_broker(tmp_path: Path, peers: str, node: str, broker_name: str, **keys: Any) -> Broker:
    """One member (a fenced follower until Raft names a leader), small segments, store under tmp_path/node."""
    store = StoreConfig(str(tmp_path / node / "store"), mapped_file_size_commitlog=4 * 1024 * 1024,
                        mapped_file_size_consume_queue=1000 * 20, max_message_size=64 * 1024)
    cfg = BrokerConfig(broker_ip1="127.0.0.1", listen_port=0, broker_name=broker_name, broker_role="SLAVE",
                       broker_id=1, enable_dleger_commit_log=True, dleger_peers=peers, dleger_self_id=node, **keys)
    return Broker(cfg, store)


def raft_brokers(tmp_path: Path, broker_name: str, **keys: Any) -> list[Broker]:
    peers = raft_peers()
    return [raft_broker(tmp_path, peers, node, broker_name, **keys) for node in ("n0", "n1", "n2")]


async def until(what: str, check: Any, timeout_s: float = 20.0, interval_s: float = 0.02) -> Any:
    """check()'s first truthy result; AssertionError naming `what` after timeout_s."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        got = check()
        if got:
            return got
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}")
