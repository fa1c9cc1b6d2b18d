"""`orbitmq broker -c broker.conf`: run one broker process until SIGTERM/SIGINT.

Also owns what `standalone` shares with it: reading broker.conf plus command-line overrides, the writable-store
check and the broker banner lines. Nothing here knows the broker's internals beyond the orbitmq.broker facade.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import click

from orbitmq import __version__
from orbitmq.base.errors import ConfigError
from orbitmq.cli import (
    EXIT_STARTUP,
    CliError,
    broker_title,
    one_line,
    run_async,
    serve,
    set_process_title,
    startup_error,
)

FLUSH_CHOICES = ("ASYNC_FLUSH", "SYNC_FLUSH")


@dataclass
class BrokerSettings:
    broker: Any                    # BrokerConfig
    store: Any                     # StoreConfig
    warnings: list[str] = field(default_factory=list)


def _store_config(root: str) -> Any:
    from orbitmq.store import StoreConfig

    return StoreConfig(store_path_root_dir=root)


def load_broker_settings(config_path: str | None, *, default_root: str, namesrv: str | None = None,
                         port: int | None = None, broker_ip: str | None = None, data_dir: str | None = None,
                         flush: str | None = None, defaults: dict[str, Any] | None = None,
                         namesrv_fallback: str | None = None) -> BrokerSettings:
    """broker.conf (or defaults) + overrides -> validated configs. Raises CliError (exit 2) on bad input.

    namesrv_fallback is used when neither `namesrv` nor the conf names a name server ($NAMESRV_ADDR)."""
    from orbitmq.broker import BrokerConfig, load_broker_conf

    try:
        if config_path:
            bcfg, scfg, warnings = load_broker_conf(config_path)
        else:
            bcfg = BrokerConfig(**(defaults or {}))
            scfg = _store_config(os.path.abspath(default_root))
            warnings = []
        if namesrv is None and not bcfg.namesrv_addr and namesrv_fallback:
            namesrv = namesrv_fallback
        bcfg, scfg = apply_overrides(bcfg, scfg, namesrv=namesrv, port=port, broker_ip=broker_ip,
                                     data_dir=data_dir, flush=flush)
    except ConfigError as exc:
        raise CliError(one_line(exc), EXIT_STARTUP) from None
    return BrokerSettings(bcfg, scfg, list(warnings))


def apply_overrides(bcfg: Any, scfg: Any, *, namesrv: str | None, port: int | None, broker_ip: str | None,
                    data_dir: str | None, flush: str | None) -> tuple[Any, Any]:
    b_changes: dict[str, Any] = {}
    if namesrv is not None:
        b_changes["namesrv_addr"] = namesrv
    if port is not None:
        b_changes["listen_port"] = port
        if bcfg.ha_listen_port in (bcfg.listen_port + 1, 0):  # derived, not set explicitly: follow the port
            b_changes["ha_listen_port"] = port + 1 if port else 0
    if broker_ip is not None:
        b_changes["broker_ip1"] = broker_ip
        if bcfg.broker_ip2 == bcfg.broker_ip1:
            b_changes["broker_ip2"] = broker_ip
    if b_changes:
        bcfg = dataclasses.replace(bcfg, **b_changes)
    s_changes: dict[str, Any] = {}
    if data_dir is not None:
        s_changes["store_path_root_dir"] = os.path.abspath(os.path.join(data_dir, "store"))
    if flush is not None:
        s_changes["flush_disk_type"] = flush.upper()
        s_changes["confirm_offset_mode"] = None  # re-derived by the store from the flush type
    if s_changes:
        scfg = dataclasses.replace(scfg, **s_changes)
    bcfg.validate()
    scfg.validate()
    return bcfg, scfg


def check_writable_dir(path: str, what: str) -> None:
    """Create `path` if needed and prove we can write a file there; CliError (exit 2) otherwise."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".orbitmq-write-check-"):
            pass
    except OSError as exc:
        raise CliError(f"{what} {path} is not writable: {one_line(exc)}", EXIT_STARTUP) from None


def print_warnings(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"orbitmq: warning: {w}", err=True)


def broker_banner_lines(bcfg: Any, scfg: Any, actual_port: int) -> list[str]:
    ha = bcfg.ha_listen_port if bcfg.ha_listen_port else "-"
    return [
        f"  broker       {bcfg.broker_name} @ {bcfg.broker_ip1}:{actual_port}  (cluster {bcfg.broker_cluster_name}, "
        f"{bcfg.broker_role}, id {bcfg.broker_id}, HA port {ha})",
        f"  store        {scfg.store_path_root_dir}  flush {scfg.flush_disk_type}",
        f"  namesrvAddr  {bcfg.namesrv_addr or '(none: not registering)'}",
    ]


def broker_port_of(broker: Any, bcfg: Any) -> int:
    return int(getattr(broker, "listen_port", 0) or bcfg.listen_port)


@click.command("broker")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="broker.conf (Java properties)")
@click.option("-n", "--namesrv", default=None, help="name server list 'ip:port;ip:port' (overrides namesrvAddr; "
              "default: the conf's, else $NAMESRV_ADDR)")
@click.option("-p", "--port", type=int, default=None, help="listenPort override")
@click.option("--broker-ip", default=None, help="brokerIP1 override (the address clients are told)")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None,
              help="store under DIR/store (overrides storePathRootDir)")
@click.option("--flush", type=click.Choice(FLUSH_CHOICES, case_sensitive=False), default=None,
              help="flushDiskType override")
def broker_command(config_path: str | None, namesrv: str | None, port: int | None, broker_ip: str | None,
                   data_dir: str | None, flush: str | None) -> None:
    """Run a broker (RocketMQ broker.conf keys) until SIGTERM / Ctrl-C."""
    settings = load_broker_settings(config_path, default_root=os.path.join(".", "data", "store"), namesrv=namesrv,
                                    port=port, broker_ip=broker_ip, data_dir=data_dir, flush=flush,
                                    namesrv_fallback=os.environ.get("NAMESRV_ADDR"))
    print_warnings(settings.warnings)
    check_writable_dir(settings.store.store_path_root_dir, "store path")
    run_async(_run_broker(settings))


async def _run_broker(settings: BrokerSettings) -> None:
    from orbitmq.broker import Broker

    bcfg, scfg = settings.broker, settings.store
    try:
        broker = Broker(bcfg, scfg)
    except Exception as exc:  # noqa: BLE001 - construction errors are startup errors
        raise startup_error(exc) from None

    def ready() -> None:
        lines = [f"OrbitMQ {__version__} broker (pid {os.getpid()})"]
        lines += broker_banner_lines(bcfg, scfg, broker_port_of(broker, bcfg))
        lines.append("Ready. SIGTERM or Ctrl-C to stop.")
        click.echo("\n".join(lines))

    set_process_title("broker", broker_title(bcfg.broker_name, bcfg.broker_id, bcfg.listen_port))
    await serve([("broker", broker)], ready)
