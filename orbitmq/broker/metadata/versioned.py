"""VersionedTable: what the topic and subscription-group tables share — a name → config table stamped with a
DataVersion, persisted atomically in RocketMQ's wrapper shape ({"dataVersion":…, "<tableKey>":{…}}), reloaded from
the file or its .bak, replaced wholesale by slave sync, and announced to a change callback."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import orjson

from orbitmq.base.fsio import atomic_write
from orbitmq.broker.metadata.data_version import DataVersion, load_config_file
from orbitmq.broker.metadata.quota import AutoCreateQuota

C = TypeVar("C")


class VersionedTable(Generic[C]):
    FILE_NAME: ClassVar[str]
    TABLE_KEY: ClassVar[str]  # "topicConfigTable" / "subscriptionGroupTable"

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, self.FILE_NAME)
        self._table: dict[str, C] = {}
        self.data_version = DataVersion()
        self.on_change: Callable[[], None] | None = None
        self.quota: AutoCreateQuota | None = None  # per-client cap on auto-creation (topics on send, groups)

    @property
    def path(self) -> str:
        return self._path

    def _decode(self, obj: Any) -> tuple[dict[str, C], DataVersion]:
        raise NotImplementedError

    def replace_all(self, table: dict[str, C], data_version: DataVersion) -> None:
        """Slave sync: adopt the master's table and version wholesale."""
        self._table = dict(table)
        self.data_version.assign(data_version)
        self.persist()

    def _changed(self) -> None:
        self.data_version.next_version()
        self.persist()
        if self.on_change is not None:
            self.on_change()

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_obj(),
            self.TABLE_KEY: {name: c.to_json_obj() for name, c in self._table.items()},  # type: ignore[attr-defined]
        }

    def encode(self, pretty: bool = False) -> bytes:
        return orjson.dumps(self.to_json_obj(), option=orjson.OPT_INDENT_2 if pretty else 0)

    def persist(self) -> None:
        atomic_write(self._path, self.encode(pretty=True))

    def load(self) -> None:
        """Merge the file (or its .bak) over the built-ins; ConfigError if both copies are corrupt."""
        loaded = load_config_file(self._path, self._decode)
        if loaded is None:
            return
        table, version = loaded
        self._table.update(table)
        self.data_version.assign(version)
