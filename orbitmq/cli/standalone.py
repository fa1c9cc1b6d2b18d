"""`orbitmq standalone [-c broker.conf]`: a name server and a broker in ONE process (development, benchmarks).

The name server listens on the port of the conf's first namesrvAddr entry (or `namesrvListenPort`, or
--namesrv-port); with no conf: name server 9876, broker 10911, data under ./data (store root ./data/store).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from orbitmq import __version__
from orbitmq.base.properties import conf_dir, resolve_path
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
from orbitmq.cli.broker import (
    FLUSH_CHOICES,
    broker_banner_lines,
    broker_port_of,
    check_writable_dir,
    load_broker_settings,
    print_warnings,
)
from orbitmq.cli.namesrv import load_namesrv_settings, make_name_server, namesrv_banner_line

DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORT = 10911
# standalone-only keys a broker.conf may carry (the test harness writes them); the broker would warn about them
STANDALONE_KEYS = ("namesrvListenPort", "kvConfigPath")


def _standalone_keys(config_path: str | None) -> dict[str, str]:
    if not config_path:
        return {}
    from orbitmq.base.properties import parse_properties

    try:
        with open(config_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CliError(f"cannot read {config_path}: {one_line(exc)}", EXIT_STARTUP) from None
    return {key: value for _, key, value in parse_properties(text) if key in STANDALONE_KEYS}


def _port_of_addr(addr_list: str) -> int | None:
    first = next((a.strip() for a in addr_list.split(";") if a.strip()), "")
    _, sep, port = first.rpartition(":")
    return int(port) if sep and port.isdigit() else None


def resolve_namesrv_port(cli_port: int | None, extra: dict[str, str], namesrv_addr: str) -> int:
    if cli_port is not None:
        return cli_port
    if "namesrvListenPort" in extra:
        try:
            return int(extra["namesrvListenPort"])
        except ValueError:
            raise CliError(f"namesrvListenPort: {extra['namesrvListenPort']!r} is not an integer",
                           EXIT_STARTUP) from None
    return _port_of_addr(namesrv_addr) or DEFAULT_NAMESRV_PORT


@click.command("standalone")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="broker.conf (Java properties)")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None,
              help="data directory: store in DIR/store, name server KV in DIR/namesrv (default ./data without -c)")
@click.option("--namesrv-port", type=int, default=None, help="name server port (default: namesrvAddr's, else 9876)")
@click.option("--broker-port", type=int, default=None, help="broker listenPort (default: the conf's, else 10911)")
@click.option("--broker-ip", default=None, help="brokerIP1 (the address clients are told)")
@click.option("--flush", type=click.Choice(FLUSH_CHOICES, case_sensitive=False), default=None,
              help="flushDiskType override")
def standalone_command(config_path: str | None, data_dir: str | None, namesrv_port: int | None,
                       broker_port: int | None, broker_ip: str | None, flush: str | None) -> None:
    """Run a name server and a broker in one process until SIGTERM / Ctrl-C."""
    extra = _standalone_keys(config_path)
    if config_path is None and data_dir is None:
        data_dir = os.path.join(".", "data")
    ns_override = f"127.0.0.1:{namesrv_port}" if namesrv_port is not None else None
    settings = load_broker_settings(
        config_path, default_root=os.path.join(data_dir or ".", "store"), namesrv=ns_override, port=broker_port,
        broker_ip=broker_ip, data_dir=data_dir, flush=flush,
        defaults={"listen_port": DEFAULT_BROKER_PORT},
    )
    settings.warnings = [w for w in settings.warnings if not any(f"'{k}'" in w or f" {k} " in w
                                                                  for k in STANDALONE_KEYS)]
    ns_port = resolve_namesrv_port(namesrv_port, extra, settings.broker.namesrv_addr)
    if not settings.broker.namesrv_addr:  # register with the in-process name server
        settings.broker = dataclasses.replace(settings.broker, namesrv_addr=f"127.0.0.1:{ns_port}")
    kv_path = resolve_path(extra["kvConfigPath"], conf_dir(config_path)) if extra.get("kvConfigPath") and \
        config_path else os.path.join(os.path.dirname(settings.store.store_path_root_dir), "namesrv", "kvConfig.json")
    ns_cfg, _ = load_namesrv_settings(None, port=ns_port, kv_config_path=os.path.abspath(os.path.expanduser(kv_path)))
    ns_cfg = dataclasses.replace(ns_cfg, listen_host=settings.broker.bind_address,  # bindAddress: both servers
                                 cluster_secret=settings.broker.cluster_secret)
    b = settings.broker  # the broker's tls.server.* keys serve the name server port too
    ns_cfg = dataclasses.replace(ns_cfg, tls_server_mode=b.tls_server_mode, tls_server_cert_path=b.tls_server_cert_path,
                                 tls_server_key_path=b.tls_server_key_path,
                                 tls_server_trust_cert_path=b.tls_server_trust_cert_path,
                                 tls_server_need_client_auth=b.tls_server_need_client_auth)
    print_warnings(settings.warnings)
    check_writable_dir(settings.store.store_path_root_dir, "store path")
    check_writable_dir(os.path.dirname(ns_cfg.kv_config_path), "name server KV directory")
    run_async(_run(ns_cfg, settings.broker, settings.store))


async def _run(ns_cfg: Any, bcfg: Any, scfg: Any) -> None:
    from orbitmq.broker import Broker

    name_server = make_name_server(ns_cfg)
    try:
        broker = Broker(bcfg, scfg)
    except Exception as exc:  # noqa: BLE001 - construction errors are startup errors
        raise startup_error(exc) from None

    def ready() -> None:
        ns_port = int(getattr(name_server, "port", 0) or ns_cfg.listen_port)
        lines = [f"OrbitMQ {__version__} standalone: name server + broker in one process (pid {os.getpid()})",
                 namesrv_banner_line(ns_cfg, ns_port)]
        lines += broker_banner_lines(bcfg, scfg, broker_port_of(broker, bcfg))
        lines.append("Ready. SIGTERM or Ctrl-C to stop.")
        click.echo("\n".join(lines))

    set_process_title("standalone", f"{broker_title(bcfg.broker_name, bcfg.broker_id, bcfg.listen_port)} "
                                    f"namesrv :{ns_cfg.listen_port}")
    await serve([("name server", name_server), ("broker", broker)], ready)
