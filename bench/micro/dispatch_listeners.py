"""Cost of the store's dispatch-listener fan-out for one common record (a user topic, no pull or pop waiting),
with the broker's five listeners registered as the broker registers them (long-poll, pop, delay, timer, de-dup).

    .venv/bin/python bench/micro/dispatch_listeners.py [--n 200000] [--repeat 5]
    PYTHONPATH=<other tree> .venv/bin/python bench/micro/dispatch_listeners.py   # the same against another tree

The listeners are stand-ins with the real ones' early returns (long-poll: nothing held; pop: nobody waiting;
delay / timer: not their topic; de-dup: no uniq key on a master's own put, decided after two attribute reads).
A tree whose add_dispatch_listener takes no filters gets them registered unfiltered (the previous fan-out).
Prints CPU ns per record, the minimum of the repeats. Instructions per record: callgrind of `--n N --repeat 1`
minus `--n 0 --repeat 1`, divided by N (bench/micro/callgrind.py, PYTHONHASHSEED=0).
"""

from __future__ import annotations

import argparse
import inspect
import time
from typing import Any

from orbitmq.store import dispatch as dispatch_mod
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.message_store import MessageStore

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"


class _Broker:
    """The five listeners' early returns."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], list[Any]] = {}
        self.waiters: dict[str, set[Any]] = {}
        self.replicated_end = 0
        self.is_slave = False

    def long_poll(self, req: DispatchRequest) -> None:
        if not self.held:
            return

    def pop(self, req: DispatchRequest) -> None:
        if self.waiters and req.topic in self.waiters:
            return

    def delay(self, req: DispatchRequest) -> None:
        if req.topic == SCHEDULE_TOPIC and 0 <= req.queue_id < 18:
            return

    def timer(self, req: DispatchRequest) -> None:
        if req.topic != TIMER_TOPIC:
            return

    def dedup(self, req: DispatchRequest) -> None:
        uniq = req.uniq_key
        if uniq is None or (req.phys_offset >= self.replicated_end and not self.is_slave):
            return


def fan_out(store: MessageStore) -> Any:
    """The callable the Dispatcher calls for the listeners, with the broker's registrations made on `store`."""
    b = _Broker()
    filters = "topics" in inspect.signature(store.add_dispatch_listener).parameters
    add: Any = store.add_dispatch_listener
    if filters:
        add(b.long_poll, while_nonempty=b.held)
        add(b.dedup)
        add(b.pop, while_nonempty=b.waiters)
        add(b.delay, topics=(SCHEDULE_TOPIC,))
        add(b.timer, topics=(TIMER_TOPIC,))
        return store._listeners.dispatch
    for fn in (b.long_poll, b.dedup, b.pop, b.delay, b.timer):
        add(fn)
    return store._dispatch_listeners  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    store = MessageStore.__new__(MessageStore)  # only the listener table is used: no files, no load()
    listeners = getattr(dispatch_mod, "DispatchListeners", None)
    store._listeners = listeners() if listeners is not None else []  # type: ignore[assignment]
    call = fan_out(store)
    req = DispatchRequest("TopicTest", 3, 123_456, 1_200, 0, 0, 789, None, "7F00000100002A9F0000000000000001", 0, 0)
    for _ in range(1000):  # warm-up: the specializing interpreter settles (callgrind subtracts an --n 0 run)
        call(req)
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.process_time()
        for _ in range(args.n):
            call(req)
        best = min(best, time.process_time() - t0)
    print(f"dispatch listeners, one user-topic record: {best / max(args.n, 1) * 1e9:.0f} ns CPU (min of {args.repeat} x "
          f"{args.n:,})")


if __name__ == "__main__":
    main()
