"""AclGuard: the broker's request check (a Router hook) and the reload of plain_acl.yml.

check(conn, cmd) returns None to let the request through, or the NO_PERMISSION response to send instead.
The broker calls reload_if_changed() periodically in a worker thread (RocketMQ's FileWatchService polls too):
when the file's bytes change it is parsed and replaces the configuration whole; a file that does not parse
(or is missing) leaves the last good configuration in force and is logged once per distinct content.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

from orbitmq.acl.config import AclConfigError, parse_plain_acl
from orbitmq.acl.validator import AclDenied, PlainAclValidator
from orbitmq.protocol import RemotingCommand, ResponseCode
from orbitmq.protocol.acl_sign import cluster_credentials

log = logging.getLogger("orbitmq.acl")

_NO_PERMISSION = int(ResponseCode.NO_PERMISSION)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _parse(path: str, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AclConfigError(f"ACL file {path} is not UTF-8: {e.reason}") from None
    return parse_plain_acl(text, path)


class AclGuard:
    def __init__(self, path: str, cluster_secret: str = "") -> None:
        """Loads `path` now; AclConfigError (one line) when it cannot be read or parsed. `cluster_secret`:
        requests signed with it (other brokers of the cluster) pass without an account."""
        self.path = path
        try:
            data = _read(path)
        except OSError as e:
            raise AclConfigError(f"cannot read ACL file {path} (aclFilePath): {e.strerror or e}") from None
        self.validator = PlainAclValidator(_parse(path, data),
                                           cluster_credentials(cluster_secret) if cluster_secret else None)
        self._digest = hashlib.sha256(data).digest()
        self._bad_digest: bytes | None = None
        log.info("ACL enabled: %s, %d accounts, %d global white patterns", path,
                 len(self.validator.config.accounts), len(self.validator.config.global_white_patterns))
        self.reloads = 0
        self.denied = 0

    # ---- request check ------------------------------------------------------------------------------------
    def check(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            self.validator.validate(conn.remote_addr, cmd)
        except AclDenied as e:
            self.denied += 1
            log.debug("ACL denied code %d from %s: %s", cmd.code, conn.remote_addr, e)
            return cmd.response(_NO_PERMISSION, str(e))
        return None

    # ---- reload -------------------------------------------------------------------------------------------
    def reload_if_changed(self) -> bool:
        """Blocking (run in a thread): re-read the file; True when a new configuration took effect."""
        try:
            data = _read(self.path)
        except OSError as e:
            digest = f"missing:{e.errno}".encode()
            if digest != self._bad_digest:
                self._bad_digest = digest
                log.error("ACL file %s cannot be read (%s): keeping the last good configuration", self.path,
                          e.strerror or e)
            return False
        digest = hashlib.sha256(data).digest()
        if digest == self._digest or digest == self._bad_digest:
            return False
        try:
            config = _parse(self.path, data)
        except AclConfigError as e:
            self._bad_digest = digest
            log.error("%s: keeping the last good ACL configuration", e)
            return False
        self.validator.config = config  # one attribute store: a request sees the old or the new config whole
        self._digest = digest
        self._bad_digest = None
        self.reloads += 1
        log.info("ACL file %s reloaded: %d accounts, %d global white patterns", self.path, len(config.accounts),
                 len(config.global_white_patterns))
        return True


def resolve_acl_file(acl_file_path: str, rocketmq_home: str, env_home: str | None) -> str:
    """aclFilePath, else <rocketmqHome>/conf/plain_acl.yml, else <$ROCKETMQ_HOME>/conf/plain_acl.yml (RocketMQ's
    default location). AclConfigError when none is set."""
    if acl_file_path:
        return acl_file_path
    home = rocketmq_home or env_home or ""
    if not home:
        raise AclConfigError("aclEnable=true needs aclFilePath, rocketmqHome or $ROCKETMQ_HOME "
                             "(the default file is <rocketmqHome>/conf/plain_acl.yml)")
    return os.path.join(home, "conf", "plain_acl.yml")
