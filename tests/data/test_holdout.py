"""lab.data.holdout: a seeded split of query ids into dev and held-out queries, stable under subsets."""
from __future__ import annotations

from lab.data.holdout import holdout_problem, holdout_split, is_held_out


def test_split_is_seeded_stable_under_subsets_and_near_the_fraction():
    ids = [f"q{i}" for i in range(2000)]
    a = holdout_split(ids, 0.3, seed=0)
    assert holdout_split(ids, 0.3, seed=0) == a and holdout_split(ids, 0.3, seed=1) != a
    assert set(a.dev) | set(a.held_out) == set(ids) and not set(a.dev) & set(a.held_out)
    assert 0.27 < len(a.held_out) / len(ids) < 0.33  # binomial: sd about 0.01
    sub = holdout_split(ids[:100][::-1], 0.3, seed=0)  # a subset, in another order: the same membership
    assert set(sub.held_out) == set(a.held_out) & set(ids[:100])
    assert list(sub.dev) == [q for q in ids[:100][::-1] if q not in set(a.held_out)]
    assert all(is_held_out(q, 0.3, 0) for q in a.held_out)


def test_bad_fractions_are_one_line_naming_what_is_accepted():
    assert "a number in (0, 0.9)" in holdout_problem(0.95)
    assert "a number in (0, 0.9)" in holdout_problem(0)
    assert "a number in (0, 0.9)" in holdout_problem("0.3")
    assert holdout_problem(0.3) is None
    few = holdout_problem(0.3, [f"q{i}" for i in range(10)], seed=0)
    assert few is not None and "each side needs at least 5" in few
    assert holdout_problem(0.5, [f"q{i}" for i in range(60)], seed=0) is None
