"""Router: one dict lookup from request code to handler; unknown codes get REQUEST_CODE_NOT_SUPPORTED.

While the broker is starting or stopping, requests are refused with SERVICE_NOT_AVAILABLE (clients retry elsewhere).
An optional `check` (the ACL guard) runs before the handler and may answer instead of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orbitmq.broker.metadata.quota import REQUESTER
from orbitmq.protocol import RemotingCommand, ResponseCode

_NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
_requester = REQUESTER.get


class Router:
    __slots__ = ("_table", "accepting", "check", "starting")

    def __init__(self, table: Mapping[int, Any]) -> None:
        self._table: dict[int, Any] = {int(k): v for k, v in table.items()}
        self.accepting = True
        # (conn, cmd) -> None (go on) or the response to send instead (ACL: NO_PERMISSION); None = no check
        self.check: Callable[[Any, RemotingCommand], RemotingCommand | None] | None = None
        # (conn, cmd) -> the answer while not accepting (the broker's start-up progress); None = the plain refusal
        self.starting: Callable[[Any, RemotingCommand], RemotingCommand] | None = None

    def __call__(self, conn: Any, cmd: RemotingCommand) -> Any:
        handler = self._table.get(cmd.code)
        if handler is None or not self.accepting:
            if cmd.is_oneway:
                return None
            if not self.accepting:  # starting (handlers not wired yet) or stopping
                if self.starting is not None:
                    return self.starting(conn, cmd)
                return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is starting or shutting down")
            return cmd.response(_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        if self.check is not None:
            refused = self.check(conn, cmd)
            if refused is not None:
                return None if cmd.is_oneway else refused
        if _requester() is not conn:  # set once per connection's run of requests (a set makes a new context)
            REQUESTER.set(conn)  # who auto-creates topics/groups (metadata/quota.py); a handler's task inherits it
        return handler(conn, cmd)

    def add(self, table: Mapping[int, Any]) -> None:
        for code, handler in table.items():
            self._table[int(code)] = handler

    def without(self, codes: Iterable[int]) -> Router:
        """A router with the same handlers except `codes` (the VIP channel has no PULL_MESSAGE)."""
        drop = {int(c) for c in codes}
        router = Router({c: h for c, h in self._table.items() if c not in drop})
        router.check = self.check
        return router

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._table)
