"""Loader of the optional C extension `orbitmq.base._speedups` (built from _speedups.c by `pip install`).

Each native function has a pure-Python twin next to its call site (the reference); callers take the native one
when `speedups()` returns the module and keep the Python one otherwise. ORBITMQ_PURE_PYTHON=1 forces the Python
twins (to compare, or to rule the extension out while debugging).
"""

from __future__ import annotations

import os
from types import ModuleType


def speedups() -> ModuleType | None:
    """The extension module, or None when it was not built or is disabled."""
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        return None
    try:
        from orbitmq.base import _speedups
    except ImportError:
        return None
    return _speedups
