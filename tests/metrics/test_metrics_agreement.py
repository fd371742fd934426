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
