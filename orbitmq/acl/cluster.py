"""The cluster secret (clusterSecret): brokers sign what they send to name servers and other brokers with it
(access key protocol.acl_sign.CLUSTER_ACCESS_KEY), so a name server can refuse registrations from anyone else.

cluster_guarded(handler, secret) wraps a server's request handler: the broker-registration requests need that
signature (NO_PERMISSION otherwise); every other request passes unchanged. An empty secret changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from orbitmq.protocol import RemotingCommand, RequestCode, ResponseCode
from orbitmq.protocol.acl_sign import cluster_credentials, sign_request, signed_with

log = logging.getLogger("orbitmq.acl")

# what only a broker of the cluster (or an operator holding the secret) may send to a name server: broker
# registration, and the admin writes that change routes or the name server's state
BROKER_REGISTRATION_CODES: frozenset[int] = frozenset(int(c) for c in (
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
    RequestCode.QUERY_DATA_VERSION,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV, RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
    RequestCode.UPDATE_NAMESRV_CONFIG,
))


# what a controller accepts only with the cluster signature: broker registration, heartbeats and role changes, the
# admin writes, and the Raft messages of its peers (reads such as GET_METADATA_INFO and GET_SYNC_STATE_DATA stay open)
CONTROLLER_GUARDED_CODES: frozenset[int] = frozenset(int(c) for c in (
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.UPDATE_CONTROLLER_CONFIG, RequestCode.CLEAN_BROKER_DATA, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
    RequestCode.CONTROLLER_APPLY_BROKER_ID, RequestCode.BROKER_CLOSE_CHANNEL_REQUEST,
    RequestCode.CHECK_NOT_ACTIVE_BROKER_REQUEST, RequestCode.RAFT_BROKER_HEART_BEAT_EVENT_REQUEST,
    RequestCode.ORBIT_RAFT_MESSAGE,
))


class ClusterSecretGuard:
    """A request handler that checks the cluster signature on `codes` before delegating to `handler`."""

    __slots__ = ("_handler", "_creds", "_codes", "refused")

    def __init__(self, handler: Any, secret: str, codes: Iterable[int] = BROKER_REGISTRATION_CODES) -> None:
        self._handler = handler
        self._creds = cluster_credentials(secret)
        self._codes = frozenset(int(c) for c in codes)
        self.refused = 0

    def __call__(self, conn: Any, cmd: RemotingCommand) -> Any:
        if cmd.code in self._codes and not signed_with(cmd, self._creds):
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # the 1st, 2nd, 4th, 8th ... refusal: no log flood
                log.warning("refused request code %d from %s: not signed with the cluster secret (%d refused so "
                            "far)", cmd.code, getattr(conn, "remote_addr", "?"), self.refused)
            if cmd.is_oneway:
                return None
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"request code {cmd.code} needs the cluster secret's signature (clusterSecret)")
        return self._handler(conn, cmd)

    def __getattr__(self, name: str) -> Any:  # the wrapped handler's attributes stay reachable
        return getattr(self._handler, name)


def cluster_signer(secret: str) -> Callable[[RemotingCommand], object] | None:
    """For RemotingClient(sign=...): every request a broker sends carries the cluster signature (None: off)."""
    if not secret:
        return None
    creds = cluster_credentials(secret)
    return lambda cmd: sign_request(cmd, creds)


def cluster_guarded(handler: Any, secret: str, codes: Iterable[int] = BROKER_REGISTRATION_CODES) -> Any:
    return ClusterSecretGuard(handler, secret, codes) if secret else handler
