"""lab.testset.tiers: the difficulty tier rule."""
from __future__ import annotations

import pytest

from lab.testset.tiers import difficulty


@pytest.mark.parametrize("rank, overlap, tier", [(1, 0.8, "easy"), (3, 0.5, "easy"), (1, 0.3, "medium"),
                                                 (4, 0.9, "medium"), (10, 0.0, "medium"), (11, 1.0, "hard"),
                                                 (None, 1.0, "hard")])
def test_difficulty_tier_rule(rank, overlap, tier):
    assert difficulty(rank, overlap) == tier
