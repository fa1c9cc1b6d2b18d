"""Lease store URLs and LeaseConfig: good values parse, bad ones raise ConfigError with one clear line that never
shows the password."""

from __future__ import annotations

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.lease import LeaseConfig, open_store, parse_lease_url
from orbitmq.lease.store import Candidate, decode_members, encode_members


def test_postgresql_url() -> None:
    u = parse_lease_url("postgresql://lease:s%40cret@db.example:6432/orbit")
    assert (u.kind, u.host, u.port, u.user, u.password, u.database) == (
        "postgresql", "db.example", 6432, "lease", "s@cret", "orbit")
    assert "s@cret" not in u.redacted() and u.redacted() == "postgresql://lease:***@db.example:6432/orbit"
    assert parse_lease_url("postgres://u@h/d").port == 5432


def test_mysql_and_mariadb_urls() -> None:
    for scheme in ("mysql", "mariadb", "MySQL"):
        u = parse_lease_url(f"{scheme}://u:p@127.0.0.1/db")
        assert (u.kind, u.port, u.database) == ("mysql", 3306, "db")


def test_sqlite_url() -> None:
    assert parse_lease_url("sqlite:///var/lib/orbit/lease.db").path == "/var/lib/orbit/lease.db"
    assert parse_lease_url("sqlite:////var/lib/orbit/lease.db").path == "/var/lib/orbit/lease.db"


@pytest.mark.parametrize("url,words", [
    ("", "empty"),
    ("127.0.0.1:5432/db", "scheme"),
    ("redis://u:p@h:1/d", "unknown scheme 'redis'"),
    ("postgresql://u:p@:5432/db", "no host"),
    ("postgresql://u:p@h:5432/", "no database"),
    ("postgresql://h:5432/db", "no user"),
    ("mysql://u:p@h:99999/db", "malformed"),
    ("mysql://u:p@h:port/db", "malformed"),
    ("postgresql://u:p@h/db?sslmode=require", "query parameters"),
    ("sqlite://host/x.db", "no host"),
    ("sqlite:///", "absolute file path"),
    ("sqlite://relative.db", "no host"),
])
def test_bad_urls_say_why_in_one_line(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_lease_url(url)
    msg = str(e.value)
    assert words in msg and "\n" not in msg
    assert ":p@" not in msg  # the password is never echoed


def test_open_store_picks_the_backend_without_connecting() -> None:
    assert type(open_store("postgresql://u:p@127.0.0.1:1/d")).__name__ == "PostgresLeaseStore"
    assert type(open_store("mysql://u:p@127.0.0.1:1/d")).__name__ == "MysqlLeaseStore"
    assert type(open_store("sqlite:///tmp/x.db")).__name__ == "SqliteLeaseStore"
    with pytest.raises(ConfigError):
        open_store("oracle://u:p@h/d")


def test_config_defaults() -> None:
    c = LeaseConfig(url="sqlite:///tmp/l.db", name="c/b")
    assert (c.ttl_ms, c.renew_interval_ms, c.margin_ms, c.max_db_errors, c.db_timeout_ms) == (6000, 2000, 600, 3,
                                                                                              2000)
    assert c.backoff_min_ms == 1000 and c.backoff_max_ms == 6000 and c.table == "orbitmq_lease"
    assert c.parsed_url.kind == "sqlite"


@pytest.mark.parametrize("kw,words", [
    ({"ttl_ms": 100}, "below 200"),
    ({"ttl_ms": 3000, "renew_interval_ms": 1500}, "two renewal attempts"),
    ({"ttl_ms": 3000, "renew_interval_ms": 1000, "margin_ms": 1000}, "two renewal attempts"),
    ({"max_db_errors": -1}, "non-negative"),
    ({"ttl_ms": "6000"}, "non-negative integer"),
    ({"db_timeout_ms": 5500}, "db_timeout_ms"),
    ({"backoff_min_ms": 500, "backoff_max_ms": 100}, "backoff_min_ms"),
    ({"table": "lease; drop"}, "identifier"),
    ({"name": ""}, "lease name"),
    ({"url": "nope"}, "scheme"),
])
def test_bad_config_one_line(kw: dict[str, object], words: str) -> None:
    args: dict[str, object] = {"url": "sqlite:///tmp/l.db", "name": "c/b", **kw}
    with pytest.raises(ConfigError) as e:
        LeaseConfig(**args)  # type: ignore[arg-type]
    assert words in str(e.value) and "\n" not in str(e.value)


def test_candidate_and_members_validation() -> None:
    with pytest.raises(ConfigError):
        Candidate("a,b:1", "h:2", "n")
    with pytest.raises(ConfigError):
        Candidate("a:1", "h:2", "x" * 65)
    assert encode_members(["a:1", "b:2", "a:1"]) == "a:1,b:2"
    assert decode_members("a:1,b:2") == ("a:1", "b:2") and decode_members("") == ()
    with pytest.raises(ValueError):
        encode_members(["a:1,b:2"])
