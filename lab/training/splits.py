"""Held-out validation queries for training (lab.training.reranker, lab.training.embedder): early stopping and
the choice of the best epoch are measured on training queries set aside, never on the evaluation split.
"""
from __future__ import annotations

import random


def split_validation(query_ids: list[str], fraction: float, max_queries: int, seed: int) -> tuple[list[str], list[str]]:
    """(train ids, validation ids): a seeded shuffle; validation = the first round(fraction * n) ids, at most
    ``max_queries``, at least 1 when fraction > 0 and n > 1; both lists come back in input order."""
    ids = list(query_ids)
    n_val = min(max_queries, round(fraction * len(ids))) if fraction > 0 else 0
    if fraction > 0 and len(ids) > 1:
        n_val = max(1, n_val)
    order = ids[:]
    random.Random(seed).shuffle(order)
    val = set(order[:n_val])
    return [q for q in ids if q not in val], [q for q in ids if q in val]
