"""Agreement between two raters on graded labels: Cohen's kappa, unweighted or weighted.

Cohen 1960, "A coefficient of agreement for nominal scales"; weighted kappa: Cohen 1968, "Weighted kappa".
kappa = 1 - sum(w * observed) / sum(w * expected), where ``observed`` is the confusion matrix of the two raters
as proportions, ``expected`` the outer product of their marginals, and w the disagreement weights: 0 on the
diagonal and 1 elsewhere (unweighted), |i - j| (linear) or (i - j)^2 (quadratic), over the index of the labels
in ``labels``. Same definition as scikit-learn's ``cohen_kappa_score`` (checked in tests). When the expected
disagreement is 0 (both raters always give the same single label) kappa is undefined: NaN.

Interval (:func:`kappa_interval`): percentile bootstrap over the rated items (Efron & Tibshirani 1993): the items
are resampled with replacement ``n_resamples`` times (seeded), kappa is computed on each resample, and the
``(1 - confidence) / 2`` and ``1 - (1 - confidence) / 2`` quantiles are the bounds. Resamples where kappa is
undefined (every resampled item got one label from a rater) are dropped; when more than half are dropped the
interval is undefined (NaN, NaN): the items are too few or too uniform to say anything.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

WEIGHTS = (None, "linear", "quadratic")


def cohen_kappa(a: Sequence[Any], b: Sequence[Any], labels: Sequence[Any] | None = None,
                weights: str | None = None) -> float:
    """Cohen's kappa of two equal-length label sequences (see the module docstring); NaN when undefined."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r}: choose None, 'linear' or 'quadratic'")
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: {len(a)} labels against {len(b)}; pass one label per item from each rater")
    if not len(a):
        return math.nan
    labels = list(labels) if labels is not None else sorted(set(a) | set(b))
    index = {lab: i for i, lab in enumerate(labels)}
    unknown = sorted({x for x in (*a, *b) if x not in index}, key=str)
    if unknown:
        raise ValueError(f"cohen_kappa: labels {unknown} are not in labels={labels}")
    n = len(labels)
    observed = np.zeros((n, n))
    for x, y in zip(a, b, strict=True):
        observed[index[x], index[y]] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    i, j = np.indices((n, n))
    w = (i != j).astype(float) if weights is None else np.abs(i - j) if weights == "linear" else (i - j) ** 2.0
    den = float((w * expected).sum())
    if den == 0:
        return math.nan
    return 1.0 - float((w * observed).sum()) / den


def kappa_interval(a: Sequence[Any], b: Sequence[Any], labels: Sequence[Any] | None = None, weights: str | None = None,
                   n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`cohen_kappa` (see the module docstring); (NaN, NaN) when undefined."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    if len(a) != len(b):
        raise ValueError(f"kappa_interval: {len(a)} labels against {len(b)}; pass one label per item from each rater")
    if not len(a):
        return math.nan, math.nan
    labels = list(labels) if labels is not None else sorted(set(a) | set(b))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(a), size=(n_resamples, len(a)))
    values = np.array([cohen_kappa([a[i] for i in row], [b[i] for i in row], labels, weights) for row in draws])
    values = values[~np.isnan(values)]
    if values.size * 2 < n_resamples:
        return math.nan, math.nan
    alpha = 1.0 - confidence
    lo, hi = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)
