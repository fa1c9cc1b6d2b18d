"""Pure rules of the broker side of controller mode (broker/controller_mode/rules.py): which role notification is
acted on (epoch rules) and the master's write-lease arithmetic."""

from __future__ import annotations

import pytest

from orbitmq.broker.controller_mode.rules import (
    Action,
    RoleInfo,
    WriteLease,
    decide,
    lease_deadline,
    renews_lease,
)

SELF = 2
ADDR = "127.0.0.1:10911"


def info(master: int | None, epoch: int, sss: set[int] | None = None, sss_epoch: int = 1) -> RoleInfo:
    return RoleInfo(master, ADDR if master is not None else None, epoch, frozenset(sss or set()), sss_epoch)


def test_role_unknown_takes_any_answer() -> None:
    assert decide(-1, -1, False, SELF, info(SELF, 3)) is Action.BECOME_MASTER
    assert decide(-1, -1, False, SELF, info(1, 3)) is Action.BECOME_SLAVE
    assert decide(-1, -1, False, SELF, info(None, 0)) is Action.ELECT  # a new group: ask for the first election


def test_only_a_greater_master_epoch_changes_the_role() -> None:
    assert decide(5, 2, False, SELF, info(1, 5)) is Action.IGNORE  # same epoch again (poll after push)
    assert decide(5, 2, False, SELF, info(SELF, 4)) is Action.IGNORE  # a stale push from before
    assert decide(5, 2, True, SELF, info(1, 4)) is Action.IGNORE
    assert decide(5, 2, True, SELF, info(1, 6)) is Action.BECOME_SLAVE  # a higher epoch: step down at once
    assert decide(5, 2, False, SELF, info(SELF, 6)) is Action.BECOME_MASTER
    assert decide(5, 2, True, SELF, info(SELF, 6)) is Action.BECOME_MASTER  # re-elected: a new epoch to record


def test_sync_state_set_updates_need_equal_master_epoch_and_a_greater_set_epoch() -> None:
    assert decide(5, 2, True, SELF, info(SELF, 5, {1, 2}, 3)) is Action.UPDATE_SYNC_STATE_SET
    assert decide(5, 2, True, SELF, info(SELF, 5, {1, 2}, 2)) is Action.IGNORE  # not newer (#6342)
    assert decide(5, 2, True, SELF, info(SELF, 5, {1, 2}, 1)) is Action.IGNORE
    assert decide(5, 2, False, SELF, info(1, 5, {1, 2}, 3)) is Action.IGNORE  # a slave keeps no set
    assert decide(5, 2, True, SELF, info(SELF, 4, {1, 2}, 9)) is Action.IGNORE  # older master epoch


def test_no_master_asks_for_an_election_unless_stale() -> None:
    assert decide(5, 2, True, SELF, info(None, 6)) is Action.ELECT  # the caller steps down first
    assert decide(5, 2, False, SELF, info(None, 5)) is Action.ELECT
    assert decide(5, 2, False, SELF, info(None, 4)) is Action.IGNORE
    no_addr = RoleInfo(1, None, 6)
    assert not no_addr.has_master and decide(5, 2, False, SELF, no_addr) is Action.ELECT


def test_lease_renewal_needs_us_as_master_of_our_epoch() -> None:
    assert renews_lease(5, True, SELF, info(SELF, 5))
    assert not renews_lease(5, True, SELF, info(1, 5))
    assert not renews_lease(5, True, SELF, info(SELF, 6))  # a new epoch: renewed after the switch
    assert not renews_lease(5, False, SELF, info(SELF, 5))
    assert not renews_lease(5, True, SELF, info(None, 5))


def test_lease_deadline_is_before_a_heartbeat_timeout_election() -> None:
    # last heartbeat before the request left at >= send - interval; the controller may elect at
    # >= that + timeout; the lease ends one more interval earlier
    timeout, interval = 10_000, 1_000
    send = 50_000
    deadline = lease_deadline(send, timeout, interval)
    assert deadline == 58_000
    assert deadline < (send - interval) + timeout


def test_a_late_heartbeat_shortens_the_lease() -> None:
    timeout, interval = 10_000, 1_000
    assert lease_deadline(50_000, timeout, interval, 49_500) == 58_000  # heartbeat within an interval: unchanged
    assert lease_deadline(50_000, timeout, interval, 45_000) == 54_000  # 5 s old: its expiry minus one interval
    lease = WriteLease(timeout, interval)
    lease.renew(1, 50_000, 45_000)
    assert lease.until_ms == 54_000


def test_write_lease_lifecycle() -> None:
    lease = WriteLease(3000, 500)
    assert not lease.valid(0, 1)
    lease.renew(1, 1000)
    assert lease.valid(1000, 1) and lease.valid(2999, 1) and not lease.valid(3000, 1)
    assert lease.remaining_ms(2000) == 1000
    assert not lease.valid(1500, 2)  # another epoch
    lease.renew(1, 800)  # a late answer to an older request never shortens it
    assert lease.until_ms == 3000
    lease.renew(1, 1500)
    assert lease.until_ms == 3500
    lease.renew(2, 1600)  # a new epoch starts its own lease
    assert lease.epoch == 2 and lease.until_ms == 3600 and not lease.valid(1700, 1)
    lease.drop()
    assert not lease.valid(1700, 2) and lease.remaining_ms(1700) == 0 and lease.drops == 1


def test_lease_needs_timeout_above_two_intervals() -> None:
    with pytest.raises(ValueError):
        WriteLease(1000, 500)
