"""BrokerLiveTable: each controller's local (not replicated) view of which brokers are alive, fed by BROKER_HEARTBEAT.

A broker is alive while last_update + heartbeat_timeout >= now and its connection is open; a closed connection
removes its brokers at once. Time is passed in (monotonic ms); this module does no I/O and starts no timers.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.controller.election import CandidateInfo

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000
MAX_PRIORITY = 2**31 - 1

BrokerKey = tuple[str, str, int]  # (clusterName, brokerName, brokerId)


@dataclass(slots=True)
class BrokerLiveInfo:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_update_ms: int
    heartbeat_timeout_ms: int
    channel: object | None
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = MAX_PRIORITY

    @property
    def key(self) -> BrokerKey:
        return (self.cluster_name, self.broker_name, self.broker_id)

    def expired(self, now_ms: int) -> bool:
        return self.last_update_ms + self.heartbeat_timeout_ms < now_ms


class BrokerLiveTable:
    def __init__(self) -> None:
        self._table: dict[BrokerKey, BrokerLiveInfo] = {}

    def __len__(self) -> int:
        return len(self._table)

    def on_heartbeat(self, *, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str, now_ms: int,
                     channel: object | None = None, timeout_ms: int | None = None, epoch: int | None = None,
                     max_offset: int | None = None, confirm_offset: int | None = None,
                     election_priority: int | None = None) -> bool:
        """Record one heartbeat; returns True when the broker was not known to be alive before. The latest
        report wins (a truncated log shows up at once, unlike RocketMQ's only-ever-raise bookkeeping)."""
        key = (cluster_name, broker_name, broker_id)
        prev = self._table.get(key)
        info = BrokerLiveInfo(
            cluster_name, broker_name, broker_id, broker_addr, now_ms,
            timeout_ms if timeout_ms is not None and timeout_ms > 0 else DEFAULT_HEARTBEAT_TIMEOUT_MS, channel,
            epoch if epoch is not None else (prev.epoch if prev else 0),
            max_offset if max_offset is not None else (prev.max_offset if prev else 0),
            confirm_offset if confirm_offset is not None else (prev.confirm_offset if prev else 0),
            election_priority if election_priority is not None else (prev.election_priority if prev
                                                                        else MAX_PRIORITY),
        )
        self._table[key] = info
        return prev is None or prev.expired(now_ms)

    def is_alive(self, cluster_name: str, broker_name: str, broker_id: int, now_ms: int) -> bool:
        info = self._table.get((cluster_name, broker_name, broker_id))
        return info is not None and not info.expired(now_ms)

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self._table.get((cluster_name, broker_name, broker_id))

    def candidate_info(self, cluster_name: str, broker_name: str, broker_id: int) -> CandidateInfo | None:
        info = self._table.get((cluster_name, broker_name, broker_id))
        if info is None:
            return None
        return CandidateInfo(info.epoch, info.max_offset, info.election_priority)

    def scan_expired(self, now_ms: int) -> list[BrokerLiveInfo]:
        """Remove and return the brokers whose heartbeat expired (the caller closes channels, triggers elections)."""
        gone = [info for info in self._table.values() if info.expired(now_ms)]
        for info in gone:
            del self._table[info.key]
        return gone

    def on_channel_closed(self, channel: object) -> list[BrokerLiveInfo]:
        """Remove and return the brokers whose heartbeats arrived on `channel`."""
        gone = [info for info in self._table.values() if info.channel is channel]
        for info in gone:
            del self._table[info.key]
        return gone

    def extend_all(self, now_ms: int) -> None:
        """A new leader starts every known broker's timeout afresh: its table may hold old heartbeats of a broker that
        could not reach it while it was a follower, and a master's lease was renewed by the previous leader."""
        for info in self._table.values():
            info.last_update_ms = max(info.last_update_ms, now_ms)

    def remove(self, cluster_name: str, broker_name: str, broker_id: int) -> None:
        self._table.pop((cluster_name, broker_name, broker_id), None)

    def alive_entries(self, now_ms: int) -> list[BrokerLiveInfo]:
        return [i for i in self._table.values() if not i.expired(now_ms)]
