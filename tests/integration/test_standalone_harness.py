"""The `standalone` fixture: a real `orbitmq standalone` process whose broker registers with its name server."""

from __future__ import annotations

import pytest

from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.bodies import TopicRouteData
from orbitmq.testing.procs import blocking_request, port_open, registered_broker_addrs

pytestmark = pytest.mark.integration


def route(namesrv_addr: str, topic: str) -> RemotingCommand:
    return blocking_request(namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


def test_standalone_registers_broker_and_survives_kill9_restart(standalone):
    assert standalone.broker_addr in registered_broker_addrs(standalone.namesrv_addr)
    resp = route(standalone.namesrv_addr, "TBW102")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    data = TopicRouteData.from_json(resp.body)
    assert data.broker_datas[0].broker_addrs[0] == standalone.broker_addr
    assert standalone.store_dir.is_dir()

    standalone.kill9()
    assert not port_open(standalone.namesrv_port) and not port_open(standalone.broker_port)
    standalone.restart()
    assert standalone.broker_addr in registered_broker_addrs(standalone.namesrv_addr)
    assert standalone.proc.starts == 2


def test_standalone_graceful_terminate(standalone):
    assert standalone.terminate(timeout=15) == 0, standalone.proc.log_tail()


def test_broker_registers_with_every_name_server(tmp_path, broker_factory):
    from orbitmq.testing.procs import start_namesrv, wait_broker_registered

    ns1 = start_namesrv(tmp_path / "ns1")
    ns2 = start_namesrv(tmp_path / "ns2")
    try:
        a1, a2 = f"127.0.0.1:{ns1.ports[0]}", f"127.0.0.1:{ns2.ports[0]}"
        broker = broker_factory(f"{a1};{a2}", name="b0", brokerName="broker-z")
        broker_addr = f"127.0.0.1:{broker.ports[0]}"
        wait_broker_registered(a2, broker_addr, timeout_s=20, proc=broker)
        for addr in (a1, a2):
            data = TopicRouteData.from_json(route(addr, "TBW102").body)
            assert [b.broker_name for b in data.broker_datas] == ["broker-z"]
        # a name server restarted empty relearns the broker only from its next registration; the other one
        # keeps answering meanwhile (name servers share nothing)
        ns1.kill9()
        assert broker_addr in registered_broker_addrs(a2)
        assert broker.terminate(timeout=15) == 0, broker.log_tail()
        assert registered_broker_addrs(a2) == set()  # graceful stop unregisters
    finally:
        ns1.close()
        ns2.close()
