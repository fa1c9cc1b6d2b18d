"""PlainAclValidator: RocketMQ 4.x PlainAccessValidator semantics on one request.

Order: a global white-listed address passes; otherwise the request needs an AccessKey of a known account; the
account's whiteRemoteAddress passes; otherwise the Signature must match (acl_sign) and the account must hold the
needed permission on every resource (resources.request_resources) and be admin for admin-only codes. A refusal
is AclDenied with RocketMQ's wording; the broker answers it as NO_PERMISSION.
"""

from __future__ import annotations

from orbitmq.acl.address import host_of
from orbitmq.acl.config import PUB, SUB, Account, PlainAclConfig, check_permission, perm_name
from orbitmq.acl.resources import ADMIN_CODES, ResourceError, request_resources
from orbitmq.base.errors import OrbitMQError
from orbitmq.protocol import RemotingCommand
from orbitmq.protocol.acl_sign import (
    ACCESS_KEY,
    CLUSTER_ACCESS_KEY,
    SIGNATURE,
    SessionCredentials,
    signature_matches,
    signed_with,
    signing_content,
)

_RETRY = "%RETRY%"


class AclDenied(OrbitMQError):
    """The request is not allowed; str() is the remark sent back with NO_PERMISSION."""


def _describe(resource: str) -> str:
    return f"group {resource[len(_RETRY):]}" if resource.startswith(_RETRY) else f"topic {resource}"


class PlainAclValidator:
    """Holds the current PlainAclConfig (replaced whole on reload: a request sees one version). `cluster`: the
    cluster secret's credentials; a request signed with them comes from a broker of the cluster and is trusted."""

    __slots__ = ("config", "cluster")

    def __init__(self, config: PlainAclConfig, cluster: SessionCredentials | None = None) -> None:
        self.config = config
        self.cluster = cluster

    def validate(self, remote_addr: str, cmd: RemotingCommand) -> Account | None:
        """None when the address is globally white-listed, else the account the request acts as.
        Raises AclDenied."""
        cfg = self.config
        host = host_of(remote_addr)
        for match in cfg.global_white:
            if match(host):
                return None
        ext = cmd.ext_fields
        access_key = ext.get(ACCESS_KEY) if ext else None
        if not access_key:
            raise AclDenied(f"No accessKey is configured (ACL is enabled: sign requests; code {cmd.code})")
        if access_key == CLUSTER_ACCESS_KEY and self.cluster is not None:
            if signed_with(cmd, self.cluster):
                return None
            raise AclDenied("Check signature failed for the cluster secret")
        account = cfg.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"No acl config for {access_key}")
        if account.white(host):
            return account
        if not signature_matches(signing_content(ext, cmd.body), account.secret_key, ext.get(SIGNATURE)):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        self._check_perm(account, cmd)
        return account

    @staticmethod
    def _check_perm(account: Account, cmd: RemotingCommand) -> None:
        if cmd.code in ADMIN_CODES and not account.admin:
            raise AclDenied(f"Need admin permission for request code={cmd.code}, but accessKey="
                            f"{account.access_key} is not")
        try:
            needed = request_resources(cmd)
        except ResourceError as e:
            raise AclDenied(str(e)) from None
        if not needed or (account.admin and not account.perms):
            return
        for resource, perm in needed.items():
            owned = account.perms.get(resource)
            kind = "permission"
            if owned is None:
                kind = "default permission"
                owned = account.default_group_perm if resource.startswith(_RETRY) else account.default_topic_perm
            for bit in (PUB, SUB):  # each needed permission on its own (PUB and SUB on one resource: both)
                if perm & bit and not check_permission(bit, owned):
                    raise AclDenied(f"No {kind} for {_describe(resource)}: needs {perm_name(bit)}, "
                                    f"accessKey={account.access_key} has {perm_name(owned)}")
