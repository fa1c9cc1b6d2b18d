"""Cluster-secret proof on an HA connection (clusterSecret; docs/design/security.md), before any log data.

The master sends b"OMQA" + a fresh 16-byte nonce; the slave answers HMAC-SHA256(secret, b"orbitmq-ha\\0" + nonce)
(32 bytes) within AUTH_TIMEOUT_S. A wrong or missing answer closes the connection before a byte of the CommitLog
is sent. A fresh nonce per connection: a recorded answer is useless later. Without a secret nothing is exchanged
(the plain RocketMQ HA protocol).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os

from orbitmq.base.errors import OrbitMQError

log = logging.getLogger("orbitmq.replication")

MAGIC = b"OMQA"
NONCE_LEN = 16
PROOF_LEN = 32
AUTH_TIMEOUT_S = 5.0


class HAAuthError(OrbitMQError):
    """The peer did not prove the cluster secret (or did not ask for it)."""


def proof(secret: str, nonce: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), b"orbitmq-ha\0" + nonce, hashlib.sha256).digest()


async def challenge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: str) -> None:
    """Master side. Raises HAAuthError (or TimeoutError / IncompleteReadError) unless the peer proves `secret`."""
    nonce = os.urandom(NONCE_LEN)
    writer.write(MAGIC + nonce)
    await writer.drain()
    async with asyncio.timeout(AUTH_TIMEOUT_S):
        answer = await reader.readexactly(PROOF_LEN)
    if not hmac.compare_digest(answer, proof(secret, nonce)):
        raise HAAuthError("HA peer did not prove the cluster secret (clusterSecret differs or is unset there)")


async def prove(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: str) -> None:
    """Slave side: answer the master's challenge."""
    try:
        async with asyncio.timeout(AUTH_TIMEOUT_S):
            head = await reader.readexactly(len(MAGIC) + NONCE_LEN)
    except TimeoutError:
        raise HAAuthError("HA master sent no challenge (clusterSecret is set here but not on the master?)") from None
    if head[:len(MAGIC)] != MAGIC:
        raise HAAuthError("HA master sent no challenge (clusterSecret is set here but not on the master?)")
    writer.write(proof(secret, head[len(MAGIC):]))
    await writer.drain()


async def authenticated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: str,
                        address: str) -> bool:
    """Master: challenge a new HA connection; False (connection closed, one log line) if it fails."""
    try:
        await challenge(reader, writer, secret)
        return True
    except (HAAuthError, OSError, asyncio.IncompleteReadError) as e:
        reason = str(e) or type(e).__name__
        log.warning("HA connection from %s refused: %s", address, reason)
        writer.close()
        return False
