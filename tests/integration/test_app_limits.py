"""Application limits on a real broker process (issue 12.2): the per-client auto-create cap refuses a send to one
topic too many with a remark naming the key and counts it in orbitmq_limits_hit_total; existing topics still work;
an SQL92 subscription over a limit is refused at CHECK_CLIENT_CONFIG (what the SDK's consumer start does)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orbitmq.client import Producer, SendStatus
from orbitmq.client.errors import ResponseError
from orbitmq.model import Message
from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.remoting import RemotingClient
from orbitmq.testing.procs import LOCALHOST, Standalone, free_port
from tests.integration.test_net_limits import _limit_hits

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_auto_create_cap_and_sql92_limits_on_a_broker(tmp_path: Path) -> None:
    mport = free_port()
    sa = Standalone(tmp_path / "sa", autoCreatePerClientPerMinute=3, enablePropertyFilter="true",
                    metricsExporterType="PROM", metricsPromExporterHost=LOCALHOST,
                    metricsPromExporterPort=mport).start()
    try:
        asyncio.run(_main(sa))
        deadline = time.monotonic() + 20
        while _limit_hits(mport).get("autoCreatePerClientPerMinute", 0) < 1:
            assert time.monotonic() < deadline, "the refusal is not counted in orbitmq_limits_hit_total"
            time.sleep(0.1)
    finally:
        sa.close()


async def _main(sa: Standalone) -> None:
    async with Producer("P_app_limits", namesrv=sa.namesrv_addr) as p:
        for i in range(3):
            r = await p.send(Message(f"AppLim{i}", b"x", {}))
            assert r.status == SendStatus.SEND_OK
        with pytest.raises(ResponseError) as ei:
            await p.send(Message("AppLim3", b"x", {}))
        assert ei.value.code == ResponseCode.SYSTEM_ERROR
        assert "topic [AppLim3] not created" in ei.value.remark
        assert "autoCreatePerClientPerMinute=3" in ei.value.remark
        r = await p.send(Message("AppLim0", b"y", {}))  # an existing topic costs nothing
        assert r.status == SendStatus.SEND_OK
    client = RemotingClient(name="app-limits-test")
    try:
        body = ('{"clientId":"c","group":"AppLim0G","subscriptionData":{"topic":"AppLim0","subString":"'
                + "a IN (" + ", ".join(f"'{i}'" for i in range(300)) + ")"
                + '","expressionType":"SQL92"}}').encode()
        resp = await client.invoke(f"{LOCALHOST}:{sa.broker_port}",
                                   RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body), 10_000)
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "IN list longer than 256" in resp.remark
    finally:
        await client.close()
