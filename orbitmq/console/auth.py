"""Console login: one user/password from the console config, a signed session cookie (HMAC-SHA256 over user and
expiry with a per-process secret, so a restart logs everyone out), constant-time comparisons."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

COOKIE_NAME = "orbitmq_console_session"


def _sign(secret: bytes, payload: str) -> str:
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


def check_password(expected_user: str, expected_password: str, user: str, password: str) -> bool:
    ok_user = hmac.compare_digest(expected_user.encode(), user.encode())
    ok_password = hmac.compare_digest(expected_password.encode(), password.encode())
    return ok_user and ok_password


def make_token(secret: bytes, user: str, ttl_s: int, now: float | None = None) -> str:
    expiry = int((time.time() if now is None else now) + ttl_s)
    payload = f"{user}\n{expiry}"
    raw = f"{payload}\n{_sign(secret, payload)}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def verify_token(secret: bytes, token: str | None, now: float | None = None) -> str | None:
    """The user a valid, unexpired token names; None otherwise."""
    if not token:
        return None
    try:
        user, expiry, sig = base64.urlsafe_b64decode(token.encode()).decode().split("\n")
        expires = int(expiry)
    except (ValueError, UnicodeDecodeError):
        return None
    if not hmac.compare_digest(_sign(secret, f"{user}\n{expiry}"), sig):
        return None
    if expires < (time.time() if now is None else now):
        return None
    return user
