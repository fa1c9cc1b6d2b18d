"""CLI pieces that need no server: error format, timestamps, tables, settings/overrides, message formatting."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import orjson
import pytest
from click.testing import CliRunner

from orbitmq.cli import EXIT_STARTUP, CliError, Output, one_line
from orbitmq.cli.admin import BrokerError, code_name, message_detail, parse_timestamp
from orbitmq.cli.broker import apply_overrides, load_broker_settings
from orbitmq.cli.clientcmds import format_message, response_error
from orbitmq.cli.main import main
from orbitmq.cli.standalone import resolve_namesrv_port
from orbitmq.client.errors import error_for_response
from orbitmq.model import MessageExt


def test_cli_error_prints_one_line_with_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    err = CliError("boom happened", EXIT_STARTUP)
    err.show()
    assert capsys.readouterr().err == "orbitmq: error: boom happened\n"
    assert err.exit_code == 2


def test_broker_error_names_the_response_code() -> None:
    err = BrokerError(17, "No topic route info\n for X", "127.0.0.1:9876")
    assert err.format_message() == "TOPIC_NOT_EXIST: No topic route info for X"
    assert err.exit_code == 1
    assert code_name(99999) == "code 99999"


def test_one_line_formats_os_errors_without_repr() -> None:
    assert one_line(PermissionError(13, "Permission denied", "/x/y")) == "Permission denied: /x/y"
    assert one_line(ValueError("a\nb")) == "a b"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000123", 1700000000123),
        ("now", 42),
        ("latest", -1),
        ("-1", -1),
        ("2024-05-01T12:00:00Z", int(datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp() * 1000)),
        ("2024-05-01T12:00:00.250+02:00", int(datetime(2024, 5, 1, 10, 0, 0, 250000,
                                                        tzinfo=UTC).timestamp() * 1000)),
        ("2024-05-01#12:00:00:250", int(datetime(2024, 5, 1, 12, 0, 0, 250000).timestamp() * 1000)),
    ],
)
def test_parse_timestamp_accepts_ms_now_iso_and_mqadmin_format(text: str, expected: int) -> None:
    assert parse_timestamp(text, now_ms=42) == expected


def test_parse_timestamp_rejects_garbage() -> None:
    with pytest.raises(click.BadParameter):
        parse_timestamp("yesterday-ish")


def test_plain_table_aligns_columns_and_footer(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output(force_plain=True)
    out.table("t", ["name", "n"], [["a", 1], ["bbb", 1234]], footer=["total", 1235], numeric=("n",))
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["# t", "name      n", "a         1", "bbb    1234", "total  1235"]


def test_json_table_gives_records_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output(json_mode=True)
    out.table("t", ["name", "n"], [["a", 1]], footer=["total", 1])
    doc = orjson.loads(capsys.readouterr().out)
    assert doc == {"title": "t", "rows": [{"name": "a", "n": 1}], "total": {"name": "total", "n": 1}}


def test_overrides_follow_port_and_derive_ha_port(tmp_path) -> None:
    from orbitmq.broker import BrokerConfig
    from orbitmq.store import StoreConfig

    b = BrokerConfig(broker_ip1="127.0.0.1", listen_port=10911)
    s = StoreConfig(store_path_root_dir=str(tmp_path / "store"))
    b2, s2 = apply_overrides(b, s, namesrv="127.0.0.1:1234", port=20000, broker_ip=None,
                             data_dir=str(tmp_path / "d"), flush="sync_flush")
    assert (b2.listen_port, b2.ha_listen_port, b2.namesrv_addr) == (20000, 20001, "127.0.0.1:1234")
    assert s2.store_path_root_dir == str(tmp_path / "d" / "store")
    assert s2.flush_disk_type == "SYNC_FLUSH" and s2.confirm_offset_mode is None


def test_bad_broker_conf_is_a_startup_error(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=abc\n")
    with pytest.raises(CliError) as info:
        load_broker_settings(str(conf), default_root=str(tmp_path))
    assert info.value.exit_code == EXIT_STARTUP
    assert "listenPort" in info.value.format_message()


def test_unknown_keys_are_returned_as_warnings_and_env_fallback_applies(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path}/s\nbrokerIP1=127.0.0.1\nnoSuchKey=1\n")
    settings = load_broker_settings(str(conf), default_root=str(tmp_path), namesrv_fallback="127.0.0.1:7777")
    assert any("noSuchKey" in w for w in settings.warnings)
    assert settings.broker.namesrv_addr == "127.0.0.1:7777"


def test_standalone_namesrv_port_precedence() -> None:
    assert resolve_namesrv_port(1111, {"namesrvListenPort": "2222"}, "127.0.0.1:3333") == 1111
    assert resolve_namesrv_port(None, {"namesrvListenPort": "2222"}, "127.0.0.1:3333") == 2222
    assert resolve_namesrv_port(None, {}, "127.0.0.1:3333;127.0.0.1:4444") == 3333
    assert resolve_namesrv_port(None, {}, "") == 9876
    with pytest.raises(CliError):
        resolve_namesrv_port(None, {"namesrvListenPort": "x"}, "")


def _msg() -> MessageExt:
    return MessageExt(topic="T", body="héllo".encode(), properties={"TAGS": "A", "KEYS": "k1 k2",
                                                                     "UNIQ_KEY": "ABCD"},
                      flag=0, queue_id=3, queue_offset=7, phys_offset=100, sys_flag=0, born_timestamp=1,
                      born_host="127.0.0.1:5000", store_timestamp=1700000000000, store_host="127.0.0.1:10911",
                      reconsume_times=0, prepared_transaction_offset=0, body_crc=0, store_size=0)


def test_format_message_modes() -> None:
    m = _msg()
    assert format_message(m, "body") == "héllo"
    text = format_message(m, "text")
    assert text.startswith("[T q3@7 ") and "msgId=ABCD tags=A keys=k1 k2" in text and text.endswith("\nhéllo")
    doc = orjson.loads(format_message(m, "json"))
    assert doc["keys"] == ["k1", "k2"] and doc["queueOffset"] == 7 and doc["body"] == "héllo"
    detail = dict(message_detail(m))
    assert detail["msgId"] == "ABCD" and detail["queueId"] == 3 and detail["body"] == "héllo"


def test_sdk_response_error_becomes_code_name_and_remark() -> None:
    err = response_error(error_for_response(17, "no route for T"))
    assert err.format_message() == "TOPIC_NOT_EXIST: no route for T"
    assert err.exit_code == 1


def test_update_topic_needs_cluster_or_broker() -> None:
    result = CliRunner().invoke(main, ["updateTopic", "-t", "T"])
    assert result.exit_code == 2
    assert "exactly one of -c CLUSTER or -b BROKER_ADDR" in result.output


def test_invalid_topic_name_is_rejected_before_any_request() -> None:
    result = CliRunner().invoke(main, ["updateTopic", "-t", "bad topic!", "-b", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "bad topic!" in result.output


def test_bench_rejects_unknown_system() -> None:
    result = CliRunner().invoke(main, ["bench", "producer", "--systems", "kafka"])
    assert result.exit_code == 2
    assert "orbitmq,rabbitmq,nats" in result.output
