"""lab.testset.graders: two graders' agreement (percent, Cohen's kappa, weighted kappa, each with n and CI) checked
against scikit-learn, its one-line summary, and --graders naming files that are not there."""
from __future__ import annotations

import math

import pytest

from lab.core.errors import ConfigError
from lab.testset.graders import agreement, resolve_graders, summary


def test_agreement_matches_scikit_learn():
    from sklearn.metrics import cohen_kappa_score

    a = [0, 1, 2, 3, 3, 2, 0, 1, 2, 2, 0, 3, 1, 1, 0, 2]
    b = [0, 2, 2, 3, 2, 2, 0, 0, 1, 2, 0, 3, 1, 2, 1, 2]
    rep = agreement(a, b)
    assert rep["pairs"] == 16 and rep["percent_agreement"]["value"] == pytest.approx(10 / 16)
    assert rep["kappa"]["value"] == pytest.approx(cohen_kappa_score(a, b))
    assert rep["weighted_kappa"]["value"] == pytest.approx(cohen_kappa_score(a, b, weights="linear"))
    for key in ("percent_agreement", "kappa", "weighted_kappa"):
        lo, hi = rep[key]["ci"]
        assert lo <= rep[key]["value"] <= hi and rep[key]["n"] == 16
    assert summary(rep) == (f"2 graders, kappa {cohen_kappa_score(a, b):.2f} [{rep['kappa']['ci'][0]:.2f}, "
                            f"{rep['kappa']['ci'][1]:.2f}] on 16 pairs")
    same = agreement([1, 1, 1], [1, 1, 1])
    assert same["kappa"]["value"] is None and math.isclose(same["percent_agreement"]["value"], 1.0)
    assert summary(same) == "2 graders, kappa n/a on 3 pairs"


def test_graders_names_two_existing_files(tmp_path):
    sheet = tmp_path / "pool.csv"
    with pytest.raises(ConfigError, match="name two graders"):
        resolve_graders(sheet, "alice")
    with pytest.raises(ConfigError, match="no file .*pool.grader-bob.csv"):
        (tmp_path / "pool.grader-alice.csv").write_text("qid\n", encoding="utf-8")
        resolve_graders(sheet, "alice,bob")
    (tmp_path / "pool.grader-bob.csv").write_text("qid\n", encoding="utf-8")
    assert [p.name for p in resolve_graders(sheet, "alice, bob")] == ["pool.grader-alice.csv", "pool.grader-bob.csv"]
