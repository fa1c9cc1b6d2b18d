"""RocketMQ 4.x compatible plain ACL: plain_acl.yml accounts, address white lists, per-request permissions.

Layer 4 (above protocol and remoting, below broker). The signature scheme itself is orbitmq.protocol.acl_sign,
which the SDK uses without importing this package. docs/design/security.md describes the model.
"""

from orbitmq.acl.config import AclConfigError, PlainAclConfig, parse_plain_acl
from orbitmq.acl.validator import AclDenied, PlainAclValidator

__all__ = ["AclConfigError", "AclDenied", "PlainAclConfig", "PlainAclValidator", "parse_plain_acl"]
