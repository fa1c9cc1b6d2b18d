"""Master election by a lease row in a SQL database (PostgreSQL, MySQL/MariaDB, sqlite), with a fencing epoch.

    store = open_store(cfg.url, table=cfg.table, timeout_ms=cfg.db_timeout_ms)
    elector = LeaseElector(store, cfg, Candidate(addr, ha_addr, nonce))
    await elector.start()        # LeaseStoreError (one line) if the database cannot be used
    elector.may_acknowledge()    # gate every acknowledgement on it

Design: docs/design/lease-election.md. Drivers are imported only when a store connects, so code that never uses
lease election never loads them. This package imports nothing above orbitmq.base.
"""

from __future__ import annotations

from orbitmq.base.errors import ConfigError
from orbitmq.lease.config import LeaseConfig
from orbitmq.lease.elector import LeaseElector, LeaseState, LeaseView
from orbitmq.lease.errors import LeaseStoreError
from orbitmq.lease.store import ACTIVE, CHALLENGE, Candidate, LeaseRow, LeaseStore
from orbitmq.lease.url import LeaseUrl, parse_lease_url

__all__ = [
    "ACTIVE", "CHALLENGE", "Candidate", "ConfigError", "LeaseConfig", "LeaseElector", "LeaseRow", "LeaseState",
    "LeaseStore", "LeaseStoreError", "LeaseUrl", "LeaseView", "open_config_store", "open_store", "parse_lease_url",
]


def open_store(url: str, *, table: str = "orbitmq_lease", timeout_ms: int = 2000) -> LeaseStore:
    """The store for `url`, by scheme (postgresql / mysql / sqlite); ConfigError (one line) for a bad URL. Nothing
    connects until `open()` (LeaseElector.start does it)."""
    parsed = parse_lease_url(url)
    if parsed.kind == "postgresql":
        from orbitmq.lease.store_postgres import PostgresLeaseStore
        return PostgresLeaseStore(parsed, table=table, timeout_ms=timeout_ms)
    if parsed.kind == "mysql":
        from orbitmq.lease.store_mysql import MysqlLeaseStore
        return MysqlLeaseStore(parsed, table=table, timeout_ms=timeout_ms)
    from orbitmq.lease.store_sqlite import SqliteLeaseStore
    return SqliteLeaseStore(parsed, table=table, timeout_ms=timeout_ms)


def open_config_store(cfg: LeaseConfig) -> LeaseStore:
    """open_store with the table and statement timeout of `cfg`."""
    return open_store(cfg.url, table=cfg.table, timeout_ms=cfg.db_timeout_ms)
