"""lab.metrics.stats: bootstrap CIs and paired tests against loop-by-loop references, scipy and exact enumeration."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from lab.metrics import bootstrap_ci, compare, evaluate, paired_test
from lab.metrics.stats import BLOCK, bootstrap_means, sign_flip_means


def test_bootstrap_ci_equals_the_definition_loop_by_loop():
    """Same draws as the implementation (blocks of BLOCK indices from default_rng(seed)), means by loops."""
    rng = np.random.default_rng(5)
    x = rng.random((37, 6))  # 6 columns: the counts x values path
    n_res = BLOCK + 45  # two blocks, the second partial
    draws = np.random.default_rng(11)
    idx = np.vstack([draws.integers(0, 37, size=(min(BLOCK, n_res - s), 37), dtype=np.int64)
                     for s in range(0, n_res, BLOCK)])
    means = np.array([[sum(x[i, j] for i in row) / 37 for j in range(6)] for row in idx])
    ref_lo, ref_hi = np.quantile(means, [0.05, 0.95], axis=0)
    ci = bootstrap_ci(pd.DataFrame(x, columns=list("abcdef")), n_resamples=n_res, confidence=0.9, seed=11)
    assert list(ci.columns) == ["metric", "mean", "ci_low", "ci_high"]
    assert list(ci.metric) == list("abcdef")
    np.testing.assert_allclose(ci["mean"], x.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(ci.ci_low, ref_lo, atol=1e-12)
    np.testing.assert_allclose(ci.ci_high, ref_hi, atol=1e-12)


def test_gather_and_count_paths_agree():
    x = np.random.default_rng(0).random((500, 8))
    wide = bootstrap_means(x, 300, seed=3)
    for j in range(8):
        np.testing.assert_allclose(bootstrap_means(x[:, j], 300, seed=3)[:, 0], wide[:, j], atol=1e-12)


def test_bootstrap_ci_close_to_scipy():
    from scipy import stats

    x = np.random.default_rng(1).exponential(size=300)
    ours = bootstrap_ci(x, n_resamples=10000, seed=0).iloc[0]
    ref = stats.bootstrap((x,), np.mean, n_resamples=10000, method="percentile", confidence_level=0.95,
                          random_state=np.random.default_rng(0)).confidence_interval
    width = ref.high - ref.low
    assert abs(ours.ci_low - ref.low) < 0.05 * width and abs(ours.ci_high - ref.high) < 0.05 * width


def test_bootstrap_ci_covers_the_true_mean_about_95_percent():
    rng = np.random.default_rng(2)
    covered = 0
    for rep in range(150):
        x = rng.normal(0.3, 1.0, size=(80, 1))
        ci = bootstrap_ci(x, n_resamples=400, seed=rep).iloc[0]
        covered += ci.ci_low <= 0.3 <= ci.ci_high
    assert 0.87 <= covered / 150 <= 0.99


def test_bootstrap_ci_inputs():
    x = np.random.default_rng(3).random(50)
    a = bootstrap_ci(x, seed=4)
    assert a.equals(bootstrap_ci(x, seed=4))  # seeded
    assert not a.equals(bootstrap_ci(x, seed=5))
    assert list(a.metric) == ["value"]
    s = bootstrap_ci(pd.Series(x, name="ndcg@10"), seed=4)
    assert list(s.metric) == ["ndcg@10"] and s.ci_low.iloc[0] == a.ci_low.iloc[0]
    df = pd.DataFrame({"run": ["x"] * 50, "mrr": x})  # non-numeric columns ignored
    assert list(bootstrap_ci(df).metric) == ["mrr"]
    lo, hi = bootstrap_ci(x, confidence=0.5, seed=4).iloc[0][["ci_low", "ci_high"]]
    assert a.ci_low.iloc[0] < lo < hi < a.ci_high.iloc[0]
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(x, confidence=95)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="no queries"):
        bootstrap_ci(np.empty((0, 2)))


# -------------------------------------------------------------------------------------------- paired
def exact_sign_flip_p(d: np.ndarray) -> float:
    obs = abs(d.mean())
    means = [abs(np.mean(d * s)) for s in itertools.product((1, -1), repeat=d.size)]
    return float(np.mean([m >= obs - 1e-12 for m in means]))


@pytest.mark.parametrize("seed", range(4))
def test_permutation_p_matches_exact_enumeration(seed):
    rng = np.random.default_rng(seed)
    a = rng.random(11)
    b = a - rng.normal(0.1 * seed, 0.2, size=11)
    exact = exact_sign_flip_p(a - b)
    got = paired_test(a, b, n_resamples=40000, seed=seed)["p_permutation"]
    assert abs(got - exact) < 0.01, (got, exact)


def test_sign_flip_table_equals_bitwise_flips():
    d = np.random.default_rng(6).normal(size=21)  # not a multiple of 8
    got = sign_flip_means(d, 50, seed=9)
    rng = np.random.default_rng(9)
    nbytes = (21 + 7) // 8
    bits = np.unpackbits(np.frombuffer(rng.bytes(50 * nbytes), dtype=np.uint8).reshape(50, nbytes), axis=1)[:, :21]
    expected = [np.mean(np.where(row == 1, -d, d)) for row in bits]
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_paired_test_values():
    rng = np.random.default_rng(7)
    a = rng.random(300)
    same = paired_test(a, a, n_resamples=2000)
    assert same["diff"] == 0 and same["p_bootstrap"] == 1.0 and same["p_permutation"] == 1.0
    assert same["n"] == 300 and same["ci_low"] == same["ci_high"] == 0.0
    shifted = paired_test(a + 0.2, a + rng.normal(0, 0.05, 300), n_resamples=2000)
    assert shifted["diff"] == pytest.approx(0.2, abs=0.02)
    assert shifted["ci_low"] < shifted["diff"] < shifted["ci_high"]
    assert shifted["p_bootstrap"] == shifted["p_permutation"] == pytest.approx(1 / 2001)  # add-one rule
    noise = paired_test(a, a + rng.normal(0, 0.3, 300), n_resamples=4000, seed=1)
    assert 0.05 < noise["p_permutation"] and 0.05 < noise["p_bootstrap"]
    assert paired_test(a, a[::-1], seed=1) == paired_test(a, a[::-1], seed=1)  # seeded
    # the two p-values estimate the same null for a moderate effect
    mid = paired_test(a, a - 0.02 + rng.normal(0, 0.2, 300), n_resamples=20000)
    assert abs(mid["p_bootstrap"] - mid["p_permutation"]) < 0.05


def test_paired_test_inputs():
    a = pd.Series([0.1, 0.5, 0.9], index=["q1", "q2", "q3"])
    b = pd.Series([0.9, 0.5, 0.1], index=["q3", "q2", "q1"])  # same queries, other order
    assert paired_test(a, b)["diff"] == 0.0
    with pytest.raises(ValueError, match="paired"):
        paired_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="different queries"):
        paired_test(a, b.rename({"q3": "q4"}))
    with pytest.raises(ValueError, match="NaN"):
        paired_test([1.0, np.nan], [1.0, 2.0])


# ------------------------------------------------------------------------------------------- compare
def test_compare_aligns_on_the_union_and_fills_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    ev_a = evaluate(qrels, {"q1": {"a": 1.0}, "q2": {"x": 1.0, "b": 0.5}}, ["mrr@10"])
    ev_b = evaluate({k: v for k, v in qrels.items() if k != "q3"} | {"q4": {"d": 1}},
                    {"q1": {"x": 1.0, "a": 0.5}, "q4": {"d": 1.0}}, ["mrr@10"])
    out = compare(ev_a, ev_b, "mrr@10", n_resamples=1000)
    # union q1, q2, q3, q4: A = 1, 0.5, 0, 0 (q4 filled); B = 0.5, 0, 0 (q3 filled), 1
    assert out["n"] == 4 and out["n_only_a"] == 1 and out["n_only_b"] == 1
    assert out["mean_a"] == pytest.approx(1.5 / 4) and out["mean_b"] == pytest.approx(1.5 / 4)
    assert out["diff"] == pytest.approx(0.0)
    assert out["metric"] == "mrr@10"


def test_compare_refuses_mismatches():
    qrels = {"q1": {"a": 1}}
    ev = evaluate(qrels, {"q1": {"a": 1.0}}, ["mrr@10"])
    with pytest.raises(KeyError, match="ndcg@10"):
        compare(ev, ev, "ndcg@10")
    other = evaluate(qrels, {"q1": {"a": 1.0}}, ["mrr@10"])
    other.metrics_version = "0"
    with pytest.raises(ValueError, match="metrics_version"):
        compare(ev, other, "mrr@10")
    strict = evaluate({"q1": {"a": 2}}, {"q1": {"a": 1.0}}, ["mrr@10"], rel_threshold=2)
    with pytest.raises(ValueError, match="rel_threshold"):
        compare(ev, strict, "mrr@10")


def test_binary_metrics_get_a_wilson_interval_that_does_not_collapse():
    """12 hits out of 12: the bootstrap says [1, 1]; Wilson says [0.757, 1] (Brown, Cai & DasGupta 2001)."""
    from lab.metrics.stats import wilson_interval

    df = pd.DataFrame({"hit_rate@10": np.ones(12), "ndcg@10": np.linspace(0.2, 1.0, 12)})
    ci = bootstrap_ci(df, seed=0).set_index("metric")
    assert ci.attrs["interval"] == {"hit_rate@10": "wilson", "ndcg@10": "percentile bootstrap"}
    assert ci.loc["hit_rate@10", "ci_low"] == pytest.approx(0.7575, abs=1e-4)
    assert ci.loc["hit_rate@10", "ci_high"] == 1.0
    lo, hi = wilson_interval(3, 4)
    assert lo == pytest.approx(0.3006, abs=1e-4) and hi == pytest.approx(0.9544, abs=1e-4)  # textbook values
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_questions_needed_for_a_half_width():
    from lab.metrics.stats import questions_needed, wilson_interval

    hits = np.array([1] * 70 + [0] * 30, dtype=float)
    n = questions_needed(hits, 0.02)
    lo, hi = wilson_interval(round(0.7 * n), n)
    assert 1900 < n < 2100 and (hi - lo) / 2 <= 0.02  # z^2 p (1 - p) / h^2 = 2017
    lo, hi = wilson_interval(round(0.7 * (n - 5)), n - 5)
    assert (hi - lo) / 2 > 0.02
    assert questions_needed(np.ones(12), 0.02) == questions_needed(np.r_[np.ones(6), np.zeros(6)], 0.02)  # p=0.5
    scores = np.random.default_rng(0).random(200)
    assert questions_needed(scores, 0.02) == int(np.ceil((1.959964 * scores.std(ddof=1) / 0.02) ** 2))
    with pytest.raises(ValueError):
        questions_needed(scores, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# multiple-comparison adjustments, against independent implementations
# ---------------------------------------------------------------------------------------------------------------
def holm_by_closed_testing(p) -> np.ndarray:
    """Holm's adjusted p by brute force: Holm's procedure is the closed testing procedure with Bonferroni local
    tests (Marcus, Peritz & Gabriel 1976; Holm 1979), so adj(i) = max over every subset S holding i of
    min(1, |S| * min(p over S))."""
    p = list(p)
    m = len(p)
    out = []
    for i in range(m):
        worst = 0.0
        others = [j for j in range(m) if j != i]
        for r in range(m):
            for rest in itertools.combinations(others, r):
                s = (i, *rest)
                worst = max(worst, min(1.0, len(s) * min(p[j] for j in s)))
        out.append(worst)
    return np.array(out)


def holm_by_stepping(p, alpha: float) -> np.ndarray:
    """Which hypotheses Holm's step-down procedure rejects at level alpha, step by step as Holm (1979) states it."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    reject = np.zeros(len(p), dtype=bool)
    for k, i in enumerate(order):
        if p[i] * (len(p) - k) > alpha:
            break
        reject[i] = True
    return reject


