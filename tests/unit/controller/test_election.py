"""DefaultElectPolicy: candidate sets, the old master, designated ids, ordering (without RocketMQ's bugs)."""

from __future__ import annotations

from orbitmq.controller.election import CandidateInfo, DefaultElectPolicy


def policy(alive: set[int], info: dict[int, CandidateInfo] | None = None) -> DefaultElectPolicy:
    return DefaultElectPolicy(lambda b: b in alive, None if info is None else info.get)


def test_only_alive_sync_state_members() -> None:
    p = policy({2, 4})
    assert p.elect({1, 2, 3}, None, 1) == 2
    assert p.elect({1, 3}, None, 1) is None


def test_old_master_kept_when_alive() -> None:
    info = {1: CandidateInfo(1, 10), 2: CandidateInfo(5, 999)}
    assert policy({1, 2}, info).elect({1, 2}, None, 1) == 1
    assert policy({1, 2}, info).elect({1, 2}, None, 1, prefer=1) == 1
    assert policy({1, 2}, info).elect({1, 2}, None, 1, prefer=2) == 2


def test_designated_never_falls_back() -> None:
    assert policy({1, 2}).elect({1, 2}, None, None, prefer=3) is None
    assert policy({1, 2}).elect({1, 2}, {1, 2, 3}, None, prefer=3) is None  # 3 not alive
    assert policy({1, 2, 3}).elect({1, 2}, {1, 2, 3}, None, prefer=3) == 3  # unclean pool holds it


def test_order_epoch_then_offset_then_priority_then_id() -> None:
    info = {1: CandidateInfo(2, 100, 9), 2: CandidateInfo(3, 50, 9), 3: CandidateInfo(3, 60, 9)}
    assert policy({1, 2, 3}, info).elect({1, 2, 3}, None, None) == 3
    info = {1: CandidateInfo(3, 60, 5), 2: CandidateInfo(3, 60, 1), 3: CandidateInfo(3, 60, 1)}
    assert policy({1, 2, 3}, info).elect({1, 2, 3}, None, None) == 2  # equal ranks kept, lowest id wins


def test_no_int_overflow_on_big_offset_gaps() -> None:
    info = {1: CandidateInfo(1, 0), 2: CandidateInfo(1, 2**33 + 5)}
    assert policy({1, 2}, info).elect({1, 2}, None, None) == 2


def test_missing_live_info_ranks_last() -> None:
    info = {2: CandidateInfo(0, 0)}
    assert policy({1, 2}, info).elect({1, 2}, None, None) == 2


def test_without_live_info_getter_lowest_id() -> None:
    assert policy({3, 2}).elect({3, 2}, None, None) == 2


def test_unclean_only_after_clean_fails() -> None:
    info = {1: CandidateInfo(1, 1), 4: CandidateInfo(1, 1000)}
    assert policy({1, 4}, info).elect({1}, {1, 4}, None) == 1
    assert policy({4}, info).elect({1}, {1, 4}, None) == 4
    assert policy({4}, info).elect({1}, None, None) is None
