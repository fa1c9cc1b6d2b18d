"""RocketMQ 4.x's ACL administration requests on an ACL-enabled broker (mqadmin updateAclConfig,
deleteAccessConfig, updateGlobalWhiteAddr, clusterAclConfigVersion; the Dashboard's ACL page):

- UPDATE_AND_CREATE_ACL_CONFIG (50): header accessKey, secretKey, whiteRemoteAddress, admin, defaultTopicPerm,
  defaultGroupPerm, topicPerms / groupPerms ("topicA=DENY,topicB=PUB|SUB"). A new account needs secretKey; for an
  existing one the fields present replace the old values, the others stay.
- DELETE_ACL_CONFIG (51): header accessKey.
- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): header globalWhiteAddrs ("a,b,c"; empty clears the list).
- GET_BROKER_CLUSTER_ACL_INFO (52): response header version (a DataVersion JSON), brokerName, brokerAddr,
  clusterName.

They are admin-only (resources.ADMIN_CODES). A change is validated as a whole file (the same parser as a reload),
written atomically (temporary file + rename, off the event loop) and applied at once; comments in the file are not
kept (RocketMQ rewrites the file the same way). A change that would not parse is refused with the reason.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import yaml

from orbitmq.acl.config import AclConfigError, parse_plain_acl
from orbitmq.acl.guard import AclGuard
from orbitmq.protocol import RemotingCommand, RequestCode

_FIELDS = ("secretKey", "whiteRemoteAddress", "defaultTopicPerm", "defaultGroupPerm")
# RocketMQ's UPDATE_AND_CREATE_ACL_CONFIG_FAILED / DELETE_ACL_CONFIG_FAILED
UPDATE_FAILED = 209
DELETE_FAILED = 210


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _load_doc(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc = yaml.load(f, Loader=yaml.BaseLoader)  # noqa: S506 - BaseLoader constructs no objects
    if doc in (None, ""):
        return {}
    if not isinstance(doc, dict):
        raise AclConfigError(f"{path}: the top level must be a mapping")
    return doc


def _dump(doc: dict[str, Any]) -> str:
    out = dict(doc)
    accounts = []
    for acc in out.get("accounts") or []:
        acc = dict(acc)
        if isinstance(acc.get("admin"), str):
            acc["admin"] = acc["admin"].strip().lower() in ("true", "yes", "on", "y")
        accounts.append(acc)
    out["accounts"] = accounts
    return yaml.safe_dump(out, sort_keys=False, default_flow_style=False, allow_unicode=True)


class AclAdmin:
    """Handlers for the four ACL administration codes, editing the file `guard` watches."""

    def __init__(self, guard: AclGuard, identity: Callable[[], tuple[str, str, str]]) -> None:
        """identity() -> (cluster name, broker name, broker address) for GET_BROKER_CLUSTER_ACL_INFO."""
        self.guard = guard
        self.identity = identity
        self._lock = asyncio.Lock()
        self.version_ms = int(time.time() * 1000)  # of the last change made here

    def handlers(self) -> dict[int, Any]:
        return {
            int(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG): self._update_account,
            int(RequestCode.DELETE_ACL_CONFIG): self._delete_account,
            int(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG): self._update_global_white,
            int(RequestCode.GET_BROKER_CLUSTER_ACL_INFO): self._version,
        }

    # ---- edits --------------------------------------------------------------------------------------------
    def _edit(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Blocking: read the file, apply `change`, check the result parses, write it atomically, apply it."""
        path = self.guard.path
        doc = _load_doc(path)
        change(doc)
        text = _dump(doc)
        parse_plain_acl(text, os.path.basename(path))  # AclConfigError: nothing written
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.guard.reload_if_changed()
        self.version_ms = int(time.time() * 1000)

    async def _run_edit(self, cmd: RemotingCommand, change: Callable[[dict[str, Any]], None],
                        failed_code: int) -> RemotingCommand:
        async with self._lock:
            try:
                await asyncio.to_thread(self._edit, change)
            except (AclConfigError, OSError, yaml.YAMLError, ValueError) as e:
                return cmd.response(failed_code, " ".join(str(e).split()) or type(e).__name__)
        return cmd.response()

    def _update_account(self, conn: Any, cmd: RemotingCommand) -> Any:
        ext = cmd.ext_fields or {}
        access_key = (ext.get("accessKey") or "").strip()
        if not access_key:
            return cmd.response(UPDATE_FAILED, "accessKey is required")

        def change(doc: dict[str, Any]) -> None:
            accounts = doc.get("accounts")
            if not isinstance(accounts, list):
                accounts = doc["accounts"] = []
            acc = next((a for a in accounts if isinstance(a, dict) and a.get("accessKey") == access_key), None)
            if acc is None:
                if not ext.get("secretKey"):
                    raise ValueError(f"a new account ({access_key}) needs a secretKey")
                acc = {"accessKey": access_key}
                accounts.append(acc)
            for name in _FIELDS:
                if ext.get(name) is not None:
                    acc[name] = ext[name]
            if ext.get("admin") is not None:
                acc["admin"] = ext["admin"]
            for name in ("topicPerms", "groupPerms"):
                if ext.get(name) is not None:
                    acc[name] = _split(ext[name])

        return self._run_edit(cmd, change, UPDATE_FAILED)

    def _delete_account(self, conn: Any, cmd: RemotingCommand) -> Any:
        access_key = ((cmd.ext_fields or {}).get("accessKey") or "").strip()

        def change(doc: dict[str, Any]) -> None:
            accounts = doc.get("accounts") if isinstance(doc.get("accounts"), list) else []
            kept = [a for a in accounts if not (isinstance(a, dict) and a.get("accessKey") == access_key)]
            if len(kept) == len(accounts):
                raise ValueError(f"no account with accessKey {access_key!r}")
            doc["accounts"] = kept

        return self._run_edit(cmd, change, DELETE_FAILED)

    def _update_global_white(self, conn: Any, cmd: RemotingCommand) -> Any:
        addrs = _split((cmd.ext_fields or {}).get("globalWhiteAddrs"))

        def change(doc: dict[str, Any]) -> None:
            doc["globalWhiteRemoteAddresses"] = addrs

        return self._run_edit(cmd, change, UPDATE_FAILED)

    def _version(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name, addr = self.identity()
        version = orjson.dumps({"counter": self.guard.reloads,
                                "timestamp": self.version_ms}).decode()
        return cmd.response(ext_fields={"version": version, "allAclFileVersion": "{}", "brokerName": name,
                                        "brokerAddr": addr, "clusterName": cluster})
