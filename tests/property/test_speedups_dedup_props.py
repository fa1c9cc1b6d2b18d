"""Hypothesis: the native de-dup loop (`_speedups.dedup_remember`, taken by DedupService.after_put_many) leaves the
native map (`DedupMap`) exactly as the pure-Python after_put_many_py leaves the Python map (`PyDedupMap`): the same
entries in the same order, the same positions (live and evicted), the same eviction and the same per-item errors, on
reads mixing the common stored single with everything the native loop hands back (other statuses, batches,
REAL_TOPIC, retry and skipped topics, re-put keys, non-ASCII fields, no store time, odd types) and with the Python
map's order log about to freeze a chunk."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.broker.config import BrokerConfig
from orbitmq.broker.services import BackgroundWrites
from orbitmq.broker.services import dedup as dedup_mod
from orbitmq.broker.services.dedup import CHUNK, DedupService, PyDedupMap
from orbitmq.protocol import RemotingCommand, RequestCode
from orbitmq.store import PutResult, PutStatus

native = pytest.importorskip("orbitmq.base._speedups")

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True, scope="module")
def _native_bound():
    """after_put_many calls the extension through a module global that dedup.py binds only when it uses the
    extension: bound here too, so the loops are compared under ORBITMQ_PURE_PYTHON=1 as well."""
    saved = dedup_mod._remember, dedup_mod._DedupMap
    dedup_mod._remember, dedup_mod._DedupMap = native.dedup_remember, native.DedupMap
    yield
    dedup_mod._remember, dedup_mod._DedupMap = saved


class _Clock:
    def now_ms(self) -> int:
        return NOW


class _Msg:
    __slots__ = ("topic", "queue_id", "properties", "reconsume_times")

    def __init__(self, topic: str, queue_id: Any, properties: Any, reconsume_times: Any) -> None:
        self.topic, self.queue_id, self.properties, self.reconsume_times = (topic, queue_id, properties,
                                                                            reconsume_times)


def _service(tmp: str, native_map: bool = True) -> DedupService:
    ctx = SimpleNamespace(config=BrokerConfig(), stats=SimpleNamespace(counters={}), role_listeners=[],
                          store_host="127.0.0.1:10911")
    env = SimpleNamespace(clock=_Clock(), config_dir=tmp, store_config=None, writes=BackgroundWrites())
    svc = DedupService(ctx, env)  # type: ignore[arg-type]
    svc.table.entries = native.DedupMap(seed=7) if native_map else PyDedupMap()
    return svc


@st.composite
def _item(draw: Any) -> tuple[RemotingCommand, list[Any], PutResult]:
    """Half of the items are the common stored single (only the key, group and numbers vary); the others vary
    one thing the native loop must hand back or skip, or several at random."""
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, None, b"b")
    req.ext_fields = {"a": draw(st.sampled_from(["PA", "PB"]))}
    props: dict[str, str] = {"UNIQ_KEY": draw(st.sampled_from(["U1", "U2", "U3", "U5", "U6"]))}
    topic, queue_id, reconsume, n = draw(st.sampled_from(["TopicA", "TopicB"])), draw(st.integers(0, 7)), 0, 1
    status, ids, ts = PutStatus.PUT_OK, ["0A000001000027AF0000000000000001"], draw(st.sampled_from([NOW - 5, NOW]))
    if draw(st.booleans()):
        for _ in range(draw(st.integers(1, 3))):
            what = draw(st.integers(0, 11))
            if what == 0:
                uniq = draw(st.one_of(st.none(), st.sampled_from(["Ü4", ""]), st.text(max_size=4)))
                if uniq is None:
                    props.pop("UNIQ_KEY", None)
                else:
                    props["UNIQ_KEY"] = uniq
            elif what == 1:
                props["REAL_TOPIC"] = draw(st.sampled_from(["TopicB", "%RETRY%G", "Tópico"]))
                props["REAL_QID"] = draw(st.sampled_from(["2", "x"]))
            elif what == 2:
                topic = draw(st.sampled_from(["%RETRY%G", "%DLQ%G", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "Tópico"]))
            elif what == 3:
                queue_id = draw(st.sampled_from([True, 2**70, -1]))
            elif what == 4:
                reconsume = draw(st.sampled_from([1, -1, 2**70]))
            elif what == 5:
                n = 2
            elif what == 6:
                status = draw(st.sampled_from([PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.MESSAGE_ILLEGAL]))
            elif what == 7:
                ids = draw(st.sampled_from([[], ["ÍD"], ["A", "B"]]))
            elif what == 8:
                ts = draw(st.sampled_from([0, NOW - 10**9]))
            elif what == 9:
                req.ext_fields = draw(st.one_of(
                    st.none(),
                    st.fixed_dictionaries({}, optional={"producerGroup": st.sampled_from(["PG", "", "Grüppe"]),
                                                        "a": st.sampled_from(["PA", "", "Grüppa"])})))
            elif what == 10:
                props["UNIQ_KEY"] = "U1"  # a key the table may hold already
            else:
                topic = "TopicA"
    msgs = [_Msg(topic, queue_id, props, reconsume) for _ in range(n)]
    return req, msgs, PutResult(status, 100, 10, list(ids), draw(st.integers(0, 10**12)), n, ts)


def _state(svc: DedupService) -> tuple[Any, ...]:
    t = svc.table
    return (list(t.entries.items()), t.entries.rows(0, t.position), len(t), t.evicted_position, t.position)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_item(), max_size=24), existing=st.lists(st.sampled_from(["U1", "U2"]), max_size=2),
       fill=st.sampled_from([0, CHUNK - 3, CHUNK - 1]))
def test_native_loop_leaves_the_table_as_the_python_loop(tmp_path_factory: Any, items: list[Any],
                                                         existing: list[str], fill: int) -> None:
    svcs = [_service(str(tmp_path_factory.mktemp("d")), native_map) for native_map in (True, False)]
    for svc in svcs:
        for k in existing:  # keys a read may put again
            svc.table.put(f"{k}\x1fTopicA", f"{NOW - 1}\x1f0\x1f0\x1fID\x1fPG")
        for i in range(fill):  # the order log close to freezing a chunk
            svc.table.put(f"F{i}\x1fTopicA", f"{NOW - 1}\x1f0\x1f{i}\x1fID\x1fPG")
    native_errs = svcs[0].after_put_many(None, items)
    py_errs = svcs[1].after_put_many_py(None, items)
    assert _state(svcs[0]) == _state(svcs[1])
    for text in (t for kv in svcs[0].table.entries.items() for t in kv):  # a str built natively is well-formed
        assert text.isascii() == all(ord(c) < 128 for c in text), repr(text)
    assert [type(e) for e in native_errs or []] == [type(e) for e in py_errs or []]


def test_the_native_loop_is_taken_and_stops_where_python_must_decide(tmp_path: Any) -> None:
    """dedup_remember itself: the common items in one call, and the index of the first item it hands back."""
    svc = _service(str(tmp_path))
    ok = PutResult(PutStatus.PUT_OK, 0, 10, ["ID1"], 7, 1, NOW)
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PA"}, b"b")
    plain = (req, [_Msg("TopicA", 3, {"UNIQ_KEY": "K1"}, 0)], ok)
    real = (req, [_Msg("TopicA", 3, {"UNIQ_KEY": "K2", "REAL_TOPIC": "TopicB"}, 0)], ok)
    k, ts = native.dedup_remember([plain, real, plain], 0, svc.table.entries, PutStatus.PUT_OK,
                                  ("%RETRY%", "%DLQ%"), frozenset())
    assert (k, ts) == (1, NOW)
    assert svc.table.entries.items() == [("K1\x1fTopicA", f"{NOW}\x1f3\x1f7\x1fID1\x1fPA")]
    assert svc.table.position == 1
    # a key already in the table is put again natively: it moves to the young end, its first position is stale
    assert native.dedup_remember([plain], 0, svc.table.entries, PutStatus.PUT_OK, ("%RETRY%",), frozenset()) == (1, NOW)
    assert svc.table.position == 2 and len(svc.table) == 1 and svc.table.rows(0, 1) == []
    with pytest.raises(TypeError):  # the native loop writes only into a native map
        native.dedup_remember([plain], 0, PyDedupMap(), PutStatus.PUT_OK, ("%RETRY%",), frozenset())
