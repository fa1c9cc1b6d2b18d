"""SQL92 property filter: tokenizer, parser, evaluation semantics (RocketMQ SqlFilter subset), errors."""

from __future__ import annotations

import pytest

from orbitmq.broker.filter import FilterCache, entry_cost, record_filter_of
from orbitmq.broker.filter.sql92 import SqlParseError, compile_sql92, evaluate
from orbitmq.model.properties import encode_properties
from orbitmq.model.record import decode_record, encode_record, pack_host, read_properties_text

P = {"a": "5", "b": "hello", "c": "2.5", "flag": "true", "neg": "-3", "s": "abc", "n10": "10", "n9": "9"}


@pytest.mark.parametrize("expr, expected", [
    ("a = 5", True), ("a = 6", False), ("a <> 6", True), ("a <> 5", False), ("a != 5", False),
    ("a > 4", True), ("a > 5", False), ("a >= 5", True), ("a < 5", False), ("a <= 5", True),
    ("a = 5.0", True), ("c > 2", True), ("c < 2.6", True), ("neg < 0", True), ("a > -1", True),
    ("5 = a", True), ("4 < a", True), ("n10 > n9", True),  # numeric although '10' < '9' as strings
    ("b = 'hello'", True), ("b = 'Hello'", False), ("b <> 'x'", True), ("b > 'a'", True), ("b < 'a'", False),
    ("s = 'abc'", True), ("'abc' = s", True),
    ("flag = TRUE", True), ("flag = FALSE", False), ("flag <> false", True),
    ("TRUE", True), ("FALSE", False), ("NOT FALSE", True), ("true AND a = 5", True),
])
def test_comparisons(expr: str, expected: bool) -> None:
    assert evaluate(expr, P) is expected


@pytest.mark.parametrize("expr, expected", [
    ("a IN ('5', '6')", True), ("a IN ('6')", False), ("a NOT IN ('6', '7')", True), ("a NOT IN ('5')", False),
    ("b IN ('hello')", True), ("missing IN ('x')", False), ("missing NOT IN ('x')", False),
    ("a BETWEEN 1 AND 5", True), ("a BETWEEN 5 AND 5", True), ("a BETWEEN 6 AND 9", False),
    ("a NOT BETWEEN 6 AND 9", True), ("a NOT BETWEEN 1 AND 9", False), ("c BETWEEN 2.4 AND 2.6", True),
    ("neg BETWEEN -5 AND -1", True), ("b BETWEEN 1 AND 5", False), ("missing BETWEEN 1 AND 5", False),
    ("missing IS NULL", True), ("a IS NULL", False), ("a IS NOT NULL", True), ("missing IS NOT NULL", False),
    ("b CONTAINS 'ell'", True), ("b STARTSWITH 'he'", True), ("b ENDSWITH 'lo'", True),
    ("b NOT CONTAINS 'x'", True), ("b ENDSWITH 'x'", False),
])
def test_in_between_null(expr: str, expected: bool) -> None:
    assert evaluate(expr, P) is expected


@pytest.mark.parametrize("expr, expected", [
    ("missing = 1", False), ("missing <> 1", False), ("missing > 1", False), ("missing = 'x'", False),
    ("NOT (missing = 1)", False),  # unknown stays unknown under NOT
    ("missing = 1 OR a = 5", True), ("a = 5 OR missing = 1", True), ("missing = 1 AND a = 5", False),
    ("a = NULL", False), ("b = 5", False),
])
def test_missing_property_is_unknown(expr: str, expected: bool) -> None:
    assert evaluate(expr, P) is expected


