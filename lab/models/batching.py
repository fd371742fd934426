"""Batching of texts for encoding, shared by every embedder backend (lab.models.embedders, lab.models.backends).

Texts are encoded longest first in batches of at most ``batch_size`` (:func:`length_batches`), so each batch pads
to lengths close to its own longest text; results go back to input order. This is the ordering
sentence-transformers' ``encode`` uses (it sorts by length, longest first, before batching).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: texts per call above which an embedder shows its own progress bar (the cache shows one per chunk).
PROGRESS_MIN_TEXTS = 2048


def length_batches(lengths: Sequence[int], batch_size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Order of texts longest first (stable) and that order cut into batches of at most ``batch_size``."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    return order, [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
