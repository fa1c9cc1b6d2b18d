"""base.properties: the one Java .properties parser behind broker.conf, namesrv.conf and controller.conf."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.base.properties import coerce_value, parse_properties


def test_separators_comments_and_line_numbers() -> None:
    text = "# comment\n! also\n\na=1\nb : 2\nc 3\n  d=\n"
    assert parse_properties(text) == [(4, "a", "1"), (5, "b", "2"), (6, "c", "3"), (7, "d", "")]


def test_continuation_and_escapes() -> None:
    text = "peers=n0-127.0.0.1:1;\\\n    n1-127.0.0.1:2\nkey\\=x=v\\tw\nu=\\u0041\nback=ends\\\\\nnext=1\n"
    assert parse_properties(text) == [
        (1, "peers", "n0-127.0.0.1:1;n1-127.0.0.1:2"),
        (3, "key=x", "v\tw"),
        (4, "u", "A"),
        (5, "back", "ends\\"),       # an even number of backslashes does not continue the line
        (6, "next", "1"),
    ]


def test_trailing_blanks_trimmed_leading_kept_after_separator_only() -> None:
    assert parse_properties("k =  v v  \n") == [(1, "k", "v v")]


def test_coerce_value() -> None:
    assert coerce_value("f", "k", "42", "int") == 42
    assert coerce_value("f", "k", "TRUE", "bool") is True
    assert coerce_value("f", "k", "x", "str") == "x"
    with pytest.raises(ConfigError, match="f: k: 'x' is not an integer"):
        coerce_value("f", "k", "x", "int")
    with pytest.raises(ConfigError, match="not a boolean"):
        coerce_value("f", "k", "yes", "bool")