@pytest.mark.parametrize("expr, expected", [
    ("a = 1 OR a = 5 AND b = 'x'", False),        # AND binds tighter: a=1 OR (a=5 AND b='x')
    ("(a = 1 OR a = 5) AND b = 'hello'", True),
    ("a = 5 OR a = 1 AND b = 'x'", True),
    ("NOT a = 1 AND b = 'hello'", True),          # NOT binds tighter than AND
    ("NOT (a = 5 AND b = 'hello')", False),
    ("NOT NOT a = 5", True),
    ("a = 5 AND (b = 'x' OR (c > 2 AND NOT flag = false))", True),
    ("((((a = 5))))", True),
    ("a BETWEEN 1 AND 9 AND b = 'hello'", True),  # the BETWEEN's AND is not the logical AND
    ("a BETWEEN 1 AND 4 OR b = 'hello'", True),
    ("a between 1 and 9 and B = 'x'", False),     # keywords are case-insensitive, property names are not
])
def test_precedence(expr: str, expected: bool) -> None:
    assert evaluate(expr, P) is expected


def test_strings_and_literals() -> None:
    props = {"q": "it's", "e": "", "sp": "a b", "big": "12345678901234", "f": "1e3", "x.y": "1", "_k$": "2"}
    assert evaluate("q = 'it''s'", props)
    assert evaluate("e = ''", props)
    assert evaluate("sp = 'a b'", props)
    assert evaluate("big > 12345678901233", props)
    assert evaluate("f = 1000", props)
    assert evaluate("x.y = 1 AND _k$ = 2", props)
    assert evaluate("q <> 'x' AND q IN ('it''s', 'b')", props)
    assert not evaluate("sp = 'a  b'", props)


@pytest.mark.parametrize("expr", [
    "", "   ", "a", "a =", "= 5", "a = 5 AND", "a = 5 OR OR b = 1", "(a = 5", "a = 5)", "a IN ()",
    "a IN (1, 2)", "a IN 'x'", "a BETWEEN 1", "a BETWEEN 'x' AND 'y'", "a BETWEEN 1 OR 2", "a IS 5",
    "a IS NOT 5", "a = 'unterminated", "a = 5 b = 6", "a # 5", "a NOT 5", "a = 1 - 2", "AND = 1",
    "a CONTAINS 5", "a = b = c",
])
def test_parse_errors(expr: str) -> None:
    with pytest.raises(SqlParseError) as ei:
        compile_sql92(expr)
    assert str(ei.value)


def test_parse_error_message_says_where() -> None:
    with pytest.raises(SqlParseError, match="position 6"):
        compile_sql92("a = 5 b")


def _record(props: dict[str, str], body: bytes = b"body") -> bytes:
    return encode_record(topic=b"T", body=body, properties=encode_properties(props).encode(), queue_id=1, flag=0,
                         sys_flag=0, born_timestamp=1, born_host=pack_host("127.0.0.1", 1),
                         store_host=pack_host("::1", 2))


def test_read_properties_text_matches_decode() -> None:
    for props in ({}, {"a": "1"}, {"a": "1", "UNIQ_KEY": "K", "TAGS": "x"}):
        for body in (b"", b"x" * 1000):
            rec = _record(props, body)
            text = read_properties_text(memoryview(b"pad" + rec), 3)
            assert text == encode_properties(decode_record(rec).properties)
    with pytest.raises(ValueError):
        read_properties_text(_record({"a": "1"})[:-3])


def test_record_filter_and_cache() -> None:
    f = record_filter_of(compile_sql92("a > 3 AND b IS NOT NULL"))
    assert f(memoryview(_record({"a": "4", "b": "x"})))
    assert not f(memoryview(_record({"a": "4"})))
    assert not f(memoryview(_record({"a": "2", "b": "x"})))
    cache = FilterCache(max_bytes=2 * entry_cost("G", "T2", "a = 1") + 10)
    g1 = cache.get("G", "T", "a = 1")
    assert cache.get("G", "T", "a = 1") is g1
    cache.get("G", "T2", "a = 1")
    cache.get("G", "T3", "a = 1")
    assert len(cache) <= 2
    with pytest.raises(SqlParseError):
        cache.get("G", "T", "a = ")
