"""Uncertainty of per-query metrics: percentile bootstrap CIs, paired bootstrap and sign-flip tests.

Conventions
- Resampling unit: the query. A bootstrap resample draws n query indices with replacement (n = number of
  queries); resampled means are computed in numpy for all metrics at once (gathered values, or per-query
  draw counts times the values). Indices are drawn in blocks of BLOCK from ``np.random.default_rng(seed)``,
  so results depend only on the seed, n and n_resamples.
- Confidence intervals are percentile intervals: the (1 - confidence) / 2 and 1 - (1 - confidence) / 2
  quantiles of the resampled means, numpy's linear interpolation; except for a metric whose per-query values
  are all 0 or 1 (hit rate, recall with one relevant document, an acceptance rate), which gets the Wilson score
  interval (Wilson 1927; Brown, Cai & DasGupta 2001): the bootstrap of 12 hits out of 12 is [1, 1], Wilson's
  is [0.76, 1]. ``bootstrap_ci(...).attrs["interval"]`` says which interval each metric got.
- Questions needed for a target half-width h (:func:`questions_needed`): for a 0/1 metric the n at which the
  Wilson interval of the observed rate is at most h on both sides; for other metrics the normal
  approximation n = (z * sd / h)^2 with the per-query standard deviation observed.
- Power of a paired comparison (:func:`min_detectable_diff`, :func:`queries_to_detect`): the normal
  approximation to a two-sided paired test on per-query differences d (:data:`POWER_METHOD`): with n queries
  the smallest true mean difference detected with probability ``power`` at level ``alpha`` is
  (z_{1-alpha/2} + z_{power}) * sd(d) / sqrt(n); the queries needed to detect a difference delta are
  ceil(((z_{1-alpha/2} + z_{power}) * sd(d) / delta)^2). sd(d) is the sample standard deviation (ddof 1) of the
  observed differences; the sign-flip test the leaderboards run has about the same power at these n.
- p-values are two-sided and use the add-one rule p = (1 + #{|T*| >= |T|}) / (1 + B) (Phipson & Smyth 2010),
  so they are never 0 and are valid at every B. T* of the paired bootstrap is centred on the observed mean
  difference (the null distribution of a shift); T* of the randomisation test flips the sign of each
  query's difference at random (exact null under exchangeability of the two systems).
- Multiple comparisons (:func:`adjust_pvalues`): Holm's step-down adjustment (Holm 1979; controls the
  family-wise error rate under any dependence) or Benjamini-Hochberg's step-up adjustment (Benjamini & Hochberg
  1995; controls the false discovery rate for independent or positively dependent tests), as R's ``p.adjust``
  and statsmodels' ``multipletests`` compute them: adjusted values are monotone in the raw ones, capped at 1.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

if TYPE_CHECKING:
    from lab.metrics.ranking import Evaluation

#: Resamples drawn per block (memory: BLOCK x n indices); part of the seed -> resamples mapping, keep it fixed.
BLOCK = 128
#: Up to this many metrics, resampled means gather the drawn values; above, draw counts times values.
GATHER_MAX_COLUMNS = 4
#: Resamples of a paired test (sign flips, bootstrap of the mean difference) unless a caller passes fewer for speed.
N_RESAMPLES = 10_000
#: Resamples of a metric's bootstrap CI (the count lab.tracking.results logs CIs with).
CI_RESAMPLES = 1000
#: Relative tolerance when comparing a resampled statistic with the observed one (floating-point ties).
_TIE_TOL = 1e-12


def _as_matrix(per_query: Any) -> tuple[np.ndarray, list[str]]:
    """(n, m) float64 matrix and metric names from a DataFrame (numeric columns), Series or array."""
    if isinstance(per_query, pd.DataFrame):
        num = per_query.select_dtypes(include=[np.number, "bool"])
        return num.to_numpy(dtype=np.float64), [str(c) for c in num.columns]
    if isinstance(per_query, pd.Series):
        return per_query.to_numpy(dtype=np.float64)[:, None], [str(per_query.name or "value")]
    x = np.asarray(per_query, dtype=np.float64)
    if x.ndim == 1:
        return x[:, None], ["value"]
    if x.ndim != 2:
        raise ValueError(f"per_query: expected a 1-D or 2-D array (queries x metrics), got shape {x.shape}")
    return x, [str(i) for i in range(x.shape[1])]


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """Limit BLAS to one thread inside the resampling loop: the products are small (BLOCK x n x m), and on a
    shared machine a multi-threaded BLAS waiting for busy cores was measured 20x slower than one thread."""
    limits: contextlib.AbstractContextManager[Any] = threadpool_limits(1, user_api="blas")
    return limits


def bootstrap_indices(n: int, n_resamples: int, rng: np.random.Generator, block: int = BLOCK
                      ) -> Iterator[np.ndarray]:
    """Yield (b, n) int64 matrices of query indices drawn with replacement, b <= block, n_resamples rows in all."""
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        yield rng.integers(0, n, size=(b, n), dtype=np.int64)
        done += b


def bootstrap_means(values: np.ndarray, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, m) means of the columns of ``values`` (n, m) over bootstrap resamples of its rows.

    Resample r draws n row indices with replacement (same draws for any m). Few columns: the drawn values are
    gathered and summed; many: per-row draw counts (bincount) times values, one matrix product per block.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n, m = values.shape
    if n == 0:
        raise ValueError("bootstrap: no queries to resample")
    rng = np.random.default_rng(seed)
    out = np.empty((n_resamples, m))
    row = 0
    with _one_blas_thread():
        for idx in bootstrap_indices(n, n_resamples, rng):
            b = idx.shape[0]
            if m <= GATHER_MAX_COLUMNS:
                out[row : row + b] = values[idx].sum(axis=1)
            else:
                idx += np.arange(b, dtype=np.int64)[:, None] * n
                counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
                out[row : row + b] = counts.astype(np.float64) @ values
            row += b
    means: np.ndarray = out / n
    return means


def _bounds(confidence: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    alpha = 1.0 - confidence
    return alpha / 2.0, 1.0 - alpha / 2.0


def bootstrap_ci(per_query: Any, n_resamples: int = CI_RESAMPLES, confidence: float = 0.95,
                 seed: int = 0) -> pd.DataFrame:
    """Percentile bootstrap CI of the mean of every metric (column) of a per-query table.

    per_query: DataFrame (queries x metrics; non-numeric columns are ignored), Series or array.
    Returns a DataFrame with columns metric, mean (of the original queries), ci_low, ci_high; one row per
    metric, in column order. Seeded: the same input and seed give the same interval.
    """
    x, names = _as_matrix(per_query)
    if np.isnan(x).any():
        raise ValueError("bootstrap_ci: per_query holds NaN; score every query (0 for nothing retrieved)")
    lo, hi = _bounds(confidence)
    means = bootstrap_means(x, n_resamples, seed)
    q = np.quantile(means, [lo, hi], axis=0)
    kinds = {}
    for j, name in enumerate(names):
        col = x[:, j]
        if col.size and is_binary(col):
            q[0, j], q[1, j] = wilson_interval(int(col.sum()), int(col.size), confidence)
            kinds[name] = "wilson"
        else:
            kinds[name] = "percentile bootstrap"
    out = pd.DataFrame({"metric": names, "mean": x.mean(axis=0), "ci_low": q[0], "ci_high": q[1]})
    out.attrs["interval"] = kinds
    return out


def is_binary(values: ArrayLike) -> bool:
    """True when every value is 0 or 1 (a per-query hit / miss)."""
    v = np.asarray(values, dtype=np.float64)
    return bool(np.all((v == 0.0) | (v == 1.0)))


def _z(confidence: float) -> float:
    from scipy.stats import norm

    lo, hi = _bounds(confidence)
    return float(norm.ppf(hi))


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k / n; (0, 1) when n is 0. It never collapses to a point: 12 of 12
    gives [0.757, 1.0] at 95 %."""
    if n == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, float(mid - half)), min(1.0, float(mid + half))


