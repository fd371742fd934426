"""lab.models.batching: texts longest first, stable among equal lengths, cut into batches of at most batch_size."""
from __future__ import annotations

import numpy as np

from lab.models.batching import length_batches


def test_order_is_longest_first_and_stable_for_equal_lengths():
    order, batches = length_batches([3, 10, 3, 7, 10], batch_size=2)
    assert order.tolist() == [1, 4, 3, 0, 2]
    assert [b.tolist() for b in batches] == [[1, 4], [3, 0], [2]]


def test_batches_cover_every_text_once():
    lengths = np.random.default_rng(0).integers(1, 50, size=101)
    order, batches = length_batches(lengths.tolist(), batch_size=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(101))
    assert all(len(b) <= 8 for b in batches) and len(batches) == 13
    assert (np.diff(lengths[order]) <= 0).all()


def test_no_texts_no_batches():
    order, batches = length_batches([], batch_size=4)
    assert order.tolist() == [] and batches == []
