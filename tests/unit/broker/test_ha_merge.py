"""Slave metadata sync: merged consumer offsets never roll back."""

from orbitmq.broker.services.ha import merge_offsets


def test_merge_keeps_the_larger_offset_per_queue_and_adds_new_keys():
    local = {"T@G": {0: 10, 1: 5}, "U@G": {0: 3}}
    master = {"T@G": {0: 8, 1: 9, 2: 1}, "V@G": {0: 4}}
    assert merge_offsets(local, master) == {"T@G": {0: 10, 1: 9, 2: 1}, "U@G": {0: 3}, "V@G": {0: 4}}
    assert local == {"T@G": {0: 10, 1: 5}, "U@G": {0: 3}}  # inputs untouched
