"""Shared by the remoting unit tests: `run(coro, timeout=30)` runs a coroutine on asyncio and on uvloop (the
fixture is parametrized), bounded in time."""

from __future__ import annotations

import asyncio

import pytest
import uvloop


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def runner(coro, timeout=30):
        async def bounded():
            return await asyncio.wait_for(coro, timeout)

        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(bounded())

    return runner
