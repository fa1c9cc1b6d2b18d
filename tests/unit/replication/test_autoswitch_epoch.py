"""EpochCache rules of AutoSwitch HA (RocketMQ's EpochFileCache with the #9689 same-offset rule) and the classic
methods kept working."""

from orbitmq.replication.epoch import UNBOUNDED, EpochCache


def test_append_rule():
    c = EpochCache()
    assert c.append(1, 0)
    assert not c.append(1, 100)  # same epoch
    assert not c.append(0, 100)  # older epoch
    assert c.append(3, 100)
    assert not c.append(4, 50)  # starts before the last entry
    assert c.append(5, 100)  # same start: replaces epoch 3, which holds no data (#9689)
    assert c.entries == [(1, 0), (5, 100)]
    assert c.find(5) == 1 and c.find(3) == -1


def test_end_offsets_and_ranges():
    c = EpochCache([(1, 0), (2, 100), (4, 250)])
    assert c.ranges() == [(1, 0, 100), (2, 100, 250), (4, 250, UNBOUNDED)]
    assert c.copy(max_offset=300).ranges()[-1] == (4, 250, 300)
    assert [c.index_at(x) for x in (0, 99, 100, 249, 250, 10_000)] == [0, 0, 1, 1, 2, 2]
    assert EpochCache([(3, 10)]).index_at(5) == -1


def test_truncations():
    c = EpochCache([(1, 0), (2, 100), (4, 250)])
    assert c.copy().truncate_suffix_by_epoch(2) and not c.copy().truncate_suffix_by_epoch(5)
    d = c.copy()
    d.truncate_suffix_by_epoch(2)
    assert d.entries == [(1, 0)]
    d = c.copy()
    d.truncate_suffix_by_offset(250)  # an entry starting AT the cut goes
    assert d.entries == [(1, 0), (2, 100)]
    d = c.copy()
    assert not d.truncate_suffix_by_offset(251)
    d = c.copy()
    d.truncate_prefix_by_offset(99)  # epoch 1 still has data at 99
    assert d.entries == c.entries
    d.truncate_prefix_by_offset(100)
    assert d.entries == [(2, 100), (4, 250)]
    d.truncate_prefix_by_offset(1 << 40)  # the last entry always stays
    assert d.entries == [(4, 250)]


def test_consistent_point_cases():
    master = EpochCache([(1, 0), (2, 100), (5, 300)], max_offset=400)
    # slave behind in epoch 2: agrees up to its own end
    assert EpochCache([(1, 0), (2, 100)], max_offset=250).find_consistent_point(master) == 250
    # old master with a tail of epoch 2 written after the new master (epoch 5) took over at 300
    assert EpochCache([(1, 0), (2, 100)], max_offset=380).find_consistent_point(master) == 300
    # a divergent epoch 3 the master never saw: back to the end of epoch 2 on the master
    assert EpochCache([(1, 0), (2, 100), (3, 200)], max_offset=260).find_consistent_point(master) == 200
    # same epoch number at another start offset does not match; older ones are tried
    assert EpochCache([(1, 0), (2, 120)], max_offset=200).find_consistent_point(master) == 100
    assert EpochCache([(7, 0)], max_offset=10).find_consistent_point(master) == -1
    assert EpochCache().find_consistent_point(master) == -1


def test_handshake_entries_are_the_newest():
    c = EpochCache([(e, e * 10) for e in range(1, 1501)])
    entries = c.entries_for_handshake()
    assert len(entries) == 1000 and entries[0] == (501, 5010) and entries[-1] == (1500, 15000)


def test_classic_methods_unchanged():
    c = EpochCache([(1, 0), (3, 500)])
    assert c.newest == 3 and c.is_stale(2) and not c.is_stale(3)
    assert not c.observe(3, 900)
    assert c.observe(4, 900) and c.epoch_at(899) == 3 and c.epoch_at(900) == 4
