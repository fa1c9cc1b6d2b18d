"""The native parsers' cache of short strings (_speedups.small_ascii): header values and property names and values
that repeat are shared, and whatever the cache holds, every decoded string equals what the pure-Python decoders
give. Skipped when the extension was not built."""

from __future__ import annotations

import orjson
import pytest

from orbitmq.model.properties import decode_properties_py

native = pytest.importorskip("orbitmq.base._speedups")


def test_thousands_of_short_values_through_the_cache_decode_as_orjson() -> None:
    # far more distinct strings than cache slots: every slot is taken over many times, by values of the same length
    values = [f"v{i}" for i in range(5000)] + [f"{i:05d}" for i in range(2000)] + ["x" * n for n in range(30)]
    for i in range(0, len(values), 7):
        header = {"code": 310, "extFields": {chr(97 + k): v for k, v in enumerate(values[i:i + 7])}}
        raw = orjson.dumps(header)
        assert native.parse_json_header(raw) == orjson.loads(raw)


def test_property_names_and_values_decode_as_the_python_twin() -> None:
    for i in range(3000):
        text = f"UNIQ_KEY\x01{i:032X}\x02TAGS\x01t{i % 97}\x02K{i % 13}\x01{i}\x02WAIT\x01true"
        assert native.decode_properties(text) == decode_properties_py(text)


def test_a_repeated_short_value_is_one_shared_string_and_a_long_number_is_not_cached() -> None:
    raw = orjson.dumps({"code": 310, "extFields": {"b": "LoadTopic", "g": "1700000000000"}})
    a, b = native.parse_json_header(raw), native.parse_json_header(raw)
    assert a["extFields"]["b"] is b["extFields"]["b"]  # the topic: from the cache
    assert a["extFields"]["g"] == b["extFields"]["g"] == "1700000000000"
    assert a["extFields"]["g"] is not b["extFields"]["g"]  # a timestamp: new each time, it would push out others
    p, q = native.decode_properties("TAGS\x01TagA"), native.decode_properties("TAGS\x01TagA")
    assert next(iter(p)) is next(iter(q)) and p["TAGS"] is q["TAGS"]
