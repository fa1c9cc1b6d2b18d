"""RocketMQ 4.x ACL request signatures (the plain ACL's "AccessKey / Signature" scheme), shared by both sides.

Signature = Base64(HMAC-SHA1(secretKey, content)), where content is the values of the request's extension fields,
sorted by field name, concatenated (UTF-8), followed by the body bytes. The field `Signature` itself and the
`_UNIQUE_KEY_QUERY` flag (added after signing by the Java admin tools) are left out. The broker recomputes the
content from the fields it received, so any client that signs the fields it sends (the Java AclClientRPCHook,
the C++ client's ClientRPCHook, which also sends and signs `OnsChannel`) verifies unchanged.

Pure: no I/O, imports only the standard library and protocol, so the SDK signs without importing the broker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.header_json import ext_value_to_str

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # sent (and signed) by the C++ and older Java clients; not interpreted
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # never part of the signed content
# OrbitMQ servers sign what they send each other with this access key and the cluster secret (clusterSecret)
CLUSTER_ACCESS_KEY = "OrbitMQCluster"
_UNSIGNED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """What a client signs with. `security_token` is sent and signed when set (RocketMQ's STS token field)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("access_key and secret_key must both be non-empty")

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r})"


def _java_order(key: str) -> bytes:
    """Sort key equal to Java's String.compareTo (UTF-16 code units), which orders RocketMQ's TreeMap."""
    return key.encode("utf-16-be", "surrogatepass")


def signing_content(ext_fields: dict[str, str] | None, body: bytes | None) -> bytes:
    """The bytes a request's signature covers: the sorted extension field values, then the body."""
    parts: list[str] = []
    if ext_fields:
        keys = list(ext_fields)
        # ASCII names (every RocketMQ header) sort the same by code point as by UTF-16 unit: no key function
        keys.sort(key=None if all(k.isascii() for k in keys) else _java_order)
        for key in keys:
            value = ext_fields[key]
            if key not in _UNSIGNED and value is not None:  # None is not sent; others as the wire spells them
                parts.append(value if isinstance(value, str) else ext_value_to_str(value))
    text = "".join(parts).encode("utf-8", "surrogatepass")
    return text + body if body else text


def calc_signature(content: bytes, secret_key: str) -> str:
    mac = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(mac).decode("ascii")


def signature_matches(content: bytes, secret_key: str, signature: str | None) -> bool:
    """Constant-time comparison of a received signature with the one `secret_key` gives."""
    if not signature:
        return False
    return hmac.compare_digest(calc_signature(content, secret_key).encode("ascii"),
                               signature.encode("utf-8", "surrogatepass"))


def cluster_credentials(secret: str) -> SessionCredentials:
    """What brokers sign with when a cluster secret is configured (name servers and ACL brokers verify it)."""
    return SessionCredentials(CLUSTER_ACCESS_KEY, secret)


def signed_with(cmd: RemotingCommand, creds: SessionCredentials) -> bool:
    """`cmd` carries creds' access key and a valid signature made with creds' secret."""
    ext = cmd.ext_fields
    if not ext or ext.get(ACCESS_KEY) != creds.access_key:
        return False
    return signature_matches(signing_content(ext, cmd.body), creds.secret_key, ext.get(SIGNATURE))


def sign_request(cmd: RemotingCommand, creds: SessionCredentials) -> RemotingCommand:
    """Add AccessKey (+ SecurityToken) and the Signature over the request to `cmd` in place; returns it.

    A request signed twice (a retry of the same command object) gets a fresh, equal signature."""
    ext = dict(cmd.ext_fields) if cmd.ext_fields else {}
    ext.pop(SIGNATURE, None)
    ext[ACCESS_KEY] = creds.access_key
    if creds.security_token is not None:
        ext[SECURITY_TOKEN] = creds.security_token
    ext[SIGNATURE] = calc_signature(signing_content(ext, cmd.body), creds.secret_key)
    cmd.ext_fields = ext
    return cmd
