"""Restart (issue 16.1): a long store recovery and de-dup rebuild run off the event loop, so what shares the loop
(a standalone's name server) keeps answering, and the broker answers nothing it cannot serve until it is ready."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from orbitmq.broker import Broker, BrokerConfig
from orbitmq.broker.services.dedup import DedupService
from orbitmq.cli.namesrv import load_namesrv_settings, make_name_server
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient
from orbitmq.store import MessageStore, StoreConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SLOW_S = 1.5  # each slow phase, well above the answer bound checked below


def _slow(real, started: threading.Event, at: list[float]):
    def slow(self, *a, **kw):
        at.append(time.monotonic())
        started.set()
        time.sleep(SLOW_S)  # a long recovery: blocking work, as the real scan is
        return real(self, *a, **kw)

    return slow


def test_name_server_answers_while_the_broker_recovers(tmp_path, monkeypatch):
    loading, rebuilding = threading.Event(), threading.Event()
    at: dict[threading.Event, list[float]] = {loading: [], rebuilding: []}
    monkeypatch.setattr(MessageStore, "load", _slow(MessageStore.load, loading, at[loading]))
    monkeypatch.setattr(DedupService, "_rebuild", _slow(DedupService._rebuild, rebuilding, at[rebuilding]))

    async def go() -> None:
        ns_cfg, _ = load_namesrv_settings(None, port=0, kv_config_path=str(tmp_path / "kv" / "kvConfig.json"))
        ns = make_name_server(ns_cfg)
        await ns.start()
        ns_addr = f"127.0.0.1:{ns.port}"
        broker = Broker(BrokerConfig(broker_ip1="127.0.0.1", listen_port=0, namesrv_addr=ns_addr),
                        StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 << 20,
                                    max_message_size=1 << 20))
        client = RemotingClient()
        try:
            start = asyncio.get_running_loop().create_task(broker.start())
            answered = []
            for phase in (loading, rebuilding):
                deadline = time.monotonic() + 20
                while not phase.is_set():
                    assert time.monotonic() < deadline, "the broker never reached the slow phase"
                    await asyncio.sleep(0.01)
                t = at[phase][0]  # from the phase's start: a blocked loop would answer only after it
                resp = await client.invoke(ns_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
                                           timeout_ms=3000)
                answered.append(time.monotonic() - t)
                assert resp.code == ResponseCode.SUCCESS
                if phase is rebuilding:  # the broker port is open: it answers at once, "starting" (retryable)
                    t = time.monotonic()
                    resp = await client.invoke(broker.addr, RemotingCommand.request(
                        RequestCode.GET_BROKER_RUNTIME_INFO), timeout_ms=3000)
                    answered.append(time.monotonic() - t)
                    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "starting" in (resp.remark or "")
                assert not start.done()  # still in the slow phase when answered
            assert max(answered) < 0.5 * SLOW_S, answered
            await asyncio.wait_for(start, 30)
            resp = await client.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert resp.code == ResponseCode.SUCCESS
        finally:
            await client.close()
            await broker.stop()
            await ns.stop()

    asyncio.run(go())
