"""`orbitmq controller -c controller.conf`: run one RIP-44 controller node until SIGTERM/SIGINT; and the wiring that
lets `orbitmq namesrv` host a controller too (`enableControllerInNamesrv=true` in namesrv.conf).

Bad configuration -> one line `orbitmq: error: ...`, exit code 2. Embedding happens here, not in namesrv/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from orbitmq import __version__
from orbitmq.base.errors import ConfigError
from orbitmq.cli import EXIT_STARTUP, CliError, one_line, run_async, serve, set_process_title, startup_error
from orbitmq.cli.broker import print_warnings


def load_controller_settings(config_path: str) -> tuple[Any, list[str]]:
    """controller.conf -> (ControllerConfig, warnings); CliError (exit 2) on bad input."""
    from orbitmq.controller.config import load_controller_conf

    try:
        return load_controller_conf(config_path)
    except ConfigError as exc:
        raise CliError(one_line(exc), EXIT_STARTUP) from None


def make_controller(cfg: Any) -> Any:
    from orbitmq.controller import ControllerService

    try:
        return ControllerService(cfg)
    except Exception as exc:  # noqa: BLE001 - construction errors are startup errors
        raise startup_error(exc) from None


def controller_banner_line(cfg: Any) -> str:
    return (f"  controller   {cfg.controller_dleger_self_id} @ {cfg.self_addr}  (group {cfg.controller_dleger_group},"
            f" {len(cfg.peers)} peers, store {cfg.controller_store_path})")


@click.command("controller")
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="controller.conf (Java properties: controllerDLegerGroup, controllerDLegerPeers, ...)")
def controller_command(config_path: str) -> None:
    """Run a RIP-44 controller node (Raft-replicated broker master election) until SIGTERM / Ctrl-C."""
    cfg, warnings = load_controller_settings(config_path)
    print_warnings(warnings)
    run_async(_run(cfg))


async def _run(cfg: Any) -> None:
    controller = make_controller(cfg)

    def ready() -> None:
        click.echo(f"OrbitMQ {__version__} controller (pid {os.getpid()})\n{controller_banner_line(cfg)}\n"
                   "Ready. SIGTERM or Ctrl-C to stop.")

    set_process_title("controller", f"{cfg.controller_dleger_self_id} :{cfg.listen_port}")
    await serve([("controller", controller)], ready)


# ---- embedding in the name server -------------------------------------------------------------------------------
def embedded_controller_config(namesrv_conf_path: str | None) -> tuple[Any, list[str]] | None:
    """The controller settings of a namesrv.conf with enableControllerInNamesrv=true (None when off or no file).
    Keys the name server owns are not reported as unknown."""
    if not namesrv_conf_path:
        return None
    from orbitmq.base.properties import conf_dir, parse_properties
    from orbitmq.controller.config import controller_config_from_properties
    from orbitmq.namesrv.config import CONF_KEYS as NAMESRV_KEYS

    try:
        text = Path(namesrv_conf_path).read_text(encoding="utf-8")
    except OSError:
        return None  # the name server's own loader reports an unreadable file
    props = parse_properties(text)
    enabled = any(k == "enableControllerInNamesrv" and v.strip().lower() == "true" for _, k, v in props)
    if not enabled:
        return None
    own = [(n, k, v) for n, k, v in props if k != "listenPort"]  # the name server's port, not the controller's
    try:
        cfg, _ = controller_config_from_properties(own, Path(namesrv_conf_path).name,
                                                   foreign_keys=frozenset(NAMESRV_KEYS),
                                                   base_dir=conf_dir(namesrv_conf_path))
    except ConfigError as exc:
        raise CliError(one_line(exc), EXIT_STARTUP) from None
    return cfg, []


def attach_controller(name_server: Any, controller: Any) -> None:
    """Route the controller's request codes arriving on the name server's port to `controller`, and tell it
    about closed name-server connections (a broker heartbeating there)."""
    from orbitmq.protocol import RequestCode

    # BROKER_HEARTBEAT is the name server's too (RIP-32): both see it; every other controller code is unknown to it
    name_server.handlers.set_fallback(controller.handle, shared=frozenset({RequestCode.BROKER_HEARTBEAT}))
    name_server.add_close_listener(controller.on_channel_closed)
