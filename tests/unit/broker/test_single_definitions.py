"""Issue 18 item 6: the stored-put statuses and the delay-level parser have one definition each, and a broker
handler module that fails to import stops start-up with a one-line error instead of vanishing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker import app
from orbitmq.broker.handlers.send import SendProcessor
from orbitmq.store import STORED_STATUSES, PutStatus
from orbitmq.store.schedule import DEFAULT_DELAY_LEVELS

PKG = Path(__file__).resolve().parents[3] / "orbitmq"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PKG)): p.read_text(encoding="utf-8") for p in PKG.rglob("*.py")}


def test_stored_statuses_defined_once() -> None:
    pattern = re.compile(r"frozenset\(\{\s*PutStatus\.PUT_OK")
    where = sorted(name for name, text in _sources().items() if pattern.search(text))
    assert where == ["store/results.py"]
    assert STORED_STATUSES == {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                               PutStatus.SLAVE_NOT_AVAILABLE}


def test_parse_delay_levels_defined_once() -> None:
    where = sorted(name for name, text in _sources().items() if re.search(r"^def parse_delay_levels\b", text, re.M))
    assert where == ["store/schedule.py"]


def test_send_processor_counts_levels_from_the_schedule_parser() -> None:
    class _Cfg:
        message_delay_level = DEFAULT_DELAY_LEVELS

    class _Ctx:
        config = _Cfg()

    assert SendProcessor(_Ctx())._max_delay_level == 18  # type: ignore[arg-type]


def test_every_handler_module_imports() -> None:
    mods = app._handler_modules()
    assert [m.__name__.rsplit(".", 1)[1] for m in mods] == list(app.HANDLER_MODULES)


@pytest.mark.parametrize("name", app.HANDLER_MODULES)
def test_handler_module_that_fails_to_import_stops_startup(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = f"orbitmq.broker.handlers.{name}"
    monkeypatch.setitem(sys.modules, path, None)  # the import system then raises ModuleNotFoundError for it
    with pytest.raises(ConfigError) as err:
        app._handler_modules()
    msg = str(err.value)
    assert path in msg and "failed to import" in msg and "\n" not in msg
