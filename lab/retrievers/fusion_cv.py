"""Fusion weights picked by k-fold cross-validation over queries (hybrid's ``weights="tuned"``).

Protocol (as in ranx's ``optimize_fusion``, which tunes on a training set, here made out-of-fold so a test set can
be scored honestly):
- The queries that have judgments are shuffled with ``random.Random(seed)`` and dealt into ``folds`` folds
  (round robin, so fold sizes differ by at most one). Queries without judgments go into fold ``i % folds`` of their
  position, so every query is fused with some fold's weights.
- For each fold, every candidate weight vector is scored by the mean ``metric`` (default nDCG@10, by
  :func:`lab.metrics.evaluate`) over the judged queries of the *other* folds; the best is used to fuse the fold's
  own queries. A query is never fused with weights tuned on its own judgments.
- Candidates: the weight vectors on the simplex with step ``step`` (default 0.1: 11 vectors for two runs, 66 for
  three). Equal scores are broken by the vector closest to equal weights (L1), then by grid order, so the result
  is deterministic for a given seed.
- ``folds`` greater than the judged queries is cut to their number (leave-one-out); fewer than 2 judged queries is
  an error (nothing to tune on).
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from lab.core.errors import ConfigError
from lab.data.types import Qrels, Run
from lab.metrics import evaluate


@dataclass
class TunedFusion:
    """The out-of-fold fused run and what was picked: ``folds[i] = {"weights": [...], "train_score": x,
    "n_train": n, "queries": [...]}``."""

    run: Run
    folds: list[dict] = field(default_factory=list)
    grid: list[list[float]] = field(default_factory=list)

    def describe(self) -> dict:
        """Picked weights per fold (plain values, for params and tags)."""
        return {"tuned_weights": [f["weights"] for f in self.folds],
                "tuned_train_scores": [round(f["train_score"], 6) for f in self.folds],
                "tuned_fold_sizes": [len(f["queries"]) for f in self.folds]}


def weight_grid(n: int, step: float = 0.1) -> list[list[float]]:
    """Weight vectors of ``n`` runs on the simplex (non-negative, summing to 1) with the given step."""
    if n < 1:
        raise ConfigError("weight_grid needs at least one run")
    if not 0 < step <= 1:
        raise ConfigError(f"tune step must lie in (0, 1], got {step}")
    m = int(round(1 / step))
    out = []
    for combo in itertools.product(range(m + 1), repeat=n - 1):
        if sum(combo) <= m:
            out.append([c / m for c in combo] + [(m - sum(combo)) / m])
    return out


def assign_folds(query_ids: Sequence[str], judged: set[str], folds: int, seed: int) -> dict[str, int]:
    """query id -> fold (see the module docstring)."""
    qj = sorted(q for q in query_ids if q in judged)
    random.Random(seed).shuffle(qj)
    out = {q: i % folds for i, q in enumerate(qj)}
    rest = [q for q in query_ids if q not in judged]
    out.update({q: i % folds for i, q in enumerate(rest)})
    return out


def tune_fusion(runs: Sequence[Run], qrels: Qrels, fuse: Callable[[Sequence[Run], list[float]], Run], *,
                folds: int = 5, seed: int = 0, metric: str = "ndcg@10", step: float = 0.1,
                prepare: Callable[[Run], Run] | None = None) -> TunedFusion:
    """Fuse ``runs`` with weights tuned out of fold (see the module docstring).

    ``fuse(runs, weights) -> Run`` does the fusion (any fuser of :mod:`lab.retrievers.fusion` with its other
    params bound). ``prepare`` maps a fused run to the level ``qrels`` judge (e.g. chunks aggregated to
    documents); the returned run is the unprepared fused run.
    """
    if folds < 2:
        raise ConfigError(f"weights=tuned needs folds >= 2, got {folds}")
    qids = list(dict.fromkeys(q for r in runs for q in r))
    judged = sorted(q for q in qids if q in qrels.qrels and any(g > 0 for g in qrels.qrels[q].values()))
    if len(judged) < 2:
        raise ConfigError(f"weights=tuned needs at least 2 judged queries to cross-validate, got {len(judged)}")
    folds = min(folds, len(judged))
    fold_of = assign_folds(qids, set(judged), folds, seed)
    grid = weight_grid(len(runs), step)
    equal = 1.0 / len(runs)
    prepare = prepare or (lambda r: r)

    # each candidate's per-query metric, computed once over all judged queries
    per_query: list[dict[str, float]] = []
    for w in grid:
        fused = prepare(fuse(runs, w))
        sub = Run({q: fused.scores.get(q, {}) for q in judged}, name="cv")
        ev = evaluate(Qrels({q: qrels.qrels[q] for q in judged}, name=qrels.name), sub, [metric])
        table = ev.per_query
        per_query.append({str(q): float(v) for q, v in table[metric].items()})

    scores: dict[str, dict[str, float]] = {}
    out_folds = []
    for f in range(folds):
        train = [q for q in judged if fold_of[q] != f]
        best, best_key = 0, None
        for i, w in enumerate(grid):
            vals = [per_query[i][q] for q in train if q in per_query[i]]
            mean = sum(vals) / len(vals) if vals else 0.0
            key = (round(mean, 12), -round(sum(abs(x - equal) for x in w), 12), -i)
            if best_key is None or key > best_key:
                best, best_key = i, key
        w = grid[best]
        members = [q for q in qids if fold_of[q] == f]
        fused = fuse([Run({q: r.scores[q] for q in members if q in r.scores}, name=r.name) for r in runs], w)
        scores.update({q: fused.scores.get(q, {}) for q in members})
        out_folds.append({"weights": [round(x, 6) for x in w], "train_score": best_key[0], "n_train": len(train),
                          "queries": members})
    return TunedFusion(Run({q: scores[q] for q in qids}, name="tuned"), out_folds, grid)