def reference_adjust(p, method: str) -> np.ndarray:
    """statsmodels' multipletests when it is installed; else scipy's false_discovery_control for BH and the
    closed-testing brute force for Holm."""
    try:
        from statsmodels.stats.multitest import multipletests
    except ImportError:
        multipletests = None
    if multipletests is not None:
        return multipletests(np.asarray(p, dtype=float), method={"holm": "holm", "bh": "fdr_bh"}[method])[1]
    if method == "bh":
        from scipy.stats import false_discovery_control

        return false_discovery_control(np.asarray(p, dtype=float), method="bh")
    return holm_by_closed_testing(p)


def _cases():
    rng = np.random.default_rng(16)
    cases = [rng.random(m) for m in (1, 2, 3, 5, 8, 10)]
    cases += [rng.random(6) ** 4 for _ in range(4)]  # many small p, as against a clearly best system
    cases += [np.array([0.01, 0.01, 0.01, 0.5]),  # ties
              np.array([1.0, 1.0, 0.2]),  # p = 1
              np.array([0.03]),  # a single p
              np.array([0.0001, 0.0001, 0.0024, 0.0224, 0.264]),  # the add-one floor at B = 10,000, tied
              np.array([0.04, 0.04, 0.04, 0.04]),
              np.round(rng.random(9), 2)]  # ties from rounding
    return cases


