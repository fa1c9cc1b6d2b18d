"""Namespaced key/value config of the name server (RocketMQ KVConfigManager), persisted as kvConfig.json.

File format (Java's): {"configTable":{"<namespace>":{"<key>":"<value>"}}}. Every change is written with
base.fsio.atomic_write; loading falls back to the .bak copy when the file is torn or unreadable.
"""

from __future__ import annotations

import logging
import os

import orjson

from orbitmq.base.errors import ConfigError
from orbitmq.base.fsio import atomic_write, read_with_backup

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KvConfig:
    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        """`path=None` keeps the table in memory only (tests)."""
        self.path = None if path is None else os.fspath(path)
        self._table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Load the newest readable copy; a missing file is an empty table. Unreadable copies → ConfigError."""
        if self.path is None:
            return
        candidates = read_with_backup(self.path)
        if not candidates:
            return
        errors = []
        for raw in candidates:
            try:
                self._table = _decode(raw)
                return
            except (ValueError, TypeError, AttributeError) as e:
                errors.append(str(e))
                log.warning("kv config %s unreadable (%s), trying backup", self.path, e)
        raise ConfigError(f"kv config {self.path} is corrupt: {'; '.join(errors)}")

    def put(self, namespace: str, key: str, value: str) -> None:
        ns = self._table.setdefault(namespace, {})
        if ns.get(key) == value:
            return
        ns[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        ns = self._table.get(namespace)
        return None if ns is None else ns.get(key)

    def delete(self, namespace: str, key: str) -> bool:
        ns = self._table.get(namespace)
        if ns is None or key not in ns:
            return False
        del ns[key]
        if not ns:
            del self._table[namespace]
        self._persist()
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace, or None when it does not exist."""
        ns = self._table.get(namespace)
        return None if ns is None else dict(ns)

    def _persist(self) -> None:
        if self.path is None:
            return
        atomic_write(self.path, orjson.dumps({"configTable": self._table}, option=orjson.OPT_SORT_KEYS))


def _decode(raw: bytes) -> dict[str, dict[str, str]]:
    if not raw.strip():
        return {}
    obj = orjson.loads(raw)
    table = obj.get("configTable") or {}
    out: dict[str, dict[str, str]] = {}
    for ns, kv in table.items():
        out[str(ns)] = {str(k): str(v) for k, v in (kv or {}).items()}
    return out
