"""mqadmin commands for name-server settings: getNamesrvConfig, updateNamesrvConfig, updateKvConfig,
deleteKvConfig, updateOrderConf."""

from __future__ import annotations

import click

from orbitmq.cli import CliError, Output
from orbitmq.cli.admin_common import AdminSession, common_options, run_admin
from orbitmq.client.admin_base import ORDER_TOPIC_NAMESPACE


@click.command("getNamesrvConfig")
@common_options
def get_namesrv_config(namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Every name server's settings (GET_NAMESRV_CONFIG)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        configs = await s.admin.namesrv_configs()
        if json_mode:
            out.json(configs)
            return
        for addr, conf in configs.items():
            out.kv(f"name server {addr}", sorted(conf.items()))

    run_admin(namesrv, timeout_ms, action)


@click.command("updateNamesrvConfig")
@click.option("-k", "--key", required=True, help="setting, e.g. orderMessageEnable")
@click.option("-v", "--value", required=True)
@common_options
def update_namesrv_config(key: str, value: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Change a setting on every name server at runtime (not written to namesrv.conf)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        rows = [[addr, key, value, remark or "updated"] for addr, remark in
                await s.admin.update_namesrv_config({key: value})]
        out.table("updateNamesrvConfig", ["namesrv", "key", "value", "result"], rows)

    run_admin(namesrv, timeout_ms, action)


@click.command("updateKvConfig")
@click.option("-s", "--namespace", required=True, help="e.g. ORDER_TOPIC_CONFIG")
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
@common_options
def update_kv_config(namespace: str, key: str, value: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Put a key/value into every name server's KV config."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        await s.admin.put_kv_config(namespace, key, value)
        out.table("updateKvConfig", ["namesrv", "namespace", "key", "value", "result"],
                  [[addr, namespace, key, value, "OK"] for addr in s.admin.namesrv_addrs])

    run_admin(namesrv, timeout_ms, action)


@click.command("deleteKvConfig")
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@common_options
def delete_kv_config(namespace: str, key: str, namesrv: str, json_mode: bool, timeout_ms: int) -> None:
    """Delete a key from every name server's KV config (a missing key is not an error)."""
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        await s.admin.delete_kv_config(namespace, key)
        out.table("deleteKvConfig", ["namesrv", "namespace", "key", "result"],
                  [[addr, namespace, key, "deleted"] for addr in s.admin.namesrv_addrs])

    run_admin(namesrv, timeout_ms, action)


@click.command("updateOrderConf")
@click.option("-t", "--topic", required=True)
@click.option("-m", "--method", type=click.Choice(["get", "put", "delete"]), default="get", show_default=True)
@click.option("-v", "--order-conf", default=None, help="with put: 'broker-a:4;broker-b:4' (broker name:queues)")
@common_options
def update_order_conf(topic: str, method: str, order_conf: str | None, namesrv: str, json_mode: bool,
                      timeout_ms: int) -> None:
    """Read, set or delete an ordered topic's queue layout (the name servers' ORDER_TOPIC_CONFIG entry that
    routes carry as orderTopicConf)."""
    if method == "put" and not order_conf:
        raise click.UsageError("put needs -v 'brokerName:queues;...'")
    out = Output(json_mode)

    async def action(s: AdminSession) -> None:
        if method == "put":
            assert order_conf is not None
            await s.admin.put_kv_config(ORDER_TOPIC_NAMESPACE, topic, order_conf)
        elif method == "delete":
            await s.admin.delete_kv_config(ORDER_TOPIC_NAMESPACE, topic)
        value = await s.admin.get_kv_config(ORDER_TOPIC_NAMESPACE, topic)
        if method == "get" and value is None:
            raise CliError(f"topic {topic!r} has no order conf")
        out.kv(f"orderConf of {topic}", [("topic", topic), ("orderConf", value)])

    run_admin(namesrv, timeout_ms, action)


CONFIG_COMMANDS = [get_namesrv_config, update_namesrv_config, update_kv_config, delete_kv_config, update_order_conf]
