"""The console's aiohttp application: the page (static/), the JSON API under /api, and the login guard.

Errors are JSON `{"error": "..."}`: 400 for bad input, 401 without a session (when a login is configured), 404 for
a message / topic that does not exist, 502 when a name server or broker refused or did not answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from orbitmq.base.errors import OrbitMQError
from orbitmq.client.errors import NoPermissionError, NoRouteError, QueryNotFoundError, TopicNotExistError
from orbitmq.console import auth
from orbitmq.console.config import ConsoleConfig
from orbitmq.console.service import ConsoleService
from orbitmq.model.names import topic_error

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
CONFIG_KEY = web.AppKey("config", ConsoleConfig)
SERVICE_KEY = web.AppKey("service", ConsoleService)
USER_KEY = web.RequestKey("user", str)
OPEN_PATHS = frozenset({"/api/login", "/api/session", "/login", "/static/login.js", "/static/style.css",
                        "/static/favicon.svg"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadRequest(ValueError):
    """Bad input from the page or an API client (400)."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error_status(exc: BaseException) -> int:
    if isinstance(exc, ValueError):
        return 400
    if isinstance(exc, QueryNotFoundError | TopicNotExistError | NoRouteError):
        return 404
    if isinstance(exc, NoPermissionError):
        return 403
    return 502


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (OrbitMQError, ValueError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return _json({"error": text}, _error_status(exc))


@web.middleware
async def login_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cfg = request.app[CONFIG_KEY]
    if not cfg.login_required or request.path in OPEN_PATHS:
        return await handler(request)
    user = auth.verify_token(cfg.session_secret, request.cookies.get(auth.COOKIE_NAME))
    if user is None:
        if request.path.startswith("/api/"):
            return _json({"error": "login required"}, 401)
        raise web.HTTPFound("/login")
    request[USER_KEY] = user
    return await handler(request)


# ---- request helpers ---------------------------------------------------------------------------------------
def _arg(request: web.Request, name: str, required: bool = True) -> str:
    value = (request.query.get(name) or "").strip()
    if required and not value:
        raise BadRequest(f"missing query parameter '{name}'")
    return value


def parse_time(text: str, name: str) -> int:
    """Epoch milliseconds, or an ISO date/time (local time when it has no zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise BadRequest(f"{name}: '{text}' is neither epoch milliseconds nor an ISO date/time") from None


def _topic(text: str) -> str:
    err = topic_error(text)
    if err:
        raise BadRequest(err)
    return text


async def _body(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":  # also what keeps cross-site HTML forms out
        raise BadRequest("send a JSON body (Content-Type: application/json)")
    try:
        data = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data


def _int(data: dict[str, Any], key: str, default: int) -> int:
    try:
        return int(data.get(key, default))
    except (TypeError, ValueError):
        raise BadRequest(f"{key} must be an integer") from None


# ---- handlers ------------------------------------------------------------------------------------------------
async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


async def login_page(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "login.html")


async def session(request: web.Request) -> web.Response:
    cfg = request.app[CONFIG_KEY]
    user = auth.verify_token(cfg.session_secret, request.cookies.get(auth.COOKIE_NAME))
    return _json({"loginRequired": cfg.login_required, "user": user, "aclEnabled": cfg.acl_enabled,
                  "namesrv": cfg.namesrv})


async def login(request: web.Request) -> web.Response:
    cfg = request.app[CONFIG_KEY]
    data = await _body(request)
    if not cfg.login_required:
        return _json({"user": None})
    user, password = str(data.get("username") or ""), str(data.get("password") or "")
    if not auth.check_password(cfg.username or "", cfg.password or "", user, password):
        await asyncio.sleep(0.2)  # blunt password guessing a little
        return _json({"error": "wrong user name or password"}, 401)
    resp = _json({"user": user})
    resp.set_cookie(auth.COOKIE_NAME, auth.make_token(cfg.session_secret, user, cfg.session_ttl_s),
                    max_age=cfg.session_ttl_s, httponly=True, samesite="Strict", path="/")
    return resp


async def logout(request: web.Request) -> web.Response:
    resp = _json({"user": None})
    resp.del_cookie(auth.COOKIE_NAME, path="/")
    return resp


def _svc(request: web.Request) -> ConsoleService:
    return request.app[SERVICE_KEY]


async def cluster(request: web.Request) -> web.Response:
    return _json(await _svc(request).cluster())


async def topics(request: web.Request) -> web.Response:
    return _json(await _svc(request).topics(include_system=request.query.get("system") == "1"))


async def create_topic(request: web.Request) -> web.Response:
    data = await _body(request)
    topic = _topic(str(data.get("topic") or "").strip())
    perm = _int(data, "perm", 6)
    if perm not in (2, 4, 6):
        raise BadRequest("perm must be 2 (write), 4 (read) or 6 (read and write)")
    read_q, write_q = _int(data, "readQueues", 8), _int(data, "writeQueues", 8)
    if not (1 <= read_q <= 1024 and 1 <= write_q <= 1024):
        raise BadRequest("queue counts must be between 1 and 1024")
    return _json({"topic": topic, "brokers": await _svc(request).create_topic(topic, read_q, write_q, perm)})


async def topic(request: web.Request) -> web.Response:
    topic_name = _topic(request.match_info["topic"])
    return _json(await _svc(request).topic(topic_name))


async def groups(request: web.Request) -> web.Response:
    return _json(await _svc(request).groups())


async def group(request: web.Request) -> web.Response:
    return _json(await _svc(request).group(request.match_info["group"]))


async def reset_offset(request: web.Request) -> web.Response:
    data = await _body(request)
    topic_name = _topic(str(data.get("topic") or "").strip())
    when = parse_time(str(data.get("timestamp") or ""), "timestamp")
    return _json({"offsets": await _svc(request).reset_offset(request.match_info["group"], topic_name, when)})


async def by_key(request: web.Request) -> web.Response:
    begin = parse_time(_arg(request, "begin", False) or "0", "begin")
    end_text = _arg(request, "end", False)
    end = parse_time(end_text, "end") if end_text else None
    topic_name, key = _topic(_arg(request, "topic")), _arg(request, "key")
    return _json(await _svc(request).by_key(topic_name, key, begin, end))


async def by_id(request: web.Request) -> web.Response:
    msg_id, topic_name = _arg(request, "msgId"), _arg(request, "topic", False) or None
    return _json(await _svc(request).by_id(msg_id, topic_name))


async def by_time(request: web.Request) -> web.Response:
    begin, end = parse_time(_arg(request, "begin"), "begin"), parse_time(_arg(request, "end"), "end")
    if end < begin:
        raise BadRequest("end is before begin")
    topic_name = _topic(_arg(request, "topic"))
    return _json(await _svc(request).by_time(topic_name, begin, end))


async def dlq(request: web.Request) -> web.Response:
    return _json(await _svc(request).dlq(request.match_info["group"]))


async def resend(request: web.Request) -> web.Response:
    data = await _body(request)
    msg_id = str(data.get("msgId") or "").strip()
    if not msg_id:
        raise BadRequest("msgId is required")
    target = str(data.get("target") or "retry")
    return _json(await _svc(request).resend(request.match_info["group"], msg_id, target))


async def controller(request: web.Request) -> web.Response:
    return _json(await _svc(request).controller())


def make_app(cfg: ConsoleConfig, service: ConsoleService | None = None) -> web.Application:
    """The application; the service (SDK clients) starts and stops with it."""
    app = web.Application(middlewares=[error_middleware, login_middleware])
    app[CONFIG_KEY] = cfg
    app[SERVICE_KEY] = service or ConsoleService(cfg)

    async def lifecycle(app: web.Application) -> Any:
        await app[SERVICE_KEY].start()
        yield
        await app[SERVICE_KEY].close()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/", index)
    app.router.add_get("/login", login_page)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    r = app.router
    r.add_get("/api/session", session)
    r.add_post("/api/login", login)
    r.add_post("/api/logout", logout)
    r.add_get("/api/cluster", cluster)
    r.add_get("/api/topics", topics)
    r.add_post("/api/topics", create_topic)
    r.add_get("/api/topics/{topic}", topic)
    r.add_get("/api/groups", groups)
    r.add_get("/api/groups/{group}", group)
    r.add_post("/api/groups/{group}/reset-offset", reset_offset)
    r.add_get("/api/messages/by-key", by_key)
    r.add_get("/api/messages/by-id", by_id)
    r.add_get("/api/messages/by-time", by_time)
    r.add_get("/api/dlq/{group}", dlq)
    r.add_post("/api/dlq/{group}/resend", resend)
    r.add_get("/api/controller", controller)
    return app


class ConsoleServer:
    """The console as a start()/stop() service (orbitmq.cli.serve runs it until SIGTERM / SIGINT)."""

    def __init__(self, cfg: ConsoleConfig) -> None:
        self.cfg = cfg
        self.app = make_app(cfg)
        self._runner: web.AppRunner | None = None
        self.port = cfg.port

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.port}/"

    async def start(self) -> None:
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.cfg.host, self.cfg.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:  # port 0: the one the system chose
            self.port = sockets[0].getsockname()[1]
        log.info("console listening on %s (name server %s)", self.url, self.cfg.namesrv)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
