"""DispatchListeners: a listener narrowed by `topics` / `while_nonempty` sees exactly the records it would have
acted on with the same checks inside it, in registration order with the unfiltered ones; errors stay contained."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.store import MessageInner, MessageStore, StoreConfig
from orbitmq.store.dispatch import DispatchListeners, DispatchRequest
from orbitmq.testing.sim_disk import SimDisk

TOPICS = ("T", "U", "SCHEDULE", "TIMER")


def _req(topic: str, offset: int = 0) -> DispatchRequest:
    return DispatchRequest(topic, 0, offset, 10, 0, 0, offset, None, None, 0, 0)


# one listener: (topics filter or None, gate index or None); a step: a record's topic, or a gate toggle
LISTENER = st.tuples(st.none() | st.sets(st.sampled_from(TOPICS), max_size=2), st.none() | st.integers(0, 1))
STEP = st.sampled_from(TOPICS) | st.tuples(st.just("gate"), st.integers(0, 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(LISTENER, min_size=1, max_size=6), st.lists(STEP, max_size=30))
def test_filtered_listeners_see_what_self_checking_ones_act_on(specs: list[Any], steps: list[Any]) -> None:
    gates: list[dict[str, int]] = [{}, {}]
    filtered = DispatchListeners()
    checking = DispatchListeners()
    seen_filtered: list[tuple[int, int]] = []
    seen_checking: list[tuple[int, int]] = []
    for i, (topics, gate) in enumerate(specs):
        g = None if gate is None else gates[gate]

        def narrow(req: DispatchRequest, i: int = i) -> None:
            seen_filtered.append((i, req.phys_offset))

        def check(req: DispatchRequest, i: int = i, topics: set[str] | None = topics, g: Any = g) -> None:
            if (topics is None or req.topic in topics) and (g is None or g):  # the listener's own early return
                seen_checking.append((i, req.phys_offset))

        filtered.add(narrow, topics=topics, while_nonempty=g)
        checking.add(check)
    for n, step in enumerate(steps):
        if isinstance(step, tuple):
            gate = gates[step[1]]
            if gate:
                gate.clear()
            else:
                gate["x"] = 1
            continue
        filtered.dispatch(_req(step, n))
        checking.dispatch(_req(step, n))
    assert seen_filtered == seen_checking
    assert len(filtered) == len(specs)


@pytest.mark.parametrize("topic", ["T", "TIMER"])
def test_a_failing_listener_is_logged_and_the_next_still_runs(topic: str, caplog: pytest.LogCaptureFixture) -> None:
    listeners = DispatchListeners()
    seen: list[str] = []
    listeners.add(lambda r: 1 / 0)
    listeners.add(lambda r: 1 / 0, topics=["TIMER"])
    listeners.add(lambda r: seen.append(r.topic))
    with caplog.at_level(logging.ERROR, "orbitmq.store.dispatch"):
        listeners.dispatch(_req(topic))
    assert seen == [topic]
    assert sum("dispatch listener failed" in r.getMessage() for r in caplog.records) == (2 if topic == "TIMER" else 1)


def test_store_calls_a_narrowed_listener_only_for_its_topic_and_while_its_table_is_nonempty() -> None:
    store = MessageStore(StoreConfig("/s", mapped_file_size_commitlog=16 * 1024, mapped_file_size_consume_queue=20 * 100,
                                     max_message_size=4096, max_hash_slot_num=64, max_index_num=512), disk=SimDisk())
    store.load()
    waiting: set[str] = set()
    by_topic: list[tuple[str, int]] = []
    while_waiting: list[tuple[str, int]] = []
    every: list[tuple[str, int]] = []
    store.add_dispatch_listener(lambda r: by_topic.append((r.topic, r.queue_offset)), topics=["B"])
    store.add_dispatch_listener(lambda r: while_waiting.append((r.topic, r.queue_offset)), while_nonempty=waiting)
    store.add_dispatch_listener(lambda r: every.append((r.topic, r.queue_offset)))

    def put(topic: str) -> None:
        asyncio.run(store.put_message(MessageInner(topic, 0, b"body", {})))

    try:
        put("A")
        put("B")
        waiting.add("someone")
        put("A")
        waiting.clear()
        put("A")
    finally:
        asyncio.run(store.shutdown())
    assert by_topic == [("B", 0)]
    assert while_waiting == [("A", 1)]
    assert every == [("A", 0), ("B", 0), ("A", 1), ("A", 2)]