def questions_needed(values: ArrayLike, half_width: float, confidence: float = 0.95, max_n: int = 10_000_000) -> int:
    """Questions needed for a CI of ``half_width`` on the mean of a metric, given its per-query ``values`` seen
    so far (see module conventions). 0/1 values: the smallest n whose Wilson interval at the observed rate is
    within ``half_width`` of it on both sides (at least the n of the worst case p = 0.5 when nothing varies yet
    and the observed rate is 0 or 1 with fewer than 30 values: a small all-hit set says little about p)."""
    if half_width <= 0:
        raise ValueError(f"half_width={half_width}: must be > 0")
    v = np.asarray(values, dtype=np.float64).ravel()
    z = _z(confidence)
    if v.size == 0:
        raise ValueError("questions_needed: no per-query values")
    if is_binary(v):
        p = float(v.mean())
        if p in (0.0, 1.0) and v.size < 30:
            p = 0.5
        lo_n, hi_n = 1, max_n
        if _wilson_within(p, hi_n, half_width, confidence) is False:
            return max_n
        while lo_n < hi_n:  # smallest n whose interval is within half_width (monotone in n)
            mid = (lo_n + hi_n) // 2
            if _wilson_within(p, mid, half_width, confidence):
                hi_n = mid
            else:
                lo_n = mid + 1
        return lo_n
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return max(1, int(np.ceil((z * sd / half_width) ** 2)))


def _wilson_within(p: float, n: int, half_width: float, confidence: float) -> bool:
    lo, hi = wilson_interval(int(round(p * n)), n, confidence)
    return max(hi - lo, 0.0) / 2 <= half_width


