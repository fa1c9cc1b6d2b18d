"""Name server -> broker/client oneway requests over the connection the peer opened (never raises).

NOTIFY_MIN_BROKER_ID_CHANGE (905) for RouteTable's min-id notices; route_push.py uses `send_oneway` too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from orbitmq.namesrv.route_table import MinIdNotice
from orbitmq.protocol import RemotingCommand, RequestCode

log = logging.getLogger(__name__)


def send_oneway(channel: object, cmd: RemotingCommand, peer: str) -> bool:
    """`channel.invoke_oneway(cmd)`; a missing/closed channel or a send failure is logged, never raised."""
    invoke: Callable[[RemotingCommand], None] | None = getattr(channel, "invoke_oneway", None)
    if invoke is None or getattr(channel, "closed", False):
        log.debug("oneway %d to %s skipped: no open connection", cmd.code, peer)
        return False
    try:
        invoke(cmd)
    except Exception as e:  # noqa: BLE001 - a dead peer must not break the caller's mutation
        log.warning("oneway %d to %s failed: %s", cmd.code, peer, e)
        return False
    return True


def send_min_id_notices(notices: Iterable[MinIdNotice]) -> int:
    """Send every notice to each of its targets; returns how many requests left."""
    sent = 0
    for n in notices:
        ext = n.ext_fields()
        log.info("group %s: min broker id now %d (%s)%s; notifying %s", n.broker_name, n.min_broker_id,
                 n.min_broker_addr, f", offline {n.offline_broker_addr}" if n.offline_broker_addr else "",
                 ", ".join(a for a, _ in n.targets))
        for addr, channel in n.targets:
            cmd = RemotingCommand.request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, dict(ext), oneway=True)
            sent += send_oneway(channel, cmd, addr)
    return sent
