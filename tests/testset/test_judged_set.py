"""lab.testset.judged_set: Cohen's kappa of the judge against an annotation sheet, on the pairs both graded."""
from __future__ import annotations

import pytest

from lab.testset.judged_set import human_agreement


def test_human_agreement_kappa():
    rows = [{"qid": "q", "unit_id": f"d{i}", "grade": g} for i, g in enumerate([0, 1, 2, 3, 3, None])]
    judged = {("q", f"d{i}"): g for i, g in enumerate([0, 1, 2, 3, 2, 1])}
    out = human_agreement(rows, judged)
    assert out["pairs"] == 5 and out["sheet_graded"] == 5
    assert out["exact_agreement"] == pytest.approx(4 / 5)
    assert 0 < out["kappa"] < out["kappa_quadratic"] <= 1
    assert human_agreement(rows, {})["pairs"] == 0
