"""Controller-assigned broker id (RocketMQ 5.1.1+ flow): the `brokerIdentity` file (`cluster#broker#id`), the
`brokerIdentity-temp` file (`cluster#broker#id#<addr>;<millis>`) and obtain_broker_id(), which walks
GET_NEXT_BROKER_ID (1012) -> temp file -> APPLY_BROKER_ID (1013) -> identity file so that a crash at any point
resumes without taking a second id. Files are written atomically. The controller calls go through `IdCalls`; no
sockets here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Protocol

from orbitmq.base.errors import ConfigError
from orbitmq.base.fsio import atomic_write

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    check_code: str | None = None  # only in the temp file: "<brokerAddress>;<epochMillis>"

    def encode(self) -> bytes:
        parts = [self.cluster_name, self.broker_name, str(self.broker_id)]
        if self.check_code is not None:
            parts.append(self.check_code)
        return "#".join(parts).encode("utf-8")

    @classmethod
    def parse(cls, text: str, temp: bool) -> BrokerIdentity:
        """ValueError when the text is not a complete identity (a torn or foreign file)."""
        parts = text.strip().split("#")
        if len(parts) != (4 if temp else 3) or not parts[0] or not parts[1]:
            raise ValueError(f"expected {'cluster#broker#id#checkCode' if temp else 'cluster#broker#id'}")
        bid = int(parts[2])
        if bid < 0:
            raise ValueError(f"broker id {bid} is negative")
        return cls(parts[0], parts[1], bid, parts[3] if temp else None)


class IdentityFiles:
    """The two files; `path` is storePathBrokerIdentity, the temp file is `path + "-temp"`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.temp_path = path + "-temp"

    def _load(self, path: str, temp: bool) -> BrokerIdentity | None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ConfigError(f"cannot read broker identity file {path}: {e.strerror or e}") from None
        try:
            return BrokerIdentity.parse(text, temp)
        except ValueError as e:
            if temp:  # a temp file is only a note of an unfinished apply: start over
                log.warning("broker identity temp file %s unreadable (%s): ignored", path, e)
                return None
            raise ConfigError(f"broker identity file {path} is unreadable: {e}") from None

    def load(self) -> BrokerIdentity | None:
        return self._load(self.path, False)

    def load_temp(self) -> BrokerIdentity | None:
        return self._load(self.temp_path, True)

    def write(self, ident: BrokerIdentity) -> None:
        atomic_write(self.path, BrokerIdentity(ident.cluster_name, ident.broker_name, ident.broker_id).encode())

    def write_temp(self, ident: BrokerIdentity) -> None:
        atomic_write(self.temp_path, ident.encode())

    def delete_temp(self) -> None:
        for p in (self.temp_path, self.temp_path + ".bak"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class IdCalls(Protocol):
    """The controller leader, as the id flow needs it. Transport errors raise (OrbitMQError)."""

    async def next_broker_id(self, cluster: str, broker: str) -> int: ...

    async def apply_broker_id(self, cluster: str, broker: str, broker_id: int, check_code: str) -> tuple[bool, str]:
        """(True, "") when applied (or already applied with this check code); (False, why) when refused."""
        ...


class IdRefused(Exception):
    """The controller refused the id (taken by another broker meanwhile): the caller retries the flow."""


def _check_names(ident: BrokerIdentity, cluster: str, broker: str, path: str) -> None:
    if ident.cluster_name != cluster or ident.broker_name != broker:
        raise ConfigError(f"broker identity file {path} belongs to {ident.cluster_name}/{ident.broker_name}, "
                          f"not brokerClusterName={cluster} brokerName={broker}: fix the config or move the store")


async def obtain_broker_id(files: IdentityFiles, cluster: str, broker: str, broker_addr: str, now_ms: int,
                           calls: IdCalls) -> int:
    """The broker's controller id, from the identity file or by the 1012 -> 1013 flow (§ "Identity" of the design
    note). ConfigError when a file names another cluster/broker; IdRefused when an apply was refused."""
    ident = files.load()
    if ident is not None:
        _check_names(ident, cluster, broker, files.path)
        files.delete_temp()  # a crash after the identity file was written, before the temp file was removed
        return ident.broker_id
    temp = files.load_temp()
    if temp is not None:
        _check_names(temp, cluster, broker, files.temp_path)
        assert temp.check_code is not None
        ok, why = await calls.apply_broker_id(cluster, broker, temp.broker_id, temp.check_code)
        if ok:  # the apply of a previous run succeeded (idempotent with the same check code) or now does
            files.write(temp)
            files.delete_temp()
            return temp.broker_id
        log.info("re-applying broker id %d from %s refused (%s): asking for a new id", temp.broker_id,
                 files.temp_path, why)
        files.delete_temp()
    next_id = await calls.next_broker_id(cluster, broker)
    temp = BrokerIdentity(cluster, broker, next_id, f"{broker_addr};{now_ms}")
    files.write_temp(temp)
    assert temp.check_code is not None
    ok, why = await calls.apply_broker_id(cluster, broker, next_id, temp.check_code)
    if not ok:
        files.delete_temp()
        raise IdRefused(f"applying broker id {next_id} refused: {why}")
    files.write(temp)
    files.delete_temp()
    return next_id
