"""Prediction-powered inference (PPI, PPI++) for the mean of a per-query metric.

People grade a uniform random sample of queries (the human subset); a judge labels every query. The per-query
metric computed under the human labels is ``y``; under the judge's labels it is ``yhat``. Angelopoulos et al.
(Science 2023) estimate the mean of ``y`` over all queries by

    theta = lam * mean(yhat_unlabeled) + mean(y_human - lam * yhat_human)

(``yhat_unlabeled``: the judge on the queries people did not grade), with variance
``lam^2 var(yhat_unlabeled) / N + var(y_human - lam * yhat_human) / n`` and a normal (CLT) interval (widened here
for small n, below). ``lam = 1`` is plain PPI; PPI++ (Angelopoulos, Duchi & Zrnic 2023) picks the ``lam`` that
minimises the variance,

    lam = cov(y_human, yhat_human) / ((1 + n / N) * var(yhat_human + yhat_unlabeled pooled)),

clipped to [0, 1] (0 falls back to the human-only mean, 1 is plain PPI; a judge that does not co-vary with
people gets 0). The estimate is unbiased whatever the judge's errors, provided the human subset is a uniform
random sample of the queries. The arithmetic is ppi-python's (``ppi_py``): ``ppi_mean_pointestimate`` and
``ppi_mean_ci`` (called with ``lam=None`` for the tuned lambda, which that library clips to [0, 1] as above; its
standard error is read back from that interval); :func:`tuned_lambda` states the same lambda in numpy so it can be
reported.

**Small-sample correction.** ppi_py's interval is a normal one, point +- z(1 - alpha/2) * se, with population
(ddof 0) standard deviations and lambda tuned on the same sample. With 30 human-graded queries it covered the true
mean in only 0.910-0.925 of 200 random subsets in six of 63 SciFact cells (docs/results.md, "Prediction-powered
leaderboards"). Every interval here is therefore built in one shared step (:func:`small_sample_interval`) as

    point +- t_{n-1}(1 - alpha/2) * se * sqrt(n / (n - 1))

(Student t on n - 1 degrees of freedom, n the human-graded queries), keeping ppi_py's point estimate, its tuned
lambda and its standard error ``se``. The same step gives the human-only interval (:func:`human_mean`: the classical
t interval), the judge's bias, the paired difference and its p-value (a t test on the same statistic), so widths
still compare like for like. With many graded queries t -> z and sqrt(n / (n - 1)) -> 1: the correction fades.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from lab.data.types import Run
from lab.metrics.ranking import evaluate

#: How :func:`ppi_mean` estimates (logged and shown next to the figures).
PPI_METHOD = ("PPI++ (power-tuned prediction-powered mean, lambda clipped to [0, 1]; ppi-python), interval with a "
              "small-sample correction: Student t on n-1 degrees of freedom and se * sqrt(n/(n-1)), n the human-graded "
              "queries (ppi-python's normal interval under-covered at 30 queries)")
#: Fewest human-graded queries an estimate accepts.
MIN_HUMAN_QUERIES = 10


@dataclass(frozen=True)
class MeanEstimate:
    """One mean with its two-sided confidence interval at level 1 - alpha over ``n`` queries."""

    mean: float
    ci: tuple[float, float]
    n: int


@dataclass(frozen=True)
class PPIEstimate:
    """A prediction-powered mean: ``lam`` is the PPI++ power-tuning lambda actually used (1.0 = plain PPI,
    0.0 = the human-only mean); ``n_human`` queries were graded by people, ``n_judged`` have judge labels only."""

    mean: float
    ci: tuple[float, float]
    lam: float
    n_human: int
    n_judged: int
    #: ppi_py's standard error (population sd), before the small-sample step
    se: float = 0.0


def _ppi_py() -> Any:
    # ppi_py calls warnings.simplefilter("ignore") when imported, which would silence every warning of the
    # process; importing it inside catch_warnings restores the filters afterwards. Imported lazily (it pulls
    # statsmodels and numba, about 2 s).
    with warnings.catch_warnings():
        import ppi_py
    return ppi_py


def _vector(values: ArrayLike, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size and not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: per-query values must be finite numbers")
    return v


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: must lie strictly between 0 and 1, e.g. 0.05")


def _z(alpha: float) -> float:
    _check_alpha(alpha)
    from scipy.stats import norm

    return float(norm.ppf(1.0 - alpha / 2.0))


def interval_factor(n: int, alpha: float = 0.05) -> float:
    """The multiplier of a standard error (population sd convention) in every interval of this module:
    t_{n-1}(1 - alpha/2) * sqrt(n / (n - 1)), for ``n`` >= 2 human-graded (or averaged) queries."""
    _check_alpha(alpha)
    if n < 2:
        raise ValueError(f"n={n}: at least 2 values are needed for an interval")
    from scipy.stats import t

    return float(t.ppf(1.0 - alpha / 2.0, df=n - 1)) * math.sqrt(n / (n - 1))


def small_sample_interval(point: float, se: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """point +- t_{n-1}(1 - alpha/2) * se * sqrt(n / (n - 1)): the small-sample step every interval here takes.
    ``se`` is the standard error with population (ddof 0) standard deviations, as ppi_py computes it."""
    half = interval_factor(n, alpha) * se
    return point - half, point + half


def small_sample_p_value(point: float, se: float, n: int, null: float = 0.0) -> float:
    """Two-sided p-value of ``null`` for the same statistic: a t test on n - 1 degrees of freedom of
    (point - null) / (se * sqrt(n / (n - 1)))."""
    if n < 2:
        raise ValueError(f"n={n}: at least 2 values are needed for a test")
    from scipy.stats import t

    scale = se * math.sqrt(n / (n - 1))
    if scale <= 0.0:
        return 1.0 if point == null else 0.0
    return float(2.0 * t.sf(abs(point - null) / scale, df=n - 1))


def _mean_interval(y: np.ndarray, alpha: float, who: str, what: str) -> MeanEstimate:
    """The mean of ``y`` and its interval mean +- t_{n-1} * sd / sqrt(n) * sqrt(n / (n - 1)) (population sd, so
    the classical t interval)."""
    if y.size < 2:
        raise ValueError(f"{who}: {y.size} {what} value(s); at least 2 are needed for an interval")
    m = float(y.mean())
    ci = small_sample_interval(m, float(y.std()) / math.sqrt(y.size), int(y.size), alpha)
    return MeanEstimate(mean=m, ci=ci, n=int(y.size))


def human_mean(y_human: ArrayLike, alpha: float = 0.05) -> MeanEstimate:
    """The classical estimate from the human subset alone: its mean and the Student t interval
    mean +- t_{n-1}(1 - alpha/2) * sd / sqrt(n) (sample sd), the same small-sample step as the PPI interval."""
    return _mean_interval(_vector(y_human, "y_human"), alpha, "human_mean", "human-graded")


def judge_mean(yhat_all: ArrayLike, alpha: float = 0.05) -> MeanEstimate:
    """The judge's labels on every query, taken at face value: the mean and its t interval (n = the judged
    queries). The interval covers the judge's own mean, not the people's: it is biased by whatever the judge gets
    wrong."""
    return _mean_interval(_vector(yhat_all, "yhat_all"), alpha, "judge_mean", "judged")


def tuned_lambda(y_human: ArrayLike, yhat_human: ArrayLike, yhat_unlabeled: ArrayLike) -> float:
    """The PPI++ variance-minimising lambda for a mean, clipped to [0, 1]:
    cov(y, yhat) / ((1 + n/N) * var(yhat pooled over both sets)), with cov over the n human-graded queries
    (ddof 0) and var over all n + N judge values (ddof 1), as ppi_py computes it. 0 when the judge's values
    do not vary (a constant judge carries no information)."""
    y = _vector(y_human, "y_human")
    yh = _vector(yhat_human, "yhat_human")
    yu = _vector(yhat_unlabeled, "yhat_unlabeled")
    n, big_n = y.size, yu.size
    pooled = np.concatenate([yh, yu])
    var = float(np.var(pooled, ddof=1)) if pooled.size > 1 else 0.0
    if var <= 0.0 or big_n == 0:
        return 0.0
    cov = float(np.mean((y - y.mean()) * (yh - yh.mean())))
    lam = cov / ((1.0 + n / big_n) * var)
    return float(min(1.0, max(0.0, lam)))


def _check_ppi_inputs(y_human: ArrayLike, yhat_human: ArrayLike,
                      yhat_unlabeled: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = _vector(y_human, "y_human")
    yh = _vector(yhat_human, "yhat_human")
    yu = _vector(yhat_unlabeled, "yhat_unlabeled")
    if y.size != yh.size:
        raise ValueError(f"ppi_mean: {y.size} human values but {yh.size} judge values on the same queries")
    if y.size < 2:
        raise ValueError(f"ppi_mean: {y.size} human-graded value(s); at least 2 are needed")
    if yu.size < 1:
        raise ValueError("ppi_mean: no judge-only queries; with every query graded by people use human_mean")
    return y, yh, yu


def ppi_mean(y_human: ArrayLike, yhat_human: ArrayLike, yhat_unlabeled: ArrayLike, alpha: float = 0.05,
             power_tuning: bool = True) -> PPIEstimate:
    """Prediction-powered mean of the people's metric over all queries, with its two-sided 1 - alpha interval.

    ``y_human`` / ``yhat_human``: the metric under human / judge labels on the queries people graded (same
    order); ``yhat_unlabeled``: the metric under judge labels on the other queries. ``power_tuning`` (PPI++)
    lets ppi_py pick lambda (``lam=None``), clipped to [0, 1]; False is plain PPI (lambda 1). Valid when the
    human-graded queries are a uniform random sample of all queries."""
    y, yh, yu = _check_ppi_inputs(y_human, yhat_human, yhat_unlabeled)
    _check_alpha(alpha)
    ppi = _ppi_py()
    lam = tuned_lambda(y, yh, yu) if power_tuning else 1.0
    # lam=None makes ppi_py tune (and clip) lambda itself; a judge whose values never vary would give it 0 / 0,
    # so that case passes the lambda (0) explicitly.
    lam_arg: float | None = None if (power_tuning and np.var(np.concatenate([yh, yu])) > 0) else lam
    point = _scalar(ppi.ppi_mean_pointestimate(y, yh, yu, lam=lam_arg))
    # ppi_py's interval is point +- z * se; its standard error is read back from it, then widened for n
    lo, hi = ppi.ppi_mean_ci(y, yh, yu, alpha=alpha, lam=lam_arg)
    se = (_scalar(hi) - _scalar(lo)) / (2.0 * _z(alpha))
    return PPIEstimate(mean=point, ci=small_sample_interval(point, se, int(y.size), alpha), lam=lam,
                       n_human=int(y.size), n_judged=int(yu.size), se=se)


def _scalar(x: Any) -> float:
    return float(np.asarray(x, dtype=np.float64).ravel()[0])


def ppi_paired_difference(y_human_a: ArrayLike, y_human_b: ArrayLike, yhat_human_a: ArrayLike,
                          yhat_human_b: ArrayLike, yhat_unlabeled_a: ArrayLike, yhat_unlabeled_b: ArrayLike,
                          alpha: float = 0.05, power_tuning: bool = True) -> tuple[PPIEstimate, float]:
    """Prediction-powered mean difference a - b between two runs on the same queries: :func:`ppi_mean` on the
    per-query differences, plus the two-sided p-value of "no difference": :func:`small_sample_p_value` on that
    estimate and its standard error (ppi_py's ``ppi_mean_pval`` statistic, read on Student t with n - 1 degrees
    of freedom like the interval)."""
    ya, yb = _vector(y_human_a, "y_human_a"), _vector(y_human_b, "y_human_b")
    ha, hb = _vector(yhat_human_a, "yhat_human_a"), _vector(yhat_human_b, "yhat_human_b")
    ua, ub = _vector(yhat_unlabeled_a, "yhat_unlabeled_a"), _vector(yhat_unlabeled_b, "yhat_unlabeled_b")
    if not (ya.size == yb.size == ha.size == hb.size) or ua.size != ub.size:
        raise ValueError("ppi_paired_difference: the two runs must be scored on the same queries")
    d_y, d_h, d_u = ya - yb, ha - hb, ua - ub
    est = ppi_mean(d_y, d_h, d_u, alpha=alpha, power_tuning=power_tuning)
    # every difference identical: no spread to test against (small_sample_p_value gives 1 or 0)
    return est, small_sample_p_value(est.mean, est.se, est.n_human)


def effective_human_queries(estimate: PPIEstimate, y_human: ArrayLike, alpha: float = 0.05) -> float:
    """How many human-graded queries alone would give the same interval width as ``estimate``:
    n_human * (w_human / w_ppi)^2, with w_human the width of :func:`human_mean` on ``y_human``. Equals n_human
    when the judge adds nothing (lambda 0); inf when the PPI interval has width 0 but the human one does not."""
    h = human_mean(y_human, alpha=alpha)
    w_h = h.ci[1] - h.ci[0]
    w_p = estimate.ci[1] - estimate.ci[0]
    if w_p <= 0.0:
        return float(estimate.n_human) if w_h <= 0.0 else math.inf
    return float(estimate.n_human * (w_h / w_p) ** 2)


def per_query_under(run: Run, qrels: Mapping[str, Mapping[str, int]], metric: str,
                    qids: Sequence[str]) -> np.ndarray:
    """``metric`` of each query of ``qids`` (in that order) for the ranked lists of ``run``, scored against
    ``qrels`` (lab.metrics.evaluate). A query with no relevant document under ``qrels`` scores 0 for every run
    (it cannot tell runs apart), so both label sets give a value for every query."""
    sub = {q: dict(qrels[q]) for q in qids if q in qrels}
    values = dict.fromkeys(qids, 0.0)
    if any(g >= 1 for d in sub.values() for g in d.values()):
        pq = evaluate(sub, run, [metric]).per_query[metric]
        for q, v in pq.items():
            if str(q) in values and not math.isnan(float(v)):
                values[str(q)] = float(v)
    return np.array([values[q] for q in qids], dtype=np.float64)


def ppi_half_width(n: int, n_total: int, var_y: float, var_judge: float, cov: float, alpha: float = 0.05) -> float:
    """Half-width of the PPI++ interval with ``n`` human-graded queries among ``n_total`` (the rest judged only),
    for per-query spreads ``var_y`` (people), ``var_judge`` (judge) and their covariance ``cov``: the smallest over
    lambda in [0, 1] of sqrt(lambda^2 var_judge / (n_total - n) + var(y - lambda yhat) / n), times the
    small-sample factor :func:`interval_factor` (n) the reported interval takes."""
    big_n = n_total - n
    if n < 2 or big_n < 1:
        return math.inf
    lam = min(1.0, max(0.0, cov / ((1.0 + n / big_n) * var_judge))) if var_judge > 0 else 0.0
    var = lam * lam * var_judge / big_n + max(0.0, var_y - 2 * lam * cov + lam * lam * var_judge) / n
    return interval_factor(n, alpha) * math.sqrt(var)


def human_queries_needed(y_human: ArrayLike, yhat_human: ArrayLike, yhat_unlabeled: ArrayLike, half_width: float,
                         alpha: float = 0.05) -> dict[str, Any]:
    """How many human-graded queries (in all, counting those already graded) a PPI++ interval needs for a
    half-width of ``half_width``, the spreads estimated from this pilot (variance of people's and the judge's
    per-query values, their covariance), the set keeping its size n + N. ``{"ppi": n or None, "human_only":
    n or None, "n_total", "n_pilot"}``: None when even grading every query but one would not reach it (PPI), or when
    the set has fewer queries than needed (human only)."""
    y, yh, yu = _check_ppi_inputs(y_human, yhat_human, yhat_unlabeled)
    if half_width <= 0:
        raise ValueError(f"half_width={half_width}: must be > 0, e.g. 0.02")
    n_total = y.size + yu.size
    var_y = float(np.var(y))
    var_judge = float(np.var(np.concatenate([yh, yu]), ddof=1))
    cov = float(np.mean((y - y.mean()) * (yh - yh.mean())))
    ppi_n = None
    lo, hi = 2, n_total - 1
    if ppi_half_width(hi, n_total, var_y, var_judge, cov, alpha) <= half_width:
        while lo < hi:  # the half-width shrinks as n grows (for n up to n_total - 1 at these spreads)
            mid = (lo + hi) // 2
            if ppi_half_width(mid, n_total, var_y, var_judge, cov, alpha) <= half_width:
                hi = mid
            else:
                lo = mid + 1
        ppi_n = lo
    # the normal-interval count, then up to where the t interval (wider) reaches the half-width as well
    human = max(2, math.ceil((_z(alpha) * math.sqrt(var_y) / half_width) ** 2))
    while human <= n_total and interval_factor(human, alpha) * math.sqrt(var_y / human) > half_width:
        human += 1
    return {"ppi": ppi_n, "human_only": human if human <= n_total else None, "n_total": n_total,
            "n_pilot": int(y.size)}
