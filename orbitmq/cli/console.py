"""`orbitmq console -n NAMESRV [--port 8080] [--host 127.0.0.1] [--config console.yml]`: the web console."""

from __future__ import annotations

import os

import click

from orbitmq.base.errors import ConfigError
from orbitmq.cli import EXIT_STARTUP, CliError, one_line, run_async, serve


@click.command("console")
@click.option("-n", "--namesrv", default=None,
              help="name server(s) 'ip:port;ip:port' (default: config, then NAMESRV_ADDR, then 127.0.0.1:9876)")
@click.option("--host", default=None, help="address to listen on (default 127.0.0.1)")
@click.option("-p", "--port", default=None, type=click.IntRange(0, 65535), help="HTTP port (default 8080)")
@click.option("-a", "--controllers", default=None, help="controller address(es) 'ip:port;ip:port' for the controller view")
@click.option("-c", "--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="console.yml: login user/password, ACL access key, controllers, ... (see docs/console.md)")
def console_command(namesrv: str | None, host: str | None, port: int | None, controllers: str | None,
                    config_path: str | None) -> None:
    """Web console: cluster, topics, consumer groups and lag, message query, DLQ resend, controllers."""
    from orbitmq.console.config import load_config
    from orbitmq.console.server import ConsoleServer

    if namesrv is None and os.environ.get("NAMESRV_ADDR") and config_path is None:
        namesrv = os.environ["NAMESRV_ADDR"]
    try:
        cfg = load_config(config_path, namesrv=namesrv, host=host, port=port, controllers=controllers)
    except ConfigError as exc:
        raise CliError(one_line(exc), EXIT_STARTUP) from None
    server = ConsoleServer(cfg)

    def ready() -> None:
        login = f"login as {cfg.username}" if cfg.login_required else "no login"
        click.echo(f"OrbitMQ console on {server.url} (name server {cfg.namesrv}; {login})", err=False)

    run_async(serve([("console", server)], ready))
