"""Store exceptions (faults, not outcomes: expected outcomes are PutStatus/GetStatus enums in results.py)."""

from __future__ import annotations

from orbitmq.base.errors import ConfigError, CorruptionError, StoreError


class StoreInUseError(StoreError):
    """Another process (or another MessageStore in this one) holds the store's lock file."""


__all__ = ["ConfigError", "CorruptionError", "StoreError", "StoreInUseError"]
