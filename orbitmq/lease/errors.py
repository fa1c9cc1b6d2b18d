"""Errors of the lease library. ConfigError (orbitmq.base.errors) covers bad settings and URLs."""

from __future__ import annotations

from orbitmq.base.errors import OrbitMQError


class LeaseStoreError(OrbitMQError):
    """The lease database could not be reached or refused a statement. The message is one line, names the
    database (never the password) and says why."""


def one_line(text: object) -> str:
    """A driver's message squeezed onto one line (drivers like multi-line DETAIL/HINT texts)."""
    return " ".join(str(text).split()) or type(text).__name__
