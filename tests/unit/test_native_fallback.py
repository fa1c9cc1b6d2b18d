"""The C extension is optional: without it (not built, or ORBITMQ_PURE_PYTHON=1) every hot path binds its
pure-Python twin and the store still writes and reads records."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import orbitmq.base
from orbitmq.base import native


def test_speedups_is_none_when_disabled(monkeypatch) -> None:
    monkeypatch.setenv("ORBITMQ_PURE_PYTHON", "1")
    assert native.speedups() is None


def test_speedups_is_none_when_not_built(monkeypatch) -> None:
    monkeypatch.delenv("ORBITMQ_PURE_PYTHON", raising=False)
    monkeypatch.delattr(orbitmq.base, "_speedups", raising=False)  # as if it had never been imported
    monkeypatch.setitem(sys.modules, "orbitmq.base._speedups", None)  # import now raises ImportError
    assert native.speedups() is None


def test_stale_build_is_ignored(monkeypatch) -> None:
    class Stale:
        API_VERSION = native.API_VERSION - 1

    monkeypatch.delenv("ORBITMQ_PURE_PYTHON", raising=False)
    monkeypatch.setattr(orbitmq.base, "_speedups", Stale, raising=False)
    assert native.speedups() is None


def test_built_extension_matches_the_loader() -> None:
    ext = pytest.importorskip("orbitmq.base._speedups")
    assert ext.API_VERSION == native.API_VERSION  # else the build is silently unused: rebuild with pip install -e .


_PROBE = textwrap.dedent("""
    import asyncio, tempfile
    from orbitmq.model import properties, record, tags
    from orbitmq.store import MessageInner, MessageStore, StoreConfig
    assert tags.java_hash is tags.java_hash_py
    assert properties.decode_properties is properties.decode_properties_py
    assert record.encode_record_into is record.encode_record_into_py
    assert record.decode_record is record.decode_record_py
    assert record.iter_records is record.iter_records_py
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(d, mapped_file_size_commitlog=1 << 20, mapped_file_size_consume_queue=6000,
                                         max_hash_slot_num=100, max_index_num=400, max_message_size=64 * 1024))
        store.load()
        msg = MessageInner("T", 0, b"body", {"UNIQ_KEY": "K1", "TAGS": "a"}, 0, 0, 1, "127.0.0.1:1",
                           "127.0.0.1:10911", 0, 0)
        result, _ = store.put_messages_nowait([msg])
        got = record.decode_record(store.commitlog.read(result.phys_offset, result.wrote_bytes), check_crc=True)
        assert (got.topic, got.body, got.properties["UNIQ_KEY"], got.queue_offset) == ("T", b"body", "K1", 0)
        asyncio.run(store.shutdown())
    print("pure-ok")
""")


@pytest.mark.timeout(60)
def test_pure_python_twins_are_bound_and_work() -> None:
    env = dict(os.environ, ORBITMQ_PURE_PYTHON="1")
    p = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "pure-ok"
