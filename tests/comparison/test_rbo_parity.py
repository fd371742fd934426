"""Parity of lab.metrics.overlap.rbo with the ``rbo`` package (changyaochen/rbo 0.1.3, RankingSimilarity.rbo_ext,
Eq. (32) of Webber, Moffat & Zobel 2010): random rankings of equal and of different lengths, partly overlapping."""
from __future__ import annotations

import numpy as np
import pytest

from lab.metrics.overlap import rbo

reference = pytest.importorskip("rbo", reason="the rbo package (requirements-nodeps.txt) is the reference")


@pytest.mark.parametrize("p", [0.5, 0.9, 0.98])
def test_rbo_matches_the_reference_on_random_rankings(p):
    rng = np.random.default_rng(0)
    for _ in range(200):
        pool = [f"d{i}" for i in range(40)]
        la, lb = rng.integers(1, 25, size=2)
        a = list(rng.choice(pool, size=la, replace=False))
        b = list(rng.choice(pool, size=lb, replace=False))
        assert rbo(a, b, p) == pytest.approx(reference.RankingSimilarity(a, b).rbo_ext(p=p), abs=1e-12)
