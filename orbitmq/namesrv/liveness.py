"""Broker liveness for the name server: a periodic scan expiring silent brokers, and immediate removal when
the connection a broker registered over closes. The decisions live in RouteTable; this only drives them.
`on_change` (NamesrvHandlers.after_mutation) runs after every removal: min-id notices and route pushes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from orbitmq.base.clock import REAL_CLOCK, Clock
from orbitmq.namesrv.route_table import RemovedBroker, RouteTable

log = logging.getLogger(__name__)


def _close_channel(channel: object) -> None:
    close: Callable[[], None] | None = getattr(channel, "close", None)
    if close is not None and not getattr(channel, "closed", False):
        try:
            close()
        except Exception:  # a half-dead socket must not stop the scan
            log.exception("closing expired broker channel failed")


class BrokerLiveness:
    def __init__(self, table: RouteTable, scan_interval_ms: int, clock: Clock = REAL_CLOCK,
                 on_change: Callable[[], None] | None = None) -> None:
        self.table = table
        self.on_change = on_change
        self.scan_interval_ms = scan_interval_ms
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    def scan_once(self) -> list[RemovedBroker]:
        removed = self.table.expire(self.clock.monotonic_ms())
        for r in removed:
            log.warning("broker %s (%s) silent for longer than its heartbeat timeout; removed",
                        r.addr, r.broker_name)
            _close_channel(r.channel)
        if removed:
            self._changed()
        return removed

    def on_channel_closed(self, channel: object) -> list[RemovedBroker]:
        removed = self.table.on_channel_closed(channel)
        for r in removed:
            log.info("broker %s (%s) connection closed; removed", r.addr, r.broker_name)
        if removed:
            self._changed()
        return removed

    def _changed(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception:  # notifying others must never stop liveness handling
            log.exception("name server change notification failed")

    async def run_scan_loop(self) -> None:
        interval_s = self.scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.scan_once()
            except Exception:
                # an InvariantError or bug in the table: log with context and stop the loop loudly
                log.exception("name server liveness scan failed; scanning stops")
                raise

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run_scan_loop(), name="namesrv-liveness")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.debug("liveness loop had already failed", exc_info=True)
