"""The web console (`orbitmq console`): an aiohttp server with a JSON API under /api and one offline page
(orbitmq/console/static/) for clusters, topics, consumer groups, message queries, DLQ resend and controllers.

Layers: config.py (console.yml + env) -> queries.py (requests the SDK Admin does not have) -> service.py (what each
page shows, as JSON-able dicts) -> server.py (routes, login, static files).
"""

from orbitmq.console.config import ConsoleConfig, load_config

__all__ = ["ConsoleConfig", "load_config"]
