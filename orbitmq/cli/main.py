"""`orbitmq` entry point: the click group and its sub-commands (servers, mqadmin-style admin, produce/consume,
bench). `python -m orbitmq.cli.main ...` works as well as the installed `orbitmq` script.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from orbitmq import __version__
from orbitmq.base.errors import OrbitMQError
from orbitmq.cli import EXIT_FAILURE, CliError, one_line
from orbitmq.cli.admin import ADMIN_COMMANDS
from orbitmq.cli.bench import bench_group
from orbitmq.cli.broker import broker_command
from orbitmq.cli.clientcmds import consume_command, produce_command
from orbitmq.cli.cluster import cluster_group
from orbitmq.cli.console import console_command
from orbitmq.cli.controller import controller_command
from orbitmq.cli.controller_admin import CONTROLLER_ADMIN_COMMANDS
from orbitmq.cli.logging_setup import setup_logging
from orbitmq.cli.namesrv import namesrv_command
from orbitmq.cli.standalone import standalone_command

SERVER_COMMANDS = frozenset({"namesrv", "broker", "standalone", "controller"})
log = logging.getLogger("orbitmq.cli")


class OrbitGroup(click.Group):
    """Turns any unexpected exception into the one-line error (the traceback only with --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # `orbitmq topicList | head`: quiet exit, no flush error at interpreter exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except OrbitMQError as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            raise CliError(one_line(exc), EXIT_FAILURE) from None
        except Exception as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            log.debug("unexpected error", exc_info=exc)
            raise CliError(f"unexpected {type(exc).__name__}: {one_line(exc)} (run with --debug for the traceback)",
                           EXIT_FAILURE) from None


@click.group(cls=OrbitGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="orbitmq")
@click.option("--log-level", default=None, type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                                             case_sensitive=False),
              help="default: INFO for servers, WARNING for other commands")
@click.option("--log-file", default=None, type=click.Path(dir_okay=False), help="log to this file instead of stderr")
@click.option("--debug", is_flag=True, help="show tracebacks of unexpected errors")
@click.pass_context
def main(ctx: click.Context, log_level: str | None, log_file: str | None, debug: bool) -> None:
    """OrbitMQ: a RocketMQ 4.x compatible message queue."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    server = ctx.invoked_subcommand in SERVER_COMMANDS
    setup_logging(log_level or ("DEBUG" if debug else "INFO" if server else "WARNING"), log_file=log_file)


for _cmd in (namesrv_command, broker_command, standalone_command, produce_command, consume_command, bench_group,
             cluster_group, controller_command, *ADMIN_COMMANDS, *CONTROLLER_ADMIN_COMMANDS):
    main.add_command(_cmd)
main.add_command(console_command)


if __name__ == "__main__":
    main(prog_name="orbitmq")
