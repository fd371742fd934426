"""gc_paused: the cyclic collector off inside the block, its state restored after (nested, on error, already off)."""
from __future__ import annotations

import gc

import pytest

from lab.core.alloc import gc_paused


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_restored_after_nested_blocks():
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block restores the outer block's state: still paused
    assert gc.isenabled()


def test_restored_when_the_block_raises():
    gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_objects_are_still_freed_by_reference_counting():
    import weakref

    class Node:
        pass

    with gc_paused():
        node = Node()
        ref = weakref.ref(node)
        del node
        assert ref() is None  # acyclic: freed at once, collector or not