#: How :func:`min_detectable_diff` and :func:`queries_to_detect` compute (printed beside their figures).
POWER_METHOD = "paired normal approximation: (z(1-alpha/2) + z(power)) * sd(d) / sqrt(n)"


def _power_z(alpha: float, power: float) -> float:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: the significance level must lie strictly between 0 and 1, e.g. 0.05")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power={power}: must lie strictly between 0 and 1, e.g. 0.8")
    from scipy.stats import norm

    return float(norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power))


def _diff_sd(diffs: ArrayLike) -> tuple[float, int]:
    d = np.asarray(diffs, dtype=np.float64).ravel()
    d = d[~np.isnan(d)]
    if d.size < 2:
        raise ValueError(f"power: {d.size} per-query difference(s); at least 2 are needed for a standard deviation")
    return float(d.std(ddof=1)), int(d.size)


def min_detectable_diff(diffs: ArrayLike, alpha: float = 0.05, power: float = 0.8, n: int | None = None) -> float:
    """The smallest true mean difference a paired test on ``n`` queries (default: as many as ``diffs``) detects
    with probability ``power`` at two-sided level ``alpha``, given the observed per-query differences ``diffs``
    (see the module conventions, :data:`POWER_METHOD`). 0 when every difference is the same."""
    sd, size = _diff_sd(diffs)
    n = size if n is None else int(n)
    if n < 1:
        raise ValueError(f"n={n}: the number of queries must be >= 1")
    return _power_z(alpha, power) * sd / float(np.sqrt(n))


