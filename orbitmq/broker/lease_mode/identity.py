"""The replica id of a broker in lease mode: stable across restarts, never 0 (0 is the master's id on the name
servers), persisted as `cluster#broker#id` in `<storePathRootDir>/leaseBrokerId` (the controller mode's identity
file format, written atomically). The first start derives it from the broker address, so the members of a group get
different ids without talking to each other; the id identifies the replica in AutoSwitch HA handshakes, the
SyncStateSet and the slave's name-server registration.
"""

from __future__ import annotations

import zlib

from orbitmq.base.errors import ConfigError
from orbitmq.broker.controller_mode.identity import BrokerIdentity, IdentityFiles

MAX_ID = (1 << 31) - 1  # clients keep broker ids in 32-bit ints


def derive_id(broker_addr: str) -> int:
    """1 .. MAX_ID - 1 from the address (crc32: the same on every platform and Python run)."""
    return 1 + zlib.crc32(broker_addr.encode("utf-8")) % (MAX_ID - 1)


def lease_broker_id(path: str, cluster: str, broker: str, broker_addr: str) -> int:
    """The persisted id, or a derived one written now. ConfigError when the file belongs to another group or is
    unreadable (one line)."""
    files = IdentityFiles(path)
    ident = files.load()
    if ident is not None:
        if (ident.cluster_name, ident.broker_name) != (cluster, broker):
            raise ConfigError(f"lease broker id file {path} belongs to {ident.cluster_name}/{ident.broker_name}, not "
                              f"brokerClusterName={cluster} brokerName={broker}")
        if ident.broker_id <= 0:
            raise ConfigError(f"lease broker id file {path}: id {ident.broker_id} must be > 0")
        return ident.broker_id
    bid = derive_id(broker_addr)
    try:
        files.write(BrokerIdentity(cluster, broker, bid))
    except OSError as e:
        raise ConfigError(f"cannot write lease broker id file {path}: {e.strerror or e}") from None
    return bid
