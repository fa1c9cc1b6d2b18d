"""broker.conf storePathCommitLog honoured by a real broker process: the CommitLog segments and their lock live in
that directory, nothing in <storePathRootDir>/commitlog, and a kill -9 restart recovers the messages from there."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.model.properties import Prop, encode_properties
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.testing.procs import Standalone, blocking_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _send(addr: str, i: int) -> None:
    props = encode_properties({Prop.UNIQ_KEY: f"CL-{i}", Prop.WAIT: "true"})
    resp = blocking_request(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG_cl", "topic": "ClPath", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": props,
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}, body=b"payload-%d" % i))
    assert resp.code == 0, resp.remark


def _max_offset(addr: str) -> int:
    resp = blocking_request(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                          {"topic": "ClPath", "queueId": "0"}))
    assert resp.code == 0, resp.remark
    return int(resp.ext_fields["offset"])


def test_commitlog_in_its_own_directory_survives_kill9(tmp_path: Path) -> None:
    cl_dir = tmp_path / "disk2" / "commitlog"
    sa = Standalone(tmp_path / "sa", storePathCommitLog=str(cl_dir)).start()
    try:
        for i in range(5):
            _send(sa.broker_addr, i)
        segments = [p.name for p in cl_dir.iterdir() if p.name.isdigit()]
        assert segments and (cl_dir / "lock").exists()
        root_cl = sa.store_dir / "commitlog"
        assert not root_cl.exists() or not any(p.name.isdigit() for p in root_cl.iterdir())
        sa.kill9()
        sa.restart()
        assert _max_offset(sa.broker_addr) == 5
        _send(sa.broker_addr, 5)
        assert _max_offset(sa.broker_addr) == 6
    finally:
        sa.close()
