"""The controller-assigned broker id flow (broker/controller_mode/identity.py) against the real controller state
machine (orbitmq.controller.state), with a crash injected at every step of 1012 -> temp file -> 1013 -> identity
file: a restarted broker always ends with one id, the controller never hands that id to anyone else, and a file
that names another cluster/broker refuses start-up with one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orbitmq.base.errors import ConfigError
from orbitmq.broker.controller_mode.identity import BrokerIdentity, IdentityFiles, IdRefused, obtain_broker_id
from orbitmq.controller.state import ReplicasInfoManager
from orbitmq.protocol import ResponseCode
from orbitmq.protocol.bodies.controller import ApplyBrokerIdRequestHeader, GetNextBrokerIdRequestHeader

CLUSTER, NAME = "DefaultCluster", "broker-a"


class Crash(Exception):
    """A kill -9 at this point."""


class Controller:
    """The controller's id rules, from the real state machine (events applied at once, as after a commit)."""

    def __init__(self) -> None:
        self.state = ReplicasInfoManager()
        self.crash_after_apply = False

    async def next_broker_id(self, cluster: str, broker: str) -> int:
        r = self.state.get_next_broker_id(GetNextBrokerIdRequestHeader(cluster, broker))
        return int(r.header["nextBrokerId"])

    async def apply_broker_id(self, cluster: str, broker: str, broker_id: int, check_code: str) -> tuple[bool, str]:
        r = self.state.apply_broker_id(ApplyBrokerIdRequestHeader(cluster, broker, broker_id, check_code))
        for e in r.events:
            self.state.apply(e)
        if self.crash_after_apply:
            self.crash_after_apply = False
            raise Crash("after the controller applied the id, before the answer")
        if r.code == ResponseCode.SUCCESS:
            return True, ""
        return False, r.remark or ""

    def ids(self) -> dict[int, str]:
        bri = self.state.replica_info[NAME]
        return {bid: v[0] for bid, v in bri.broker_ids.items()}


class CrashingFiles(IdentityFiles):
    def __init__(self, path: str, crash: str | None) -> None:
        super().__init__(path)
        self.crash = crash

    def _maybe(self, point: str) -> None:
        if self.crash == point:
            self.crash = None
            raise Crash(point)

    def write_temp(self, ident: BrokerIdentity) -> None:
        self._maybe("before temp")
        super().write_temp(ident)
        self._maybe("after temp")

    def write(self, ident: BrokerIdentity) -> None:
        self._maybe("before identity")
        super().write(ident)
        self._maybe("after identity")

    def delete_temp(self) -> None:
        super().delete_temp()


def obtain(files: IdentityFiles, ctl: Controller, addr: str = "127.0.0.1:10911", now: int = 1000) -> int:
    return asyncio.run(obtain_broker_id(files, CLUSTER, NAME, addr, now, ctl))


@pytest.mark.parametrize("crash", [None, "before temp", "after temp", "apply", "before identity", "after identity"])
def test_a_crash_at_any_step_ends_with_one_id(tmp_path: Path, crash: str | None) -> None:
    ctl = Controller()
    path = str(tmp_path / "brokerIdentity")
    files = CrashingFiles(path, None if crash == "apply" else crash)
    ctl.crash_after_apply = crash == "apply"
    if crash is not None:
        with pytest.raises(Crash):
            obtain(files, ctl, now=1000)
    bid = obtain(IdentityFiles(path), ctl, now=2000)  # the restart (a new check code if it must start over)
    assert bid == 1
    assert Path(path).read_text() == f"{CLUSTER}#{NAME}#1"
    assert not Path(path + "-temp").exists()
    assert ctl.ids() == {1: "127.0.0.1:10911"}
    assert obtain(IdentityFiles(path), ctl, now=3000) == 1  # and again: the file, no controller call
    other = obtain(IdentityFiles(str(tmp_path / "other")), ctl, addr="127.0.0.1:20911", now=4000)
    assert other == 2


def test_temp_id_taken_meanwhile_starts_over(tmp_path: Path) -> None:
    ctl = Controller()
    path = str(tmp_path / "brokerIdentity")
    with pytest.raises(Crash):
        obtain(CrashingFiles(path, "after temp"), ctl)
    assert BrokerIdentity.parse(Path(path + "-temp").read_text(), temp=True).broker_id == 1
    assert obtain(IdentityFiles(str(tmp_path / "b2")), ctl, addr="127.0.0.1:20911") == 1  # another broker took 1
    assert obtain(IdentityFiles(path), ctl) == 2
    assert ctl.ids() == {1: "127.0.0.1:20911", 2: "127.0.0.1:10911"}


def test_apply_refused_deletes_the_temp_file(tmp_path: Path) -> None:
    class Racing(Controller):
        async def next_broker_id(self, cluster: str, broker: str) -> int:
            nxt = await super().next_broker_id(cluster, broker)
            await super().apply_broker_id(cluster, broker, nxt, "127.0.0.1:1;1")  # someone else wins the race
            return nxt

    ctl = Racing()
    path = str(tmp_path / "brokerIdentity")
    with pytest.raises(IdRefused):
        obtain(IdentityFiles(path), ctl)
    assert not Path(path + "-temp").exists() and not Path(path).exists()


def test_names_in_the_files_must_match(tmp_path: Path) -> None:
    path = tmp_path / "brokerIdentity"
    path.write_text("OtherCluster#broker-a#3")
    with pytest.raises(ConfigError, match="belongs to OtherCluster/broker-a"):
        obtain(IdentityFiles(str(path)), Controller())
    path.unlink()
    Path(str(path) + "-temp").write_text(f"{CLUSTER}#broker-b#1#127.0.0.1:1;5")
    with pytest.raises(ConfigError, match="broker-b"):
        obtain(IdentityFiles(str(path)), Controller())


def test_parse_rejects_torn_files() -> None:
    assert BrokerIdentity.parse("c#b#4\n", temp=False) == BrokerIdentity("c", "b", 4)
    assert BrokerIdentity.parse("c#b#4#1.2.3.4:5;6", temp=True).check_code == "1.2.3.4:5;6"
    for bad in ("", "c#b", "c#b#x", "c#b#-1", "#b#1"):
        with pytest.raises(ValueError):
            BrokerIdentity.parse(bad, temp=False)
    torn = BrokerIdentity("c", "b", 1, "a;1")
    assert torn.encode() == b"c#b#1#a;1"


def test_unreadable_identity_file_refuses(tmp_path: Path) -> None:
    path = tmp_path / "brokerIdentity"
    path.write_text("garbage")
    with pytest.raises(ConfigError, match="unreadable"):
        IdentityFiles(str(path)).load()
    Path(str(path) + "-temp").write_text("garbage")
    assert IdentityFiles(str(path)).load_temp() is None  # only a note of an unfinished apply
