"""Restart (issue 16.1): a long store recovery and de-dup rebuild run off the event loop, so what shares the loop
(a standalone's name server) keeps answering, and the broker answers nothing it cannot serve until it is ready."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from orbitmq.broker import Broker, BrokerConfig
from orbitmq.broker.services.dedup import DedupService
from orbitmq.cli.main import main
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


async def _name_server_and_broker(tmp_path) -> tuple[Any, str, Broker]:
    """A started name server, its address, and a broker (not started) registering with it."""
    ns_cfg, _ = load_namesrv_settings(None, port=0, kv_config_path=str(tmp_path / "kv" / "kvConfig.json"))
    ns = make_name_server(ns_cfg)
    await ns.start()
    ns_addr = f"127.0.0.1:{ns.port}"
    broker = Broker(BrokerConfig(broker_ip1="127.0.0.1", listen_port=0, namesrv_addr=ns_addr),
                    StoreConfig(str(tmp_path / "store"), mapped_file_size_commitlog=4 << 20, max_message_size=1 << 20))
    return ns, ns_addr, broker


def test_name_server_answers_while_the_broker_recovers(tmp_path, monkeypatch):
    loading, rebuilding = threading.Event(), threading.Event()
    at: dict[threading.Event, list[float]] = {loading: [], rebuilding: []}
    monkeypatch.setattr(MessageStore, "load", _slow(MessageStore.load, loading, at[loading]))
    monkeypatch.setattr(DedupService, "_rebuild", _slow(DedupService._rebuild, rebuilding, at[rebuilding]))

    async def go() -> None:
        ns, ns_addr, broker = await _name_server_and_broker(tmp_path)
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


def test_broker_status_shows_a_starting_brokers_progress(tmp_path, monkeypatch):
    """`orbitmq admin brokerStatus -b` against a broker still in its start-up prints the start-up progress the broker
    answers with (SERVICE_NOT_AVAILABLE and a KVTable body) and exits 1 with the remark; once the broker is ready,
    its runtime info and exit 0."""
    held, release = threading.Event(), threading.Event()
    real_rebuild = DedupService._rebuild

    def hold(self, *a, **kw):
        held.set()
        assert release.wait(30), "the test never released the start-up"
        return real_rebuild(self, *a, **kw)

    monkeypatch.setattr(DedupService, "_rebuild", hold)

    async def go() -> None:
        ns, ns_addr, broker = await _name_server_and_broker(tmp_path)
        try:
            start = asyncio.get_running_loop().create_task(broker.start())
            deadline = time.monotonic() + 20
            while not held.is_set():
                assert time.monotonic() < deadline, "the broker never reached its de-dup rebuild"
                await asyncio.sleep(0.01)
            args = ["brokerStatus", "-n", ns_addr, "-b", broker.addr]
            res = await asyncio.to_thread(CliRunner().invoke, main, args)
            assert res.exit_code == 1, (res.stdout, res.stderr)
            assert f"broker {broker.addr} (starting)" in res.stdout and "startupPhase" in res.stdout, res.stdout
            assert "broker is starting" in res.stderr, res.stderr
            res = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--json"])
            assert res.exit_code == 1 and orjson.loads(res.stdout)["startupPhase"] != "ready", res.stdout
            release.set()
            await asyncio.wait_for(start, 30)
            res = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--json"])
            assert res.exit_code == 0, (res.stdout, res.stderr)
            info = orjson.loads(res.stdout)
            assert info["brokerVersionDesc"] and "startupPhase" not in info
        finally:
            release.set()
            await broker.stop()
            await ns.stop()

    asyncio.run(go())
