"""lab.metrics.overlap: rank-biased overlap and top-k Jaccard on hand-computed cases, and the pairwise table of
real runs (BM25 and a weak BM25 on ORD-QA)."""
from __future__ import annotations

import pytest

from lab.data.types import Run
from lab.metrics.overlap import jaccard_at, overlap_table, rbo


def test_rbo_by_hand():
    # X_1 = 1, X_2 = 1, X_3 = 3: (0.1 / 0.9) * (1 * 0.9 + 1/2 * 0.81 + 3/3 * 0.729) + 3/3 * 0.729 = 0.955
    assert rbo(list("abc"), list("acb"), 0.9) == pytest.approx(0.955)
    assert rbo(list("abcdef"), list("abcdef")) == pytest.approx(1.0)
    assert rbo(list("abc"), list("xyz")) == 0.0
    assert rbo([], []) == 1.0 and rbo(["a"], []) == 0.0
    # uneven: S = [a], L = [a, b]: X_1 = 1, X_2 = 1 (S against L's top 2), X_s = 1, s = 1, l = 2, p = 0.5
    # (0.5 / 0.5) * (1 * 0.5 + 1/2 * 0.25 + 1 * (2 - 1) / (1 * 2) * 0.25) + ((1 - 1) / 2 + 1 / 1) * 0.25 = 1.0
    assert rbo(["a"], ["a", "b"], 0.5) == pytest.approx(1.0)
    assert rbo(list("ab"), list("ba"), 0.9) < 1.0
    assert rbo(list("ab"), list("ba"), 0.9) == rbo(list("ba"), list("ab"), 0.9)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        rbo(["a"], ["a"], 1.0)


def test_jaccard_by_hand():
    assert jaccard_at(list("abcd"), list("cdef"), k=4) == pytest.approx(2 / 6)
    assert jaccard_at(list("abcd"), list("abxy"), k=2) == 1.0 and jaccard_at([], []) == 1.0


def test_overlap_table_of_real_runs():
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    ctx = Context(progress=False)
    runs = {name: run_experiment("data/ord-qa", "bm25", p, k=20, ctx=ctx, max_queries=30).run
            for name, p in (("bm25", {}), ("bm25 copy", {}), ("bm25 k1=0", {"k1": 0.0}))}
    t = overlap_table(runs)
    assert list(t.columns) == ["a", "b", "rbo", "jaccard@10", "n_queries", "only_one"] and len(t) == 3
    same = t[(t.a == "bm25") & (t.b == "bm25 copy")].iloc[0]
    assert same.rbo == pytest.approx(1.0) and same["jaccard@10"] == 1.0 and same.n_queries == 30
    assert t.rbo.iloc[0] < 1.0 and t.rbo.is_monotonic_increasing  # the pair that differs most first
    r = Run({"q1": {"a": 3.0, "b": 2.0}, "q2": {"x": 1.0}})
    s = Run({"q1": {"b": 3.0, "a": 2.0}})
    one = overlap_table({"r": r, "s": s}).iloc[0]
    assert one.n_queries == 1 and one.only_one == 1 and one.rbo == pytest.approx(rbo(["a", "b"], ["b", "a"]))
