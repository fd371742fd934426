"""Where strategies differ without labels: how much two runs' rankings agree, query by query.

Conventions
- Rankings: a run's hits of one query in rank order (:meth:`lab.data.types.Run.ranked`: score descending, ties by
  doc id as trec_eval breaks them), cut at ``depth`` (default :data:`DEPTH`).
- Rank-biased overlap (Webber, Moffat & Zobel 2010, "A similarity measure for indefinite rankings", ACM TOIS 28(4)),
  the extrapolated form RBO_ext of their Eq. (32), which allows lists of different lengths: with S the shorter
  list (length s), L the longer (length l), X_d the overlap of the two lists' top d (for d > s: S against L's top
  d) and A_d = X_d / d,
  RBO_ext = (1 - p) / p * [sum_{d=1..l} X_d / d * p^d + sum_{d=s+1..l} X_s (d - s) / (s d) * p^d]
            + [(X_l - X_s) / l + X_s / s] * p^l.
  1 for identical lists, 0 for disjoint ones; p (default :data:`P` = 0.9) weighs the top: the top 10 ranks carry
  about 86 % of the weight at p = 0.9. Both lists empty: 1; one empty: 0. Checked against the ``rbo`` package
  (tests/comparison).
- Jaccard@k: |top k of A intersected with top k of B| / |their union| (1 when both are empty).
- Per pair of runs: the mean over the queries both runs answered (``n_queries``); queries only one answered are
  left out and counted (``only_one``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import pandas as pd

from lab.data.types import Run

#: Persistence of rank-biased overlap (the weight of rank d is proportional to p^(d-1)).
P = 0.9
#: Cut-off of the top-k Jaccard.
JACCARD_K = 10
#: Ranks compared per query by default.
DEPTH = 100


def rbo(a: Sequence[str], b: Sequence[str], p: float = P) -> float:
    """Extrapolated rank-biased overlap of two rankings (module docstring); items are assumed unique per list."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p}: rank-biased overlap's persistence must lie strictly between 0 and 1, e.g. 0.9")
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    n_s, n_l = len(short), len(long_)
    seen_s, seen_l = set(), set()
    overlap, total, x_s = 0, 0.0, 0
    for d in range(1, n_l + 1):
        item_l = long_[d - 1]
        if d <= n_s:
            item_s = short[d - 1]
            overlap += (item_s == item_l) + (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
            seen_l.add(item_l)
            if d == n_s:
                x_s = overlap
        else:
            overlap += item_l in seen_s
        total += overlap / d * p ** d
        if d > n_s:
            total += x_s * (d - n_s) / (n_s * d) * p ** d
    return (1 - p) / p * total + ((overlap - x_s) / n_l + x_s / n_s) * p ** n_l


def jaccard_at(a: Sequence[str], b: Sequence[str], k: int = JACCARD_K) -> float:
    """|A_k & B_k| / |A_k | B_k| of the top ``k`` of two rankings (1 when both are empty)."""
    ta, tb = set(a[:k]), set(b[:k])
    union = ta | tb
    return len(ta & tb) / len(union) if union else 1.0


def ranking(run: Run, qid: str, depth: int = DEPTH) -> list[str]:
    """The doc ids of one query of a run (lab.data.types.Run) in rank order, cut at ``depth``."""
    return [d for d, _ in run.ranked(qid, depth)]


def run_overlap(run_a: Run, run_b: Run, p: float = P, k: int = JACCARD_K, depth: int = DEPTH) -> dict[str, float]:
    """Mean RBO and Jaccard@k of two runs over the queries both answered (module docstring)."""
    common = [q for q in run_a.scores if q in run_b.scores]
    only = len(set(run_a.scores) ^ set(run_b.scores))
    if not common:
        return {"rbo": float("nan"), f"jaccard@{k}": float("nan"), "n_queries": 0, "only_one": only}
    r = j = 0.0
    for q in common:
        la, lb = ranking(run_a, q, depth), ranking(run_b, q, depth)
        r += rbo(la, lb, p)
        j += jaccard_at(la, lb, k)
    return {"rbo": r / len(common), f"jaccard@{k}": j / len(common), "n_queries": len(common), "only_one": only}


def overlap_table(runs: Mapping[str, Run], p: float = P, k: int = JACCARD_K, depth: int = DEPTH) -> pd.DataFrame:
    """One row per pair of runs (name -> Run, in the order given): a, b, rbo, jaccard@k, n_queries, only_one;
    lowest RBO first (the pairs that differ most)."""
    rows = [{"a": na, "b": nb, **run_overlap(runs[na], runs[nb], p, k, depth)} for na, nb in combinations(runs, 2)]
    df = pd.DataFrame(rows, columns=["a", "b", "rbo", f"jaccard@{k}", "n_queries", "only_one"])
    df = df.sort_values("rbo", kind="stable").reset_index(drop=True)
    df.attrs.update(p=p, k=k, depth=depth)
    return df
