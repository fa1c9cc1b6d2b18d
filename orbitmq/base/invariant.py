"""Always-on invariant checks: a broken invariant raises InvariantError (never stripped by -O)."""

from __future__ import annotations

from orbitmq.base.errors import InvariantError


def check(condition: bool, message: str = "invariant violated") -> None:
    if not condition:
        raise InvariantError(message)
