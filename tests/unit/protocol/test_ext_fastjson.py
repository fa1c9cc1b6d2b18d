"""extFields helpers (Java parsing rules, V2 send header names) and fastjson quirk handling."""

import pytest

from orbitmq.base.errors import ProtocolError
from orbitmq.model import MessageQueue
from orbitmq.protocol import (
    HeaderError,
    ext_bool,
    ext_int,
    ext_str,
    fastjson,
    normalize_send_header,
    to_send_v2,
)


def test_ext_str_required_and_default():
    ext = {"topic": "T"}
    assert ext_str(ext, "topic") == "T"
    assert ext_str(ext, "nope", None) is None
    with pytest.raises(HeaderError, match="topic"):
        ext_str({}, "topic")
    with pytest.raises(HeaderError):
        ext_str(None, "topic")


def test_ext_int_parses_decimal_and_handles_failures():
    assert ext_int({"q": "12"}, "q") == 12
    assert ext_int({"q": "-3"}, "q") == -3
    assert ext_int({"q": "9223372036854775807"}, "q") == 2**63 - 1
    assert ext_int({"q": "x"}, "q", 7) == 7  # parse failure leaves the field unset
    with pytest.raises(HeaderError):
        ext_int({"q": "x"}, "q")
    with pytest.raises(HeaderError):
        ext_int({}, "q")


@pytest.mark.parametrize("raw,expected", [("true", True), ("TRUE", True), ("True", True), ("1", False),
                                          ("yes", False), ("false", False), ("", False)])
def test_ext_bool_is_java_parse_boolean(raw, expected):
    assert ext_bool({"b": raw}, "b") is expected


def test_ext_bool_missing():
    assert ext_bool({}, "b", False) is False
    with pytest.raises(HeaderError):
        ext_bool({}, "b")


def test_normalize_send_header_maps_v2_letters():
    v2 = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "17", "h": "0", "i": "p",
          "j": "0", "k": "false", "l": "16", "m": "true", "n": "broker-a", "extra": "x"}
    v1 = normalize_send_header(v2)
    assert v1 == {"producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                  "queueId": "1", "sysFlag": "0", "bornTimestamp": "17", "flag": "0", "properties": "p",
                  "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16", "batch": "true",
                  "bname": "broker-a", "extra": "x"}
    assert normalize_send_header(v1) == v1
    assert to_send_v2(v1) == v2
    assert normalize_send_header(None) == {}


def test_dumps_unquoted_int_keys_and_standard_form():
    obj = {"offsetTable": {"T@G": {0: 12, 1: 7}}}
    assert fastjson.dumps(obj) == b'{"offsetTable":{"T@G":{0:12,1:7}}}'
    assert fastjson.dumps(obj, standard=True) == b'{"offsetTable":{"T@G":{"0":12,"1":7}}}'
    assert fastjson.dumps({"offsetTable": {1: 0, 2: 15}}) == b'{"offsetTable":{1:0,2:15}}'


def test_dumps_message_queue_keys_as_objects():
    obj = {"offsetTable": {MessageQueue("T", "b", 0): 100, MessageQueue("T", "b", 1): 7}}
    assert fastjson.dumps(obj) == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100,'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}'
    )


def test_dumps_plain_json_fast_path_and_values():
    assert fastjson.dumps({"a": [1, "x", None, True], "mq": MessageQueue("T", "b", 2)}) == (
        b'{"a":[1,"x",null,true],"mq":{"brokerName":"b","queueId":2,"topic":"T"}}'
    )


def test_loads_go_test_vector_and_other_forms():
    v = fastjson.loads(b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100,'
                       b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}')
    assert v == {"offsetTable": {MessageQueue("T", "b", 0): 100, MessageQueue("T", "b", 1): 7}}
    assert fastjson.loads(b'{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}') == {
        "brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}}
    assert fastjson.loads(b'{"a":{"0":1}}') == {"a": {"0": 1}}
    assert fastjson.loads('{ 1 : -2.5e1 , "s":"x\\u0001y", "l":[ ], "o":{ } , "n":null}') == {
        1: -25.0, "s": "x\x01y", "l": [], "o": {}, "n": None}
    # a non-MessageQueue object key becomes a hashable tuple
    assert fastjson.loads(b'{{"x":1}:2}') == {(("x", 1),): 2}


@pytest.mark.parametrize("bad", [b"{0:}", b'{"a" 1}', b"[1,", b'{"a":1}x', b"{0:1,}", b"\xff{"])
def test_loads_rejects_malformed(bad):
    with pytest.raises(ProtocolError):
        fastjson.loads(bad)