def queries_to_detect(diffs: ArrayLike, delta: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Queries a paired test needs to detect a true mean difference ``delta`` with probability ``power`` at
    two-sided level ``alpha``, the per-query differences having the spread of ``diffs`` (module conventions).
    None when ``delta`` is 0 (no number of queries separates equal means)."""
    sd, _ = _diff_sd(diffs)
    delta = abs(float(delta))
    if delta == 0.0:
        return None
    return max(2, int(np.ceil((_power_z(alpha, power) * sd / delta) ** 2)))


def _p_value(null: np.ndarray, observed: float) -> float:
    """Two-sided add-one p-value of ``observed`` against resampled statistics ``null``."""
    extreme = np.abs(null) >= abs(observed) * (1.0 - _TIE_TOL) - 1e-15
    return float((1 + np.count_nonzero(extreme)) / (1 + null.size))


def sign_flip_means(diff: np.ndarray, n_resamples: int, seed: int = 0, block: int = 1024) -> np.ndarray:
    """Means of ``diff`` with the sign of each element flipped at random (probability 1/2), n_resamples times.

    Each resample is n random bits (``rng.bytes``); a set bit flips that query. sum(s * d) = sum(d) - 2 *
    sum(d over flipped queries), and the flipped sum is read byte by byte from a table of the 256 subset sums
    of each group of 8 queries (8x fewer operations than one per bit).
    """
    d = np.asarray(diff, dtype=np.float64).ravel()
    n = d.size
    nbytes = (n + 7) // 8
    padded = np.zeros(nbytes * 8)
    padded[:n] = d
    subset = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)  # (256, 8)
    table = (padded.reshape(nbytes, 8) @ subset.T).ravel()  # [group * 256 + byte] = sum of flipped d
    offsets = np.arange(nbytes, dtype=np.intp) * 256
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples)
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        byte = np.frombuffer(rng.bytes(b * nbytes), dtype=np.uint8).reshape(b, nbytes)
        out[done : done + b] = np.take(table, byte + offsets).sum(axis=1)
        done += b
    flipped: np.ndarray = (d.sum() - 2.0 * out) / n
    return flipped


def paired_test(a: ArrayLike, b: ArrayLike, n_resamples: int = N_RESAMPLES, seed: int = 0,
                confidence: float = 0.95) -> dict[str, Any]:
    """Paired comparison of two systems scored on the same queries (a[i] and b[i] are the same query).

    Returns dict(diff = mean(a - b), ci_low, ci_high (percentile bootstrap CI of the mean difference),
    p_bootstrap (two-sided paired bootstrap test: resampled mean differences centred on diff),
    p_permutation (two-sided randomisation test: sign flips of the per-query differences), n).
    Series are aligned on their index first (they must hold the same queries).
    """
    if isinstance(a, pd.Series) and isinstance(b, pd.Series):
        if set(a.index) != set(b.index) or len(a) != len(b):
            raise ValueError("paired_test: the two Series hold different queries; align them first (see compare)")
        b = b.loc[a.index]
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired_test: a has {x.size} queries, b has {y.size}; they must be paired")
    if x.size == 0:
        raise ValueError("paired_test: no queries")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("paired_test: NaN in the scores; score every query (0 for nothing retrieved)")
    d = x - y
    diff = float(d.mean())
    lo, hi = _bounds(confidence)
    boot = bootstrap_means(d[:, None], n_resamples, seed)[:, 0]
    ci = np.quantile(boot, [lo, hi])
    perm = sign_flip_means(d, n_resamples, seed + 1)
    return {
        "diff": diff,
        "ci_low": float(ci[0]),
        "ci_high": float(ci[1]),
        "p_bootstrap": _p_value(boot - diff, diff),
        "p_permutation": _p_value(perm, diff),
        "n": int(d.size),
    }


def compare(eval_a: Evaluation, eval_b: Evaluation, metric: str, n_resamples: int = N_RESAMPLES, seed: int = 0,
            confidence: float = 0.95) -> dict[str, Any]:
    """Paired test of ``metric`` between two Evaluations (A minus B).

    Alignment: on the union of the queries each Evaluation scored; a query scored by one only is given 0 in
    the other (with the same qrels and threshold both score the same queries, so this only matters when they
    differ; n_only_a / n_only_b say how many were filled). Refuses Evaluations of different
    metrics_version or rel_threshold. Returns paired_test's dict plus metric, mean_a, mean_b, n_only_a, n_only_b.
    """
    if eval_a.metrics_version != eval_b.metrics_version:
        raise ValueError(
            f"compare: metrics_version {eval_a.metrics_version!r} vs {eval_b.metrics_version!r}; "
            "re-evaluate both runs with the same raglab version")
    if getattr(eval_a, "rel_threshold", 1) != getattr(eval_b, "rel_threshold", 1):
        raise ValueError("compare: the two evaluations used different rel_threshold; re-evaluate with one")
    for name, ev in (("eval_a", eval_a), ("eval_b", eval_b)):
        if metric not in ev.per_query.columns:
            raise KeyError(f"compare: {name} has no metric {metric!r}; it has {list(ev.per_query.columns)}")
    sa, sb = eval_a.per_query[metric], eval_b.per_query[metric]
    union = sa.index.union(sb.index, sort=False)
    only_a = int((~sa.index.isin(sb.index)).sum())
    only_b = int((~sb.index.isin(sa.index)).sum())
    xa = sa.reindex(union, fill_value=0.0)
    xb = sb.reindex(union, fill_value=0.0)
    out = paired_test(xa.to_numpy(), xb.to_numpy(), n_resamples=n_resamples, seed=seed, confidence=confidence)
    return {"metric": metric, "mean_a": float(xa.mean()), "mean_b": float(xb.mean()),
            **out, "n_only_a": only_a, "n_only_b": only_b}



#: Multiple-comparison adjustments :func:`adjust_pvalues` knows.
CORRECTIONS = ("none", "holm", "bh")


def adjust_pvalues(p: ArrayLike, method: str = "holm") -> np.ndarray:
    """p-values adjusted for multiple comparisons (one family: every non-NaN value of ``p``).

    method: ``"none"`` (the raw values), ``"holm"`` (Holm 1979, step-down) or ``"bh"`` (Benjamini & Hochberg
    1995, step-up). With the m non-NaN values sorted ascending, p(1) <= ... <= p(m):

    - Holm: adj(i) = max over j <= i of min(1, (m - j + 1) * p(j)). Rejecting adj < alpha is Holm's procedure at
      level alpha (family-wise error rate <= alpha under any dependence between the tests).
    - BH: adj(i) = min over j >= i of min(1, m / j * p(j)). Rejecting adj <= alpha is the BH procedure at level
      alpha (false discovery rate <= alpha for independent or positively dependent tests).

    The values are R's ``p.adjust(p, "holm" / "BH")`` and statsmodels' ``multipletests(p, method="holm" /
    "fdr_bh")``: monotone (a smaller raw p never gets a larger adjusted one; tied raw values get the same
    adjusted value), never below the raw value, capped at 1. NaN entries (comparisons not made) stay NaN and do
    not count in m. Returns a float64 array of the shape of ``p``.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"method={method!r}: the correction must be one of {'|'.join(CORRECTIONS)}")
    x = np.array(p, dtype=np.float64, copy=True)
    flat = x.reshape(-1)
    ok = ~np.isnan(flat)
    vals = flat[ok]
    if vals.size and (vals.min() < 0.0 or vals.max() > 1.0):
        raise ValueError(f"p: p-values must lie in [0, 1] (NaN for a comparison not made); got {vals.min():g} to "
                         f"{vals.max():g}")
    m = vals.size
    if method == "none" or m == 0:
        return x
    order = np.argsort(vals, kind="stable")
    ranked = vals[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    else:
        adj = np.minimum.accumulate(np.minimum(1.0, m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
    out = np.empty(m)
    out[order] = adj
    flat[ok] = out
    return x
