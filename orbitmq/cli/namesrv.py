"""`orbitmq namesrv [-c namesrv.conf]`: run one name server process until SIGTERM/SIGINT."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from orbitmq import __version__
from orbitmq.base.errors import ConfigError
from orbitmq.cli import EXIT_STARTUP, CliError, one_line, run_async, serve, set_process_title, startup_error
from orbitmq.cli.broker import print_warnings
from orbitmq.cli.controller import (
    attach_controller,
    controller_banner_line,
    embedded_controller_config,
    make_controller,
)


def load_namesrv_settings(config_path: str | None, *, port: int | None = None,
                          kv_config_path: str | None = None) -> tuple[Any, list[str]]:
    """namesrv.conf (or defaults) + overrides -> (NamesrvConfig, warnings). CliError (exit 2) on bad input."""
    from orbitmq.namesrv import NamesrvConfig, load_namesrv_conf

    try:
        if config_path:
            loaded = load_namesrv_conf(config_path)
            cfg, warnings = loaded if isinstance(loaded, tuple) else (loaded, [])
        else:
            cfg, warnings = NamesrvConfig(), []
        changes: dict[str, Any] = {}
        if port is not None:
            changes["listen_port"] = port
        if kv_config_path is not None:
            changes["kv_config_path"] = kv_config_path
        if changes:
            cfg = dataclasses.replace(cfg, **changes)
        validate = getattr(cfg, "validate", None)
        if validate is not None:
            validate()
    except ConfigError as exc:
        raise CliError(one_line(exc), EXIT_STARTUP) from None
    return cfg, list(warnings)


def namesrv_banner_line(cfg: Any, actual_port: int) -> str:
    host = getattr(cfg, "listen_host", "0.0.0.0")
    return f"  name server  {host}:{actual_port}  (kv config {cfg.kv_config_path})"


def make_name_server(cfg: Any) -> Any:
    from orbitmq.namesrv import NameServer

    try:
        return NameServer(cfg)
    except Exception as exc:  # noqa: BLE001 - construction errors are startup errors
        raise startup_error(exc) from None


@click.command("namesrv")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="namesrv.conf (Java properties)")
@click.option("-p", "--port", type=int, default=None, help="listenPort override (default 9876)")
@click.option("--kv-config", "kv_config_path", default=None, help="kvConfigPath override")
def namesrv_command(config_path: str | None, port: int | None, kv_config_path: str | None) -> None:
    """Run a name server until SIGTERM / Ctrl-C."""
    cfg, warnings = load_namesrv_settings(config_path, port=port, kv_config_path=kv_config_path)
    print_warnings(warnings)
    embedded = embedded_controller_config(config_path)  # enableControllerInNamesrv=true
    run_async(_run(cfg, embedded[0] if embedded is not None else None))


async def _run(cfg: Any, controller_cfg: Any = None) -> None:
    server = make_name_server(cfg)
    services: list[tuple[str, Any]] = [("name server", server)]
    if controller_cfg is not None:
        controller = make_controller(controller_cfg)
        attach_controller(server, controller)
        services.append(("controller", controller))

    def ready() -> None:
        actual = int(getattr(server, "port", 0) or cfg.listen_port)
        click.echo(f"OrbitMQ {__version__} name server (pid {os.getpid()})\n{namesrv_banner_line(cfg, actual)}\n"
                   + (f"{controller_banner_line(controller_cfg)}\n" if controller_cfg is not None else "")
                   + "Ready. SIGTERM or Ctrl-C to stop.")

    set_process_title("namesrv", f":{cfg.listen_port}" + (" +controller" if controller_cfg is not None else ""))
    await serve(services, ready)
