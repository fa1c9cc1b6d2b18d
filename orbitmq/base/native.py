"""Loader of the optional C extension `orbitmq.base._speedups` (built from _speedups.c by `pip install`).

Each native function has a pure-Python twin next to its call site (the reference); callers take the native one
when `speedups()` returns the module and keep the Python one otherwise. ORBITMQ_PURE_PYTHON=1 forces the Python
twins (to compare, or to rule the extension out while debugging). `pip install -e .` (./dev) rebuilds it.
"""

from __future__ import annotations

import os
from types import ModuleType

API_VERSION = 10  # must equal the extension's API_VERSION (_speedups.c): an older build is ignored, not half-used


def speedups() -> ModuleType | None:
    """The extension module, or None when it was not built, is stale (another API_VERSION) or is disabled."""
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        return None
    try:
        from orbitmq.base import _speedups
    except ImportError:
        return None
    if getattr(_speedups, "API_VERSION", None) != API_VERSION:
        return None
    return _speedups
