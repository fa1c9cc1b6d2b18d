"""Router: one dict lookup from request code to handler; unknown codes get REQUEST_CODE_NOT_SUPPORTED.

While the broker is starting or stopping, requests are refused with SERVICE_NOT_AVAILABLE (clients retry elsewhere).
An optional `check` (the ACL guard) runs before the handler and may answer instead of it.

`many` takes every request of one read (the connection calls it when a read holds several): a run of consecutive
requests whose handler is the `dispatch` of an object that also has `dispatch_group` (the send handler) goes to
that in one call, each request still passing the same checks as through __call__; the rest go through __call__.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orbitmq.broker.metadata.quota import REQUESTER
from orbitmq.protocol import FLAG_ONEWAY, RemotingCommand, ResponseCode

_NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
_requester = REQUESTER.get


class Router:
    __slots__ = ("_table", "_groups", "accepting", "check", "starting")

    def __init__(self, table: Mapping[int, Any]) -> None:
        self._table: dict[int, Any] = {}
        self._groups: dict[int, Any] = {}  # request code -> the object whose dispatch_group takes runs of them
        self.add(table)
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

    def many(self, conn: Any, cmds: list[RemotingCommand]) -> list[Any]:
        """The requests of one read, in order: per request what __call__ returns for it, or the exception it
        raised (the connection answers SYSTEM_ERROR for that one request)."""
        out: list[Any] = []
        groups = self._groups
        n = len(cmds)
        i = 0
        while i < n:
            cmd = cmds[i]
            owner = groups.get(cmd.code) if self.accepting else None
            j = i + 1
            if owner is not None:
                while j < n and groups.get(cmds[j].code) is owner:
                    j += 1
            if j - i < 2:
                try:
                    out.append(self(conn, cmd))
                except Exception as e:
                    out.append(e)
                i = j
                continue
            results: list[Any] = [None] * (j - i)
            at: list[int] = []
            run: list[RemotingCommand] = []
            check = self.check
            for k in range(i, j):
                c = cmds[k]
                try:
                    refused = check(conn, c) if check is not None else None
                except Exception as e:
                    refused = e
                if refused is None:
                    at.append(k - i)
                    run.append(c)
                elif not (c.flag & FLAG_ONEWAY and isinstance(refused, RemotingCommand)):
                    results[k - i] = refused
            if run:
                if _requester() is not conn:
                    REQUESTER.set(conn)
                try:
                    got = owner.dispatch_group(conn, run)
                except Exception as e:
                    got = [e] * len(run)
                for k, r in zip(at, got, strict=True):
                    results[k] = r
            out.extend(results)
            i = j
        return out

    def add(self, table: Mapping[int, Any]) -> None:
        for code, handler in table.items():
            self._table[int(code)] = handler
            owner = getattr(handler, "__self__", None)
            if (owner is not None and hasattr(owner, "dispatch_group")
                    and getattr(handler, "__func__", None) is getattr(type(owner), "dispatch", None)):
                self._groups[int(code)] = owner
            else:
                self._groups.pop(int(code), None)

    def without(self, codes: Iterable[int]) -> Router:
        """A router with the same handlers except `codes` (the VIP channel has no PULL_MESSAGE)."""
        drop = {int(c) for c in codes}
        router = Router({c: h for c, h in self._table.items() if c not in drop})
        router.check = self.check
        return router

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._table)
