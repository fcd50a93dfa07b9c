"""The collection policy, without Qt: thresholds, bulk freezes, freeze and release."""

import gc

import pytest

from qtquant.app import gcpolicy


@pytest.fixture
def clean_gc():
    was = gc.isenabled()
    gc.collect()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_bulk_of_new_objects_is_frozen_not_walked(clean_gc):
    c = gcpolicy.Collector()
    c.take_over()
    assert not gc.isenabled()
    keep = [[i] for i in range(gcpolicy.BULK_OBJECTS + 1000)]  # a result that just arrived
    frozen = gc.get_freeze_count()
    assert c.check() == -1 and c.bulk_freezes == 1
    assert gc.get_freeze_count() >= frozen + len(keep)
    gcpolicy.model_closing()
    assert gc.get_freeze_count() == 0


def test_thresholds_pick_the_generation(clean_gc):
    c = gcpolicy.Collector()
    c.take_over()
    gc.collect()
    assert c.check() is None  # nothing new
    old = gc.get_threshold()
    try:
        gc.set_threshold(10, 1000, 1000)
        junk = [[i] for i in range(50)]
        assert c.check() == 0 and c.collections == [1, 0, 0]
        del junk
    finally:
        gc.set_threshold(*old)


def test_long_lived(clean_gc):
    gcpolicy.long_lived()
    assert gc.get_freeze_count() > 0
    gcpolicy.model_closing()
    assert gc.get_freeze_count() == 0


def test_a_batch_command_collects_the_young_generation_less_often(clean_gc):
    before = gc.get_threshold()
    gc.enable()
    try:
        gcpolicy.batch()
        now = gc.get_threshold()
        assert now[0] == gcpolicy.BATCH_THRESHOLD > before[0]
        assert now[1:] == before[1:]  # the older generations keep their pace
        collected = []
        gc.callbacks.append(lambda phase, info: collected.append(info["generation"]) if phase == "stop" else None)
        try:
            gc.collect()  # reset the young count
            del collected[:]
            keep = [[i] for i in range(5000)]  # 5,000 new containers: several collections at 700
            assert keep and not collected
        finally:
            gc.callbacks.pop()
    finally:
        gc.set_threshold(*before)
