"""Parse a lease store URL: `postgresql://user:pass@host:port/db`, `mysql://user:pass@host:port/db` (MySQL or
MariaDB) or `sqlite:///absolute/path`. A bad URL raises ConfigError with one line that says what is wrong; the
password never appears in a message (`LeaseUrl.redacted()`)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from orbitmq.base.errors import ConfigError

SCHEMES = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql", "mariadb": "mysql",
           "sqlite": "sqlite"}
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


@dataclass(frozen=True)
class LeaseUrl:
    kind: str  # "postgresql" | "mysql" | "sqlite"
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = ""
    database: str = ""
    path: str = ""  # sqlite only

    def redacted(self) -> str:
        """The URL for messages and logs: the password replaced by ***."""
        if self.kind == "sqlite":
            return f"sqlite://{self.path}"
        cred = f"{self.user}:***@" if self.password else (f"{self.user}@" if self.user else "")
        return f"{self.kind}://{cred}{self.host}:{self.port}/{self.database}"


def parse_lease_url(url: str) -> LeaseUrl:
    def bad(why: str) -> ConfigError:
        shown = url.split("@", 1)[-1] if "@" in url else url  # never echo credentials
        return ConfigError(f"leaseStoreUrl {shown!r}: {why}")

    if not isinstance(url, str) or not url.strip():
        raise ConfigError("leaseStoreUrl is empty: expected postgresql://, mysql:// or sqlite:///path")
    url = url.strip()
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise bad("expected scheme://..., e.g. postgresql://user:pass@host:5432/db")
    kind = SCHEMES.get(scheme.lower())
    if kind is None:
        raise bad(f"unknown scheme {scheme!r} (use postgresql, mysql or sqlite)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise bad(f"malformed ({e})") from None
    if parts.query or parts.fragment:
        raise bad("query parameters and fragments are not supported")
    if kind == "sqlite":
        if parts.netloc:
            raise bad("sqlite URLs have no host: use sqlite:///absolute/path")
        path = unquote(parts.path)
        if not path.startswith("/") or path.endswith("/") or path == "/":
            raise bad("sqlite needs an absolute file path: sqlite:///absolute/path")
        path = "/" + path.lstrip("/")  # sqlite:////abs (SQLAlchemy's spelling) is the same file
        return LeaseUrl(kind="sqlite", path=path)
    host = parts.hostname or ""
    if not host:
        raise bad("no host")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise bad("no database name (…@host:port/DATABASE)")
    user = unquote(parts.username or "")
    if not user:
        raise bad("no user (scheme://USER:password@host:port/db)")
    if port is not None and not 0 < port < 65536:
        raise bad(f"port {port} out of range")
    return LeaseUrl(kind=kind, host=host, port=port or DEFAULT_PORTS[kind], user=user,
                    password=unquote(parts.password or ""), database=database)
