"""orbitmq.model.names: full-match rules, limits at the edge and one over, hostile names (NUL, ../, newline)."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.model import names
from orbitmq.model.names import (
    CONSUMER_GROUP_MAX_LENGTH,
    GROUP_MAX_LENGTH,
    PATH_NAME_MAX,
    SERVER_NAME_MAX_LENGTH,
    TOPIC_MAX_LENGTH,
    consumer_group_error,
    group_error,
    is_legal_queue_id,
    send_topic_error,
    server_name_error,
    store_topic_error,
    topic_error,
)

LEGAL = string.ascii_letters + string.digits + "%|_-"
legal_names = st.text(alphabet=LEGAL, min_size=1, max_size=TOPIC_MAX_LENGTH)
HOSTILE = ["", " ", "a\n", "a\nb", "\na", "a\x00b", "../x", "..", ".", "a/b", "/etc", "a b", "a.b", "tópico",
           "a\r", "a\t", "a\\b", "a@b", "a\u2028"]
CHECKS = [topic_error, send_topic_error, group_error, consumer_group_error, store_topic_error]


@given(legal_names)
def test_legal_names_pass_every_name_rule(name: str) -> None:
    if name in ("%RETRY%", "%DLQ%"):  # a derived topic without its group
        return
    assert topic_error(name) is None
    assert group_error(name) is None
    assert store_topic_error(name) is None


@given(legal_names, st.sampled_from(["\n", "\r\n", "\x00", "/", "../", ".", " ", "\u00e9", "@", "\t"]))
def test_one_foreign_character_anywhere_is_refused(name: str, bad: str) -> None:
    for i in (0, len(name) // 2, len(name)):
        hostile = name[:i] + bad + name[i:]
        for check in CHECKS:
            assert check(hostile) is not None, (check.__name__, hostile)


@given(st.text(max_size=40))
def test_rules_agree_with_a_full_match_of_the_documented_pattern(name: str) -> None:
    legal = re.fullmatch(r"[%|a-zA-Z0-9_-]+", name) is not None and len(name) <= TOPIC_MAX_LENGTH
    assert (topic_error(name) is None) == (legal and name not in ("%RETRY%", "%DLQ%"))


def test_a_group_derived_topic_must_name_a_group() -> None:
    assert topic_error("%RETRY%") is not None and topic_error("%DLQ%") is not None
    assert topic_error("%RETRY%G") is None and topic_error("%DLQ%G") is None


def test_trailing_newline_is_refused_although_re_match_with_dollar_accepts_it() -> None:
    assert re.match(r"^[%|a-zA-Z0-9_-]+$", "Topic\n") is not None  # the bug the module exists to avoid
    for check in CHECKS:
        assert check("Topic\n") is not None
    assert server_name_error("broker-a\n") is not None


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_with_a_remark(name: str) -> None:
    for check in CHECKS:
        err = check(name)
        assert err is not None and len(err) < 500
        assert "\x00" not in err and "\n" not in err  # the remark shows control characters escaped


def test_non_strings_are_refused() -> None:
    for check in CHECKS:
        assert check(None) is not None
        assert check(7) is not None


def test_topic_length_limit() -> None:
    assert topic_error("t" * TOPIC_MAX_LENGTH) is None
    assert "max length 127" in (topic_error("t" * (TOPIC_MAX_LENGTH + 1)) or "")
    # group-derived topics obey the same limit: a record holds at most 127 topic bytes
    assert topic_error("%RETRY%" + "g" * (TOPIC_MAX_LENGTH - 7)) is None
    assert topic_error("%RETRY%" + "g" * (TOPIC_MAX_LENGTH - 6)) is not None


def test_group_length_limits() -> None:
    assert group_error("g" * GROUP_MAX_LENGTH) is None
    assert group_error("g" * (GROUP_MAX_LENGTH + 1)) is not None
    assert CONSUMER_GROUP_MAX_LENGTH == TOPIC_MAX_LENGTH - len("%RETRY%")
    assert consumer_group_error("g" * CONSUMER_GROUP_MAX_LENGTH) is None
    err = consumer_group_error("g" * (CONSUMER_GROUP_MAX_LENGTH + 1))
    assert err is not None and "retry topic" in err
    assert topic_error(names.retry_topic("g" * CONSUMER_GROUP_MAX_LENGTH)) is None
    assert topic_error(names.dlq_topic("g" * CONSUMER_GROUP_MAX_LENGTH)) is None


def test_store_topic_limit_is_one_path_component() -> None:
    assert store_topic_error("t" * PATH_NAME_MAX) is None
    assert store_topic_error("t" * (PATH_NAME_MAX + 1)) is not None


def test_send_refuses_the_auto_create_key_topic_only() -> None:
    assert topic_error("TBW102") is None
    assert "AUTO_CREATE_TOPIC_KEY_TOPIC" in (send_topic_error("TBW102") or "")
    assert send_topic_error("TBW1020") is None


def test_server_names() -> None:
    assert server_name_error("broker-a") is None and server_name_error("Default_Cluster1") is None
    assert server_name_error("b" * SERVER_NAME_MAX_LENGTH) is None
    assert server_name_error("b" * (SERVER_NAME_MAX_LENGTH + 1)) is not None
    for bad in ["", "a%b", "a|b", "a.b", "../b", "b\x00", "b\n"]:
        assert server_name_error(bad, "clusterName") is not None
    assert "clusterName" in (server_name_error("", "clusterName") or "")


def test_queue_ids() -> None:
    assert is_legal_queue_id(0) and is_legal_queue_id((1 << 31) - 1)
    assert not is_legal_queue_id(-1) and not is_legal_queue_id(1 << 31)
    assert not is_legal_queue_id("1") and not is_legal_queue_id(True)


def test_derived_group() -> None:
    assert names.derived_group("%RETRY%G") == "G" and names.derived_group("%DLQ%G") == "G"
    assert names.derived_group("T") is None
