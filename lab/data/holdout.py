"""Held-out queries: a seeded split of a query set into dev queries (to choose a winner on) and held-out ones
(to score the winner on once), so a leaderboard's best is confirmed on queries it was not picked on.

Conventions
- A query is held out when u(seed, id) < fraction, u being the first 8 bytes of sha256("<seed>:<query id>") read
  as a number in [0, 1). Membership depends only on the seed and the query's own id, so every subset of a split
  (max_queries, the queries span relevance keeps, a halving rung) splits the same way; the held-out share of a
  set is about ``fraction`` (binomial), not exactly.
- ``fraction`` must lie in (0, :data:`MAX_FRACTION`) and leave at least :data:`MIN_QUERIES` queries on each
  side (:func:`check_holdout`); both are checked before any work.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

#: Largest holdout fraction accepted (exclusive): at least a tenth of the queries choose the winner.
MAX_FRACTION = 0.9
#: Fewest queries accepted on either side of the split.
MIN_QUERIES = 5


@dataclass(frozen=True)
class HoldoutSplit:
    """Dev and held-out query ids (in the order given), the fraction and seed that made them."""

    fraction: float
    seed: int
    dev: tuple[str, ...]
    held_out: tuple[str, ...]


def is_held_out(query_id: str, fraction: float, seed: int = 0) -> bool:
    """True when ``query_id`` is a held-out query of the split (fraction, seed); see the module docstring."""
    digest = hashlib.sha256(f"{int(seed)}:{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < float(fraction)


def holdout_split(query_ids: Iterable[str], fraction: float, seed: int = 0) -> HoldoutSplit:
    """Split ``query_ids`` into dev and held-out queries (module docstring); order kept."""
    ids = [str(q) for q in query_ids]
    held = [q for q in ids if is_held_out(q, fraction, seed)]
    keep = set(held)
    return HoldoutSplit(float(fraction), int(seed), tuple(q for q in ids if q not in keep), tuple(held))


def holdout_problem(fraction: object, query_ids: Iterable[str] | None = None, seed: int = 0,
                    where: str = "holdout") -> str | None:
    """One line when ``fraction`` is not a usable holdout (not a number in (0, 0.9), or, given the query ids, a
    split with fewer than :data:`MIN_QUERIES` queries on a side), else None."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < float(fraction) < MAX_FRACTION:
        return (f"{where}={fraction!r}: expected a fraction of the queries to hold out, a number in "
                f"(0, {MAX_FRACTION}), e.g. 0.3")
    if query_ids is None:
        return None
    split = holdout_split(query_ids, float(fraction), seed)
    if min(len(split.dev), len(split.held_out)) < MIN_QUERIES:
        return (f"{where}={fraction!r}: leaves {len(split.dev)} dev and {len(split.held_out)} held-out queries (seed "
                f"{seed}); each side needs at least {MIN_QUERIES}: choose a fraction nearer 0.5 or more queries")
    return None
