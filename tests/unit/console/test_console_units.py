"""Console pieces without a broker: console.yml / env / option precedence and refusals, the session token, the TPS
sampler, the API's input errors (aiohttp test client on the real app with a service that must not be reached)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from orbitmq.base.errors import ConfigError
from orbitmq.console import auth
from orbitmq.console.config import ConsoleConfig, load_config
from orbitmq.console.server import make_app, parse_time
from orbitmq.console.service import TpsSampler, topic_kind


def test_config_file_then_env_then_options(tmp_path: Path) -> None:
    conf = tmp_path / "console.yml"
    conf.write_text("namesrv: [10.0.0.1:9876, 10.0.0.2:9876]\nport: 9090\ncontrollers: 10.0.0.9:9878\n"
                    "login: {username: ops, password: from-file}\nacl: {accessKey: ak, secretKey: sk-file}\n",
                    encoding="utf-8")
    cfg = load_config(conf, env={"ORBITMQ_CONSOLE_PASSWORD": "from-env", "ORBITMQ_CONSOLE_SECRET_KEY": "sk-env"},
                      port=8181, host=None)
    assert cfg.namesrv == "10.0.0.1:9876;10.0.0.2:9876"
    assert (cfg.port, cfg.host, cfg.controllers) == (8181, "127.0.0.1", ["10.0.0.9:9878"])
    assert (cfg.username, cfg.password) == ("ops", "from-env")
    assert (cfg.access_key, cfg.secret_key) == ("ak", "sk-env")
    assert cfg.login_required and cfg.acl_enabled


@pytest.mark.parametrize(("text", "message"), [
    ("nameserver: x:1\n", "unknown console config key(s): nameserver"),
    ("login: {username: ops}\n", "both a username and a non-empty password"),
    ("login: {user: ops, password: x}\n", "login: unknown key(s) user"),
    ("acl: {accessKey: ak, secretKey: sk}\n", "must ask for a login"),
    ("acl: {accessKey: ak}\nlogin: {username: a, password: b}\n", "both accessKey and secretKey"),
    ("port: http\n", "port: 'http' is not a number"),
    ("port: 70000\n", "not a TCP port"),
    ("- a\n- b\n", "expected a mapping"),
    ("login: [\n", "not valid YAML"),
])
def test_config_refusals(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "console.yml"
    conf.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(conf, env={})
    assert message in str(err.value)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "absent.yml", env={})


def test_session_token_round_trip_expiry_and_tampering() -> None:
    secret = b"k" * 32
    token = auth.make_token(secret, "ops", 60, now=1000.0)
    assert auth.verify_token(secret, token, now=1059.0) == "ops"
    assert auth.verify_token(secret, token, now=1061.0) is None  # expired
    assert auth.verify_token(b"x" * 32, token, now=1000.0) is None  # another console's secret
    forged = auth.make_token(b"x" * 32, "admin", 60, now=1000.0)
    assert auth.verify_token(secret, forged, now=1000.0) is None
    assert auth.verify_token(secret, "not-base64!", now=1000.0) is None
    assert auth.verify_token(secret, None) is None
    assert auth.check_password("ops", "pw", "ops", "pw")
    assert not auth.check_password("ops", "pw", "ops", "pw2")
    assert not auth.check_password("ops", "pw", "op", "pw")


def test_tps_sampler_series_and_watch_expiry() -> None:
    s = TpsSampler(keep=3, watch_s=10.0)
    s.record("T", 100, at_ms=1000)
    s.record("T", 100, at_ms=1000)  # same instant: ignored
    s.record("T", 150, at_ms=2000)
    s.record("T", 250, at_ms=2500)
    s.record("T", 10, at_ms=3500)  # topic recreated: never negative
    assert s.series("T") == [{"t": 2500, "tps": 200.0}, {"t": 3500, "tps": 0.0}]  # keep=3 samples
    assert s.series("unknown") == []
    s.watch("T")
    s.watched["old"] = -1e9
    assert s.topics() == ["T"]


def test_topic_kinds_and_time_parsing() -> None:
    assert [topic_kind(t) for t in ("%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_x", "Orders")] == \
        ["RETRY", "DLQ", "SYSTEM", "SYSTEM", "NORMAL"]
    assert parse_time("1700000000000", "t") == 1700000000000
    assert parse_time("2026-01-02T03:04:05+00:00", "t") == 1767323045000
    with pytest.raises(ValueError, match="neither epoch milliseconds nor an ISO"):
        parse_time("yesterday", "begin")


class _Unreachable:
    """Stands in for ConsoleService: the requests below must be refused before any broker call."""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"service.{name} reached")


def _run_client(cfg: ConsoleConfig, steps: Any) -> Any:
    async def main() -> Any:
        app = make_app(cfg, _Unreachable())  # type: ignore[arg-type]
        async with TestClient(TestServer(app)) as client:
            return await steps(client)

    return asyncio.run(main())


def test_api_refuses_bad_input_with_json_errors() -> None:
    async def steps(c: TestClient) -> None:
        r = await c.get("/api/messages/by-key?topic=T")
        assert r.status == 400 and (await r.json())["error"] == "missing query parameter 'key'"
        r = await c.get("/api/messages/by-time?topic=T&begin=5&end=1")
        assert r.status == 400 and "end is before begin" in (await r.json())["error"]
        r = await c.get("/api/topics/bad%20topic")
        assert r.status == 400
        r = await c.post("/api/topics", data="topic=T")  # a form post (what a cross-site page could send)
        assert r.status == 400 and "JSON body" in (await r.json())["error"]
        r = await c.post("/api/topics", json={"topic": "T", "perm": 7})
        assert r.status == 400 and "perm must be" in (await r.json())["error"]
        r = await c.post("/api/dlq/G/resend", json={})
        assert r.status == 400 and (await r.json())["error"] == "msgId is required"
        r = await c.get("/api/session")
        assert (await r.json())["loginRequired"] is False

    _run_client(ConsoleConfig(), steps)


def test_api_needs_a_session_when_a_login_is_configured() -> None:
    cfg = ConsoleConfig(username="ops", password="pw")

    async def steps(c: TestClient) -> None:
        r = await c.get("/api/cluster")
        assert r.status == 401
        r = await c.get("/", allow_redirects=False)
        assert r.status == 302 and r.headers["Location"] == "/login"
        r = await c.get("/login")
        assert r.status == 200 and "login-form" in await r.text()
        r = await c.post("/api/login", json={"username": "ops", "password": "nope"})
        assert r.status == 401
        r = await c.post("/api/login", json={"username": "ops", "password": "pw"})
        assert r.status == 200
        assert "httponly" in r.headers["Set-Cookie"].lower() and "samesite=strict" in r.headers["Set-Cookie"].lower()
        r = await c.get("/api/session")
        assert (await r.json())["user"] == "ops"
        r = await c.get("/api/messages/by-key?topic=T")  # past the guard now: the 400 of the handler
        assert r.status == 400
        await c.post("/api/logout", json={})
        r = await c.get("/api/cluster")
        assert r.status == 401

    _run_client(cfg, steps)


def test_static_assets_are_packaged_next_to_the_code() -> None:
    static = Path(__import__("orbitmq.console.server", fromlist=["STATIC_DIR"]).STATIC_DIR)
    names = {p.name for p in static.iterdir()}
    assert {"index.html", "app.js", "style.css", "login.html", "login.js"} <= names
    pyproject = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"orbitmq.console" = ["static/*"]' in pyproject
    for name in ("index.html", "login.html", "app.js"):  # no CDN / outside URL in the page
        assert "http://" not in (static / name).read_text(encoding="utf-8").replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in (static / name).read_text(encoding="utf-8")


def test_bounded_gather_keeps_order_and_limit() -> None:
    from orbitmq.console.service import bounded_gather

    running = peak = 0

    async def work(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running -= 1
        return i * i

    assert asyncio.run(bounded_gather(work, list(range(40)), limit=3)) == [i * i for i in range(40)]
    assert peak == 3


def test_cli_refuses_a_bad_console_config_with_one_line_and_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orbitmq.cli.main import main

    conf = tmp_path / "console.yml"
    conf.write_text("acl: {accessKey: ak, secretKey: sk}\n", encoding="utf-8")
    for args in (["console", "-c", str(conf)], ["console", "-c", str(tmp_path / "absent.yml")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("orbitmq: error: "), result.output


def test_api_answers_502_naming_an_unreachable_name_server() -> None:
    from orbitmq.testing.procs import free_port

    dead = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        async with TestClient(TestServer(make_app(ConsoleConfig(namesrv=dead)))) as c:
            for path in ("/api/cluster", "/api/topics", "/api/groups", "/api/topics/T", "/api/dlq/G",
                         "/api/controller", "/api/messages/by-key?topic=T&key=k"):
                r = await c.get(path)
                assert r.status == 502, (path, r.status)
                assert dead in (await r.json())["error"], path

    asyncio.run(main())


def test_group_lag_names_the_brokers_it_could_not_count() -> None:
    from orbitmq.client.admin_groups import BrokerProblem, GroupProgress, QueueProgress
    from orbitmq.console.service import ConsoleService
    from orbitmq.model import MessageQueue

    class FakeAdmin:
        async def group_progress(self, group: str, topic: str | None = None) -> GroupProgress:
            return GroupProgress(group, [QueueProgress(MessageQueue("T", "broker-a", 0), 10, 4, 6, 0)], 1.5,
                                 [BrokerProblem("broker-b", "10.0.0.2:10911", "unreachable: connect failed")])

        async def consumer_connections(self, group: str) -> Any:
            raise ConfigError("not online")  # any OrbitMQError: offline

    svc = ConsoleService(ConsoleConfig())
    svc.admin = FakeAdmin()  # type: ignore[assignment]
    d = asyncio.run(svc.group("G"))
    assert (d["lag"], d["consumeTps"], d["online"]) == (6, 1.5, False)
    assert d["problems"] == ["broker broker-b 10.0.0.2:10911: unreachable: connect failed"]
