"""Bounds a RemotingServer enforces on its peers: connection caps, a deadline for a started frame and a budget
for input bytes buffered in unfinished frames across all connections.

ServerLimits is plain data (the broker, name server and controller fill it from their configs). InputBudget is
the shared accounting: a connection reports its unfinished-frame bytes after each read; while the total is over
the budget, connections that add to it pause reading, except one "finisher" kept reading so that some frame
always completes (otherwise every connection could stop mid-frame for good). Reading resumes, one connection per
freed chunk, once the total is back under the low mark. The frame deadline closes a paused connection that never
gets its turn, so a budget of slow peers cannot hold the server forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_CONNECTIONS_PER_IP = 1_000
DEFAULT_FRAME_DEADLINE_MS = 30_000
DEFAULT_INPUT_BUFFER_BUDGET = 256 * 1024 * 1024

# names counted through `on_limit` (the broker exports them as orbitmq_limits_hit_total{limit=...})
LIMIT_MAX_CONNECTIONS = "serverMaxConnections"
LIMIT_MAX_CONNECTIONS_PER_IP = "serverMaxConnectionsPerIp"
LIMIT_FRAME_DEADLINE = "serverFrameDeadlineMs"
LIMIT_INPUT_BUDGET = "serverInputBufferBudget"


@dataclass(frozen=True)
class ServerLimits:
    """0 (or less) switches a bound off."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    frame_deadline_ms: int = DEFAULT_FRAME_DEADLINE_MS
    input_buffer_budget: int = DEFAULT_INPUT_BUFFER_BUDGET


class Pausable(Protocol):
    def pause_input(self) -> None: ...

    def resume_input(self) -> None: ...


class InputBudget:
    """Bytes held in unfinished frames, summed over connections; pauses and resumes readers around `budget`."""

    def __init__(self, budget: int, on_limit: Callable[[str], None] | None = None) -> None:
        self.budget = budget
        self.low_mark = budget // 2
        self._on_limit = on_limit
        self._held: dict[Pausable, int] = {}
        self.total = 0
        self._paused: dict[Pausable, None] = {}  # insertion order = resume order
        self._finisher: Pausable | None = None
        self.pause_count = 0

    @property
    def paused(self) -> int:
        return len(self._paused)

    def update(self, conn: Pausable, held: int) -> None:
        """`conn` now holds `held` bytes of unfinished frames (0 when it has none, or when it closed)."""
        old = self._held.get(conn, 0)
        if held:
            self._held[conn] = held
        elif old:
            del self._held[conn]
        self.total += held - old
        if self.budget <= 0:
            return
        if held == 0:
            self._paused.pop(conn, None)
            if self._finisher is conn:
                self._finisher = None
        if self.total > self.budget and held > old and conn not in self._paused:
            if self._finisher is None or self._finisher is conn:
                self._finisher = conn  # keeps reading: its frame completing frees bytes
            else:
                self._paused[conn] = None
                self.pause_count += 1
                if self._on_limit is not None:
                    self._on_limit(LIMIT_INPUT_BUDGET)
                conn.pause_input()
        if self._paused and (self.total <= self.low_mark or self._finisher is None):
            self._resume_one_or_more()

    def _resume_one_or_more(self) -> None:
        while self._paused:
            conn = next(iter(self._paused))
            del self._paused[conn]
            if self._finisher is None:
                self._finisher = conn
            conn.resume_input()
            if self.total > self.low_mark:
                break  # one at a time while still above the low mark


def limits_of(cfg: object) -> ServerLimits:
    """From a broker / name server / controller config with the server_* limit fields (absent = default)."""
    d = ServerLimits()
    return ServerLimits(getattr(cfg, "server_max_connections", d.max_connections),
                        getattr(cfg, "server_max_connections_per_ip", d.max_connections_per_ip),
                        getattr(cfg, "server_frame_deadline_ms", d.frame_deadline_ms),
                        getattr(cfg, "server_input_buffer_budget", d.input_buffer_budget))
