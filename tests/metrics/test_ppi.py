"""Prediction-powered means (lab.metrics.ppi) against the formulas of Angelopoulos et al. computed by hand."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from lab.metrics.ppi import (
    MeanEstimate,
    PPIEstimate,
    effective_human_queries,
    human_mean,
    judge_mean,
    ppi_mean,
    ppi_paired_difference,
    tuned_lambda,
)

Z = 1.959963984540054  # z(0.975): ppi_py's normal interval
T39 = 2.022690920036761  # t(0.975) on 39 degrees of freedom (40 human-graded queries in _judged)


def _judged(seed: int, n: int = 40, big_n: int = 400, flip: float = 0.2) -> tuple[np.ndarray, ...]:
    """Per-query hit@k under people (y) and under a judge that flips a share of them (yhat)."""
    rng = np.random.default_rng(seed)
    y_all = (rng.random(n + big_n) < 0.6).astype(float)
    flips = rng.random(n + big_n) < flip
    yhat_all = np.where(flips, 1.0 - y_all, y_all)
    return y_all[:n], yhat_all[:n], yhat_all[n:], y_all


def _by_hand(y: np.ndarray, yh: np.ndarray, yu: np.ndarray, lam: float) -> tuple[float, float, float]:
    """theta +- t_39 * se * sqrt(n / (n - 1)): the PPI estimate and standard error of Angelopoulos et al.
    (population sds), widened by the small-sample step (n = 40 human-graded queries)."""
    n, big_n = y.size, yu.size
    assert n == 40
    theta = lam * yu.mean() + (y - lam * yh).mean()
    se = math.sqrt(lam**2 * yu.var() / big_n + (y - lam * yh).var() / n)
    half = T39 * se * math.sqrt(n / (n - 1))
    return theta, theta - half, theta + half


def test_plain_ppi_matches_the_hand_formula() -> None:
    y, yh, yu, _ = _judged(1)
    est = ppi_mean(y, yh, yu, power_tuning=False)
    theta, lo, hi = _by_hand(y, yh, yu, 1.0)
    assert est.lam == 1.0
    assert est.mean == pytest.approx(theta, abs=1e-12)
    assert est.ci == pytest.approx((lo, hi), abs=1e-12)
    assert (est.n_human, est.n_judged) == (40, 400)


def test_ppi_plus_plus_lambda_and_interval_match_the_hand_formula() -> None:
    y, yh, yu, _ = _judged(2)
    n, big_n = y.size, yu.size
    cov = np.mean((y - y.mean()) * (yh - yh.mean()))
    lam_hand = cov / ((1 + n / big_n) * np.var(np.concatenate([yh, yu]), ddof=1))
    assert 0.0 < lam_hand < 1.0  # a judge that flips 20 % of labels: tuning moves lambda inside (0, 1)
    assert tuned_lambda(y, yh, yu) == pytest.approx(lam_hand, abs=1e-12)
    est = ppi_mean(y, yh, yu)
    theta, lo, hi = _by_hand(y, yh, yu, lam_hand)
    assert est.lam == pytest.approx(lam_hand, abs=1e-12)
    assert est.mean == pytest.approx(theta, abs=1e-12)
    assert est.ci == pytest.approx((lo, hi), abs=1e-12)
    # the tuned interval is never wider than plain PPI's nor (up to the n/N term) the human-only one
    plain = ppi_mean(y, yh, yu, power_tuning=False)
    assert est.ci[1] - est.ci[0] <= plain.ci[1] - plain.ci[0] + 1e-12


def test_lambda_is_clipped_to_zero_for_a_judge_that_anticorrelates() -> None:
    y, _, yu, _ = _judged(3)
    est = ppi_mean(y, 1.0 - y, yu)  # the judge says the opposite of people on every graded query
    assert est.lam == 0.0
    h = human_mean(y)
    assert est.mean == pytest.approx(h.mean, abs=1e-12)
    assert est.ci == pytest.approx(h.ci, abs=1e-12)
    assert effective_human_queries(est, y) == pytest.approx(40.0)


def test_a_constant_judge_falls_back_to_the_human_mean() -> None:
    y, _, yu, _ = _judged(4)
    est = ppi_mean(y, np.ones_like(y), np.ones_like(yu))
    assert est.lam == 0.0 and est.mean == pytest.approx(y.mean())


def test_human_and_judge_means_are_student_t_intervals() -> None:
    y, _, yu, _ = _judged(5)
    h = human_mean(y)
    half = T39 * y.std(ddof=1) / math.sqrt(y.size)  # the classical t interval, sample sd
    assert h == MeanEstimate(mean=float(y.mean()), ci=pytest.approx((y.mean() - half, y.mean() + half)), n=40)
    assert half > Z * y.std() / math.sqrt(y.size)  # wider than ppi_py's normal interval with population sd
    j = judge_mean(yu)
    assert j.n == 400 and j.mean == pytest.approx(yu.mean())


def test_the_small_sample_step_widens_ppi_pys_interval_by_t_over_z() -> None:
    """ppi_py's own interval is theta +- z * se; ours keeps its centre and scales the half-width by
    t_{n-1} * sqrt(n / (n - 1)) / z."""
    y, yh, yu, _ = _judged(10)
    est = ppi_mean(y, yh, yu)  # imports ppi_py first, with the warning filters kept
    import ppi_py

    lo, hi = ppi_py.ppi_mean_ci(y, yh, yu, alpha=0.05, lam=None)
    lo, hi = float(np.ravel(lo)[0]), float(np.ravel(hi)[0])
    assert est.mean == pytest.approx((lo + hi) / 2, abs=1e-12)
    assert est.se == pytest.approx((hi - lo) / (2 * Z), abs=1e-12)
    ratio = (est.ci[1] - est.ci[0]) / (hi - lo)
    assert ratio == pytest.approx(T39 * math.sqrt(40 / 39) / Z, abs=1e-9)
    assert ratio > 1.04  # about 4.5 % wider at 40 queries


def test_a_good_judge_buys_effective_queries_and_a_perfect_one_many() -> None:
    y, yh, yu, _ = _judged(6, flip=0.05)
    est = ppi_mean(y, yh, yu)
    eff = effective_human_queries(est, y)
    w_h = human_mean(y).ci[1] - human_mean(y).ci[0]
    assert eff == pytest.approx(40 * (w_h / (est.ci[1] - est.ci[0])) ** 2)
    assert eff > 1.5 * 40


def test_paired_difference_is_ppi_on_differences_with_its_p_value() -> None:
    y_a, yh_a, yu_a, _ = _judged(7)
    y_b, yh_b, yu_b, _ = _judged(8)
    est, p = ppi_paired_difference(y_a, y_b, yh_a, yh_b, yu_a, yu_b)
    direct = ppi_mean(y_a - y_b, yh_a - yh_b, yu_a - yu_b)
    assert isinstance(est, PPIEstimate) and est == direct
    theta, lo, hi = _by_hand(y_a - y_b, yh_a - yh_b, yu_a - yu_b, est.lam)
    assert est.ci == pytest.approx((lo, hi), abs=1e-12)
    # a t test on 39 degrees of freedom of the statistic whose interval that is: p = alpha exactly at its edge
    scale = (hi - lo) / (2 * T39)
    from scipy.stats import t

    assert p == pytest.approx(2 * t.sf(abs(theta) / scale, df=39), abs=1e-12)
    assert p > math.erfc(abs(theta) / scale / math.sqrt(2))  # less sure than the normal test
    # identical runs: difference 0, p-value 1
    est0, p0 = ppi_paired_difference(y_a, y_a, yh_a, yh_a, yu_a, yu_a)
    assert est0.mean == 0.0 and p0 == 1.0


def test_coverage_holds_over_random_subsets_while_the_judge_alone_is_biased() -> None:
    rng = np.random.default_rng(9)
    big = 2000
    y_all = (rng.random(big) < 0.5).astype(float)
    # a judge that misses 30 % of the hits: its mean is biased downwards
    yhat_all = np.where((y_all == 1) & (rng.random(big) < 0.3), 0.0, y_all)
    truth = y_all.mean()
    covered = 0
    for _ in range(200):
        idx = rng.permutation(big)
        h, u = idx[:60], idx[60:]
        est = ppi_mean(y_all[h], yhat_all[h], yhat_all[u])
        covered += est.ci[0] <= truth <= est.ci[1]
    assert covered / 200 >= 0.9
    j = judge_mean(yhat_all)
    assert not j.ci[0] <= truth <= j.ci[1]


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="same queries"):
        ppi_mean([1, 0, 1], [1, 0], [0, 1])
    with pytest.raises(ValueError, match="finite"):
        ppi_mean([1, np.nan], [1, 0], [0, 1])
    with pytest.raises(ValueError, match="alpha"):
        human_mean([1, 0, 1], alpha=1.5)


def test_importing_the_estimators_leaves_the_warning_filters_alone() -> None:
    """ppi_py switches every warning off when imported; a fresh process must keep its filters."""
    code = (
        "import warnings\n"
        "from lab.metrics.ppi import ppi_mean\n"
        "ppi_mean([1, 0, 1, 1], [1, 0, 0, 1], [1, 1, 0])\n"
        "import ppi_py  # already imported: a no-op\n"
        "catch_all = [f for f in warnings.filters if f[0] == 'ignore' and f[1] is None and f[2] is Warning]\n"
        "assert not catch_all, warnings.filters[:3]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
