"""The admin commands' plumbing: SDK exceptions as one-line CLI errors, the progress bar helper, the id kinds."""

from __future__ import annotations

import sys

import pytest

from orbitmq.base.errors import RemotingConnectError
from orbitmq.cli.admin_common import BrokerError, cli_error, progress
from orbitmq.client.admin_base import AdminError, parse_properties_text
from orbitmq.client.admin_messages import offset_id_address
from orbitmq.client.errors import error_for_response
from orbitmq.model.msg_id import offset_msg_id


def test_sdk_errors_become_one_line_cli_errors() -> None:
    err = cli_error(error_for_response(17, "No topic route info\n of T", "127.0.0.1:9876"))
    assert isinstance(err, BrokerError) and err.format_message() == "TOPIC_NOT_EXIST: No topic route info of T"
    assert cli_error(RemotingConnectError("connect to 127.0.0.1:1 failed: refused")).format_message() == \
        "connect to 127.0.0.1:1 failed: refused"
    assert cli_error(AdminError("cluster 'X' not found (known: C)")).exit_code == 1


def test_progress_draws_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    with progress("work", 2) as update:  # pytest's stderr is no terminal: a no-op
        update()
        update(description="more")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress("work", 2) as update:
        update()
        update(description="step 2")
    with progress("work", None, enabled=False) as update:
        update()


def test_offset_ids_and_unique_keys_are_told_apart() -> None:
    assert offset_id_address(offset_msg_id("127.0.0.1", 10911, 4096)) == ("127.0.0.1:10911", 4096)
    # a UNIQ_KEY: ip(4) pid(2) random(4) time(4) counter(2); bytes 4..8 read as a port are far beyond 65535
    assert offset_id_address("C0A8010112345678ABCD0000000A0001") is None
    assert offset_id_address("not-hex") is None


def test_properties_text() -> None:
    assert parse_properties_text("# c\nbrokerName=broker-a\n\n a = b = c \n!x\nnoequals\n") == {
        "brokerName": "broker-a", "a": "b = c"}


def test_broker_process_title() -> None:
    from orbitmq.cli import broker_title

    assert broker_title("broker-a", 0, 10911) == "broker-a/0 :10911"
    assert broker_title("broker-a", -1, 10911) == "broker-a :10911"  # controller mode: id assigned later
