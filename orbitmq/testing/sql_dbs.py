"""Real SQL databases for tests: make sure the local PostgreSQL and MariaDB are running (start them with the
system's scripts if not; we are root), create a throw-away database and a password-protected user for one test
session, drop them afterwards. Anything that cannot be done raises SqlDbUnavailable with ONE clear line: the
tests that need a database fail with it, they never skip.

PostgreSQL on this machine trusts local connections; so that a wrong password is refused, the users made here
belong to the role `orbitmq_test_pw`, for which a `scram-sha-256` line is put first in pg_hba.conf (once; it
concerns no other user). `db_proxy()` puts a fault-injecting TcpProxy (orbitmq/testing/tcp_proxy.py, raw bytes)
in front of a database and returns the proxied URL.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from orbitmq.testing.tcp_proxy import TcpProxy

LOCALHOST = "127.0.0.1"
PG_PORT = 5432
MYSQL_PORT = 3306
PW_ROLE = "orbitmq_test_pw"
HBA_LINE = f"host all +{PW_ROLE} {LOCALHOST}/32 scram-sha-256"
START_TIMEOUT_S = 60.0


class SqlDbUnavailable(RuntimeError):
    """A database the tests need could not be started or prepared (one line: what and why)."""


@dataclass(frozen=True)
class SqlDb:
    kind: str  # "postgresql" | "mysql"
    host: str
    port: int
    user: str
    password: str
    database: str

    @property
    def url(self) -> str:
        return self.url_with()

    def url_with(self, *, host: str | None = None, port: int | None = None, password: str | None = None,
                 database: str | None = None) -> str:
        return (f"{self.kind}://{self.user}:{self.password if password is None else password}@"
                f"{host or self.host}:{port or self.port}/{database or self.database}")


def _port_open(port: int, host: str = LOCALHOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run(argv: list[str], what: str, timeout: float = 60.0, input_text: str | None = None) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input_text)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SqlDbUnavailable(f"{what}: {' '.join(argv[:3])} failed: {e}") from None
    if p.returncode != 0:
        err = " ".join((p.stderr or p.stdout).split())[:300]
        raise SqlDbUnavailable(f"{what}: {' '.join(argv[:3])} exited {p.returncode}: {err}")
    return p.stdout


def _wait_port(port: int, what: str, started: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _port_open(port):
            return
        time.sleep(0.2)
    raise SqlDbUnavailable(f"{what} is not listening on {LOCALHOST}:{port} {START_TIMEOUT_S:.0f} s after {started}")


# ---- PostgreSQL ---------------------------------------------------------------------------------------------
def _psql(sql: str, what: str, db: str = "postgres") -> str:
    if shutil.which("psql") is None or shutil.which("runuser") is None:
        raise SqlDbUnavailable(f"{what}: psql/runuser not found (install postgresql and util-linux)")
    return _run(["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db,
                 "-c", sql], what)


def ensure_postgres() -> None:
    """PostgreSQL listens on 127.0.0.1:5432 (started with pg_ctlcluster / service if it was down)."""
    if not _port_open(PG_PORT):
        if shutil.which("pg_lsclusters") and shutil.which("pg_ctlcluster"):
            clusters = _run(["pg_lsclusters", "--no-header"], "PostgreSQL").split("\n")
            for line in clusters:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == str(PG_PORT):
                    _run(["pg_ctlcluster", parts[0], parts[1], "start"], "starting PostgreSQL")
                    break
            else:
                raise SqlDbUnavailable(f"PostgreSQL: no cluster on port {PG_PORT} in pg_lsclusters")
        elif shutil.which("service"):
            _run(["service", "postgresql", "start"], "starting PostgreSQL")
        else:
            raise SqlDbUnavailable("PostgreSQL is not running and neither pg_ctlcluster nor service is installed")
        _wait_port(PG_PORT, "PostgreSQL", "start")
    _ensure_pg_password_auth()


def _ensure_pg_password_auth() -> None:
    what = "PostgreSQL password auth for test users"
    _psql(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{PW_ROLE}') "
          f"THEN CREATE ROLE {PW_ROLE} NOLOGIN; END IF; END$$", what)
    hba = Path(_psql("SHOW hba_file", what).strip())
    try:
        text = hba.read_text(encoding="utf-8")
    except OSError as e:
        raise SqlDbUnavailable(f"{what}: cannot read {hba}: {e}") from None
    if HBA_LINE in text:
        return
    lines = text.splitlines(keepends=True)
    first = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), len(lines))
    lines.insert(first, f"# OrbitMQ tests (orbitmq/testing/sql_dbs.py): users of role {PW_ROLE} need a password\n"
                        f"{HBA_LINE}\n")
    try:
        hba.write_text("".join(lines), encoding="utf-8")
    except OSError as e:
        raise SqlDbUnavailable(f"{what}: cannot write {hba}: {e}") from None
    _psql("SELECT pg_reload_conf()", what)


def create_postgres_db() -> SqlDb:
    ensure_postgres()
    tag = secrets.token_hex(4)
    user, db, pw = f"orbitmq_t_{tag}", f"orbitmq_t_{tag}", secrets.token_hex(12)
    _psql(f"CREATE ROLE {user} LOGIN PASSWORD '{pw}' IN ROLE {PW_ROLE}", "PostgreSQL: creating the test user")
    _psql(f"CREATE DATABASE {db} OWNER {user}", "PostgreSQL: creating the test database")
    return SqlDb("postgresql", LOCALHOST, PG_PORT, user, pw, db)


def drop_postgres_db(db: SqlDb) -> None:
    _psql(f"DROP DATABASE IF EXISTS {db.database} WITH (FORCE)", "PostgreSQL: dropping the test database")
    _psql(f"DROP ROLE IF EXISTS {db.user}", "PostgreSQL: dropping the test user")


# ---- MariaDB / MySQL ----------------------------------------------------------------------------------------
def _mysql(sql: str, what: str) -> str:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        raise SqlDbUnavailable(f"{what}: no mariadb/mysql client found (install mariadb-client)")
    return _run([client, "-u", "root", "--batch", "--skip-column-names", "-e", sql], what)


def ensure_mariadb() -> None:
    """MariaDB (or MySQL) listens on 127.0.0.1:3306 (started with service / mysqld_safe if it was down)."""
    if _port_open(MYSQL_PORT):
        return
    if shutil.which("service") and Path("/etc/init.d/mariadb").exists():
        _run(["service", "mariadb", "start"], "starting MariaDB", timeout=120)
    elif shutil.which("service") and Path("/etc/init.d/mysql").exists():
        _run(["service", "mysql", "start"], "starting MySQL", timeout=120)
    elif shutil.which("mysqld_safe"):
        subprocess.Popen(["mysqld_safe"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    else:
        raise SqlDbUnavailable("MariaDB is not running and neither its service script nor mysqld_safe is installed")
    _wait_port(MYSQL_PORT, "MariaDB", "start")


def create_mariadb_db() -> SqlDb:
    ensure_mariadb()
    tag = secrets.token_hex(4)
    user, db, pw = f"orbitmq_t_{tag}", f"orbitmq_t_{tag}", secrets.token_hex(12)
    _mysql(f"CREATE DATABASE `{db}`; "
           f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{pw}'; "
           f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{pw}'; "
           f"GRANT ALL ON `{db}`.* TO '{user}'@'127.0.0.1'; GRANT ALL ON `{db}`.* TO '{user}'@'localhost';",
           "MariaDB: creating the test database and user")
    return SqlDb("mysql", LOCALHOST, MYSQL_PORT, user, pw, db)


def drop_mariadb_db(db: SqlDb) -> None:
    _mysql(f"DROP DATABASE IF EXISTS `{db.database}`; DROP USER IF EXISTS '{db.user}'@'127.0.0.1'; "
           f"DROP USER IF EXISTS '{db.user}'@'localhost';", "MariaDB: dropping the test database")


def create_db(kind: str) -> SqlDb:
    return create_postgres_db() if kind == "postgresql" else create_mariadb_db()


def drop_db(db: SqlDb) -> None:
    (drop_postgres_db if db.kind == "postgresql" else drop_mariadb_db)(db)


# ---- faults -------------------------------------------------------------------------------------------------
async def db_proxy(db: SqlDb) -> tuple[TcpProxy, str]:
    """A started raw-byte TcpProxy in front of `db` and the URL that goes through it. `await proxy.block()` makes
    the database unreachable (live connections cut, new ones refused), `await proxy.unblock()` heals; close it
    with `await proxy.close()`."""
    proxy = await TcpProxy(f"{db.host}:{db.port}", frames=False, name=f"{db.kind}-proxy").start()
    return proxy, db.url_with(port=proxy.port)