@pytest.mark.parametrize("method", ["holm", "bh"])
def test_adjust_pvalues_matches_an_independent_implementation(method):
    from lab.metrics.stats import adjust_pvalues

    for p in _cases():
        got = adjust_pvalues(p, method)
        np.testing.assert_allclose(got, reference_adjust(p, method), rtol=1e-12, atol=1e-15, err_msg=str(p))
        if method == "holm":
            np.testing.assert_allclose(got, holm_by_closed_testing(p), rtol=1e-12, atol=1e-15)
            for alpha in (0.01, 0.05, 0.1):  # rejecting adj <= alpha is Holm's procedure at level alpha
                assert ((got <= alpha) == holm_by_stepping(p, alpha)).all(), (p, alpha)
        assert (got >= p - 1e-15).all() and (got <= 1.0).all()  # never below the raw value, capped at 1
        order = np.argsort(p, kind="stable")
        assert (np.diff(got[order]) >= -1e-15).all()  # monotone in the raw p
        for a, b in itertools.combinations(range(len(p)), 2):
            if p[a] == p[b]:
                assert got[a] == got[b]  # tied raw values, tied adjusted values


def test_adjust_pvalues_known_values():
    from lab.metrics.stats import adjust_pvalues

    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max
    np.testing.assert_allclose(adjust_pvalues(p, "holm"), [0.03, 0.06, 0.06, 0.02])
    # BH: times 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04, 0.04 -> running min from the top
    np.testing.assert_allclose(adjust_pvalues(p, "bh"), [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_array_equal(adjust_pvalues(p, "none"), p)


def test_adjust_pvalues_nan_is_left_out_of_the_family():
    from lab.metrics.stats import adjust_pvalues

    p = np.array([np.nan, 0.01, 0.2, np.nan, 0.03])
    for method in ("holm", "bh"):
        got = adjust_pvalues(p, method)
        assert np.isnan(got[[0, 3]]).all()
        np.testing.assert_allclose(got[[1, 2, 4]], reference_adjust(p[[1, 2, 4]], method))  # m = 3, not 5
    assert np.isnan(adjust_pvalues([np.nan, np.nan], "holm")).all()
    assert adjust_pvalues([], "bh").shape == (0,)
    assert adjust_pvalues(p, "none") is not p and np.array_equal(adjust_pvalues(p, "none"), p, equal_nan=True)
    assert adjust_pvalues([0.03], "holm")[0] == 0.03  # one comparison: nothing to adjust


def test_adjust_pvalues_refuses_bad_input():
    from lab.metrics.stats import adjust_pvalues

    with pytest.raises(ValueError, match=r"none\|holm\|bh"):
        adjust_pvalues([0.1], "bonferroni")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust_pvalues([0.1, 1.5], "holm")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust_pvalues([-0.1], "bh")


def test_min_detectable_diff_and_queries_to_detect_by_hand_and_by_simulation():
    """(z(0.975) + z(0.8)) = 1.959964 + 0.841621 = 2.801585: with sd(d) = 1 and 100 queries the paired test
    detects 0.2802; detecting 0.1 needs ceil(2.801585^2 / 0.01) = 785 queries. A simulated z-test at that n
    rejects about 80 % of the time."""
    import numpy as np

    from lab.metrics.stats import min_detectable_diff, queries_to_detect

    d = np.array([1.0, -1.0] * 50)  # sd (ddof 1) = sqrt(100 / 99)
    sd = float(np.std(d, ddof=1))
    assert min_detectable_diff(d) == pytest.approx(2.801585 * sd / 10, rel=1e-5)
    assert min_detectable_diff(d, n=400) == pytest.approx(2.801585 * sd / 20, rel=1e-5)
    assert queries_to_detect(d, 0.1) == int(np.ceil((2.801585 * sd / 0.1) ** 2))
    assert queries_to_detect(d, 0.0) is None
    with pytest.raises(ValueError, match="at least 2"):
        min_detectable_diff([0.3])
    rng = np.random.default_rng(0)
    n = queries_to_detect(rng.normal(0, 0.3, 5000), 0.05)
    draws = rng.normal(0.05, 0.3, size=(4000, n))
    z = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / np.sqrt(n))
    assert 0.77 < float(np.mean(np.abs(z) > 1.959964)) < 0.83
