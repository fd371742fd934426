"""lab.analysis.trust: the trust object of a leaderboard built by the one leaderboard function from per-query
scores (real paired tests), its warnings in plain sentences and the lines printed above the table."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lab.analysis.leaderboard import leaderboard
from lab.analysis.trust import selection_record, trust_block, trust_lines
from lab.data.labels import LabelProvenance
from lab.metrics.stats import min_detectable_diff, queries_to_detect

HUMAN = LabelProvenance("human")


def _board(means, n=20, sd=0.25, seed=0):
    """Runs scoring mean + shared query difficulty + own noise on n queries; run ids r0, r1, ..."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, sd, n)
    ids = [f"q{i}" for i in range(n)]
    scores = {f"r{i}": pd.Series(m + base + rng.normal(0, sd / 2, n), index=ids) for i, m in enumerate(means)}
    df = leaderboard(list(scores.values()), "ndcg@10", labels=list(scores),
                     extra=[{"run_id": r} for r in scores], n_resamples=2000)
    return df, scores


def test_power_figures_are_those_of_the_stats_functions():
    df, scores = _board([0.50, 0.49, 0.48], n=20)
    t = trust_block(df, scores, [HUMAN] * 3, judged_at_10=[0.9, 0.8, float("nan")])
    best = scores[df["run_id"][0]]
    diffs = [(scores[r] - best).to_numpy() for r in df["run_id"][1:]]
    assert t["n_queries"] == 20 and t["labels"] == HUMAN.short()
    assert t["min_detectable_diff"] == pytest.approx(float(np.median([min_detectable_diff(d) for d in diffs])))
    assert not df["significant"][1]
    assert t["queries_needed"] == queries_to_detect(diffs[0], diffs[0].mean()) > 20
    assert t["judged_at_10"] == pytest.approx(0.85)
    assert any(w.startswith("the top three are indistinguishable with 20 queries; about ") or
               w.startswith("the top two are indistinguishable with 20 queries; about ") for w in t["warnings"])
    assert "judge" not in " ".join(t["warnings"])  # human labels: no label warning


def test_separated_runs_need_no_more_queries():
    df, scores = _board([0.9, 0.3], n=40)
    t = trust_block(df, scores, [HUMAN] * 2)
    assert df["significant"][1] and t["queries_needed"] is None and t["warnings"] == []


def test_label_warnings_generated_unchecked_judge_and_low_kappa():
    df, scores = _board([0.9, 0.3], n=40)
    gen = LabelProvenance("generated", generator="gguf:small@1")
    t = trust_block(df, scores, [gen, gen])
    assert t["labels"]["generator"] == "gguf:small@1"
    assert any("written by a model (gguf:small@1)" in w for w in t["warnings"])
    unchecked = LabelProvenance("mixed", judge="gguf:judge@1")
    t = trust_block(df, scores, [unchecked] * 2, judged_at_10=[0.3, 0.4])
    text = " ".join(t["warnings"])
    assert "no judge card" in text and "judged@10 is 0.35 on judged labels" in text
    weak = LabelProvenance("judged", judge="j", judge_check="kappa 0.12 [-0.05, 0.30] on 40 pairs", judge_kappa=0.12)
    t = trust_block(df, scores, [weak] * 2)
    assert any("below the floor" in w and "kappa 0.12" in w for w in t["warnings"])
    mixed = trust_block(df, scores, [HUMAN, gen])
    assert mixed["labels"]["source"] == "mixed" and any("different provenance" in w for w in mixed["warnings"])


def test_label_warnings_about_the_default_llm_name_the_better_one():
    df, scores = _board([0.9, 0.3], n=40)
    smol = "gguf:SmolLM2-135M-Instruct.Q4_1.gguf@sha256:b179c9523d0e6a0f"
    gen = LabelProvenance("generated", generator=smol)
    assert any("--llm qwen2.5-coder-0.5b" in w for w in trust_block(df, scores, [gen, gen])["warnings"])
    weak = LabelProvenance("judged", judge=smol, judge_check="kappa 0.12 on 40 pairs", judge_kappa=0.12)
    warned = [w for w in trust_block(df, scores, [weak] * 2)["warnings"] if "below the floor" in w]
    assert warned and "--llm qwen2.5-coder-0.5b" in warned[0]
    other = LabelProvenance("generated", generator="openai:http://127.0.0.1:8000/v1#qwen")
    assert not any("--llm qwen" in w for w in trust_block(df, scores, [other, other])["warnings"])


def test_selection_and_a_winner_that_fell_outside_its_dev_ci():
    dev = pd.Series(np.linspace(0.6, 0.8, 30))
    held = pd.Series(np.linspace(0.2, 0.4, 12))
    sel = selection_record("ndcg@10", "a" * 32, dev, held, 0.3, 0)
    assert sel["dev_queries"] == 30 and sel["holdout_queries"] == 12
    assert sel["optimism"] == pytest.approx(0.7 - 0.3) and sel["holdout_ci"][0] < 0.3 < sel["holdout_ci"][1]
    df, scores = _board([0.9, 0.3], n=40)
    t = trust_block(df, scores, [HUMAN] * 2, selection=sel)
    assert t["n_queries"] == 40 + 12 and t["selection"] == sel
    assert any("below its dev CI" in w and "its lead was partly chosen by the dev queries" in w for w in t["warnings"])
    lines = trust_lines(t, "ndcg@10")
    assert lines[0] == "trust: 52 queries; labels human"
    assert any(line.startswith("held-out check of the winner (run aaaaaaaa, ndcg@10): dev 0.7000 on 30 queries")
               for line in lines)
    assert lines[-1].startswith("warning: the winner (run aaaaaaaa) scored 0.3000 on 12 held-out queries")
