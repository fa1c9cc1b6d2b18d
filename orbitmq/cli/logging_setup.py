"""Logging for CLI processes: one root handler on stderr (rich on a terminal, plain lines otherwise).

Servers log at INFO by default, client and admin commands at WARNING; `--log-level` overrides both.
"""

from __future__ import annotations

import logging
import sys

PLAIN_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def setup_logging(level: str | int = "INFO", *, log_file: str | None = None) -> None:
    """Configure the root logger once; calling again replaces the previous handlers."""
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        level = resolved if isinstance(resolved, int) else logging.INFO
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    elif sys.stderr.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    # asyncio's "Task exception was never retrieved" et al. stay visible; its debug chatter does not.
    logging.getLogger("asyncio").setLevel(max(level, logging.WARNING))
