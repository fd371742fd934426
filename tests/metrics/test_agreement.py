"""Cohen's kappa against scikit-learn's cohen_kappa_score and a hand-computed case."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lab.metrics.agreement import cohen_kappa


def test_hand_computed_binary():
    # 10 items: agree on 4 yes + 3 no; observed agreement 0.7; marginals a: 6 yes, b: 5 yes
    a = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    b = [1, 1, 1, 1, 0, 0, 1, 0, 0, 0]
    pe = 0.6 * 0.5 + 0.4 * 0.5
    assert cohen_kappa(a, b) == pytest.approx((0.7 - pe) / (1 - pe))


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_matches_sklearn(weights):
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(7)
    for _ in range(20):
        a = rng.integers(0, 4, size=40)
        b = np.clip(a + rng.integers(-1, 2, size=40), 0, 3)
        ours = cohen_kappa(a.tolist(), b.tolist(), labels=[0, 1, 2, 3], weights=weights)
        assert ours == pytest.approx(sk.cohen_kappa_score(a, b, labels=[0, 1, 2, 3], weights=weights), abs=1e-12)


def test_edge_cases():
    assert math.isnan(cohen_kappa([], []))
    assert math.isnan(cohen_kappa([2, 2], [2, 2]))  # one label only: undefined
    assert cohen_kappa([0, 3], [0, 3], labels=range(4)) == 1.0
    with pytest.raises(ValueError, match="not in labels"):
        cohen_kappa([5], [1], labels=[0, 1])
    with pytest.raises(ValueError, match="weights"):
        cohen_kappa([1], [1], weights="cubic")


def test_kappa_interval_brackets_kappa_and_is_seeded():
    from lab.metrics.agreement import kappa_interval

    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, size=60).tolist()
    b = [x if rng.random() < 0.8 else 1 - x for x in a]
    k = cohen_kappa(a, b)
    lo, hi = kappa_interval(a, b, n_resamples=500, seed=1)
    assert -1 <= lo < k < hi <= 1
    assert kappa_interval(a, b, n_resamples=500, seed=1) == (lo, hi)
    lo2, hi2 = kappa_interval(a * 4, b * 4, n_resamples=500, seed=1)  # four times the items: a narrower interval
    assert hi2 - lo2 < hi - lo


def test_kappa_interval_undefined_when_one_label():
    from lab.metrics.agreement import kappa_interval

    assert all(math.isnan(x) for x in kappa_interval([1, 1, 1], [1, 1, 1]))
    assert all(math.isnan(x) for x in kappa_interval([], []))
