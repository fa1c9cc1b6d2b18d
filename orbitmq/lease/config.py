"""LeaseConfig: the timing of one lease, validated so that the safety argument of docs/design/lease-election.md
holds (two renewal attempts and the margin fit into one TTL). Bad values raise ConfigError with one line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orbitmq.base.errors import ConfigError
from orbitmq.lease.url import LeaseUrl, parse_lease_url

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
MAX_NAME = 255
MIN_TTL_MS = 200


@dataclass(frozen=True)
class LeaseConfig:
    """`renew_interval_ms`, `margin_ms`, `db_timeout_ms`, `backoff_min_ms` and `backoff_max_ms` default (0) to:
    TTL/3, TTL/10, the renew interval, half the renew interval and the TTL."""
    url: str
    name: str
    ttl_ms: int = 6000
    renew_interval_ms: int = 0
    max_db_errors: int = 3
    margin_ms: int = 0
    db_timeout_ms: int = 0
    backoff_min_ms: int = 0
    backoff_max_ms: int = 0
    table: str = "orbitmq_lease"
    parsed_url: LeaseUrl = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        def bad(why: str) -> ConfigError:
            return ConfigError(f"lease {self.name!r}: {why}")

        for key in ("ttl_ms", "renew_interval_ms", "max_db_errors", "margin_ms", "db_timeout_ms",
                    "backoff_min_ms", "backoff_max_ms"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise bad(f"{key} must be a non-negative integer, got {value!r}")
        if not self.name or len(self.name) > MAX_NAME or not self.name.isprintable():
            raise ConfigError(f"lease name must be 1..{MAX_NAME} printable characters, got {self.name!r}")
        if not _IDENT.match(self.table):
            raise bad(f"table {self.table!r} is not a plain SQL identifier")
        if self.ttl_ms < MIN_TTL_MS:
            raise bad(f"ttl_ms {self.ttl_ms} is below {MIN_TTL_MS}")
        ttl = self.ttl_ms
        put("renew_interval_ms", self.renew_interval_ms or ttl // 3)
        put("margin_ms", self.margin_ms or max(ttl // 10, 1))
        put("db_timeout_ms", self.db_timeout_ms or self.renew_interval_ms)
        put("backoff_min_ms", self.backoff_min_ms or max(self.renew_interval_ms // 2, 1))
        put("backoff_max_ms", self.backoff_max_ms or ttl)
        if self.max_db_errors < 1:
            raise bad("max_db_errors must be at least 1")
        if 2 * self.renew_interval_ms + self.margin_ms >= ttl:
            raise bad(f"2 x renew interval ({self.renew_interval_ms} ms) + margin ({self.margin_ms} ms) must be "
                      f"below the TTL ({ttl} ms): a holder must get two renewal attempts before its lease ends")
        if self.db_timeout_ms >= ttl - self.margin_ms:
            raise bad(f"db_timeout_ms {self.db_timeout_ms} must be below TTL - margin ({ttl - self.margin_ms})")
        if self.backoff_min_ms > self.backoff_max_ms:
            raise bad(f"backoff_min_ms {self.backoff_min_ms} is above backoff_max_ms {self.backoff_max_ms}")
        put("parsed_url", parse_lease_url(self.url))
