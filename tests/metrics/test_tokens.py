"""Token-level chunk metrics (Chroma's token recall / precision / IoU) on hand-computed cases and edge cases."""
from __future__ import annotations

import pytest

from lab.data.types import Run
from lab.metrics.tokens import UnitCounter, chunk_span, merge, token_metrics, token_scores


def test_merge_and_chunk_span():
    assert merge([(5, 8), (0, 3), (2, 4), (8, 9), (7, 7)]) == [(0, 4), (5, 9)]
    assert chunk_span("guide/install@10-20") == ("guide/install", 10, 20)
    assert chunk_span("a@b@3-4") == ("a@b", 3, 4)
    assert chunk_span("doc", {"doc": 50}) == ("doc", 0, 50)


def test_hand_computed_characters():
    # evidence [10, 30) in d; chunks d@0-20 (10 evidence chars) and x@0-10 (none)
    sc = token_scores(["d@0-20", "x@0-10"], [("d", 10, 30)], k=2)
    assert sc["token_recall"] == pytest.approx(10 / 20)
    assert sc["token_precision"] == pytest.approx(10 / 30)
    assert sc["token_iou"] == pytest.approx(10 / (30 + 20 - 10))
    # k=1 keeps the first chunk only
    sc1 = token_scores(["d@0-20", "x@0-10"], [("d", 10, 30)], k=1)
    assert sc1["token_precision"] == pytest.approx(10 / 20) and sc1["token_iou"] == pytest.approx(10 / 30)


def test_overlapping_chunks_count_evidence_once_and_chunk_tokens_each_time():
    # chunks d@0-20 and d@10-30 overlap on [10, 20); evidence [5, 25)
    sc = token_scores(["d@0-20", "d@10-30"], [("d", 5, 25)], k=2)
    assert sc["token_recall"] == 1.0  # 20 evidence chars, all covered, counted once
    assert sc["token_precision"] == pytest.approx(20 / 40)  # chunk sizes summed: 20 + 20
    assert sc["token_iou"] == pytest.approx(20 / (40 + 20 - 20))
    # overlapping evidence spans are merged before counting
    sc2 = token_scores(["d@0-20"], [("d", 0, 10), ("d", 5, 15)], k=1)
    assert sc2["token_recall"] == 1.0 and sc2["token_precision"] == pytest.approx(15 / 20)


def test_edge_cases_no_evidence_and_empty_retrieval():
    assert token_scores(["d@0-5"], [], k=1) is None
    sc = token_scores([], [("d", 0, 10)], k=5)
    assert sc == {"token_recall": 0.0, "token_precision": 0.0, "token_iou": 0.0}
    run = Run({"q1": {"d@0-10": 2.0, "d@10-20": 1.0}, "q2": {}})
    df = token_metrics(run, {"q1": [("d", 0, 10)], "q2": [("d", 0, 4)], "q3": []}, [1, 2])
    assert list(df.index) == ["q1", "q2"]  # q3 has no evidence: not scored
    assert df.loc["q1", "token_recall@1"] == 1.0 and df.loc["q1", "token_precision@2"] == pytest.approx(0.5)
    assert (df.loc["q2"] == 0).all()  # nothing retrieved
    assert list(df.columns) == [f"{m}@{k}" for m in ("token_recall", "token_precision", "token_iou") for k in (1, 2)]


def test_words_as_units():
    text = "alpha beta gamma delta epsilon"
    count = UnitCounter.for_docs({"d": text}, "words")
    # evidence "gamma delta" [11, 22); chunk [0, 16) holds alpha beta gamma -> 1 evidence word of 2, 3 words
    sc = token_scores(["d@0-16"], [("d", 11, 22)], k=1, count=count)
    assert sc["token_recall"] == pytest.approx(1 / 2)
    assert sc["token_precision"] == pytest.approx(1 / 3)
    assert sc["token_iou"] == pytest.approx(1 / (3 + 2 - 1))


def test_all_cutoffs_at_once_equal_one_cutoff_at_a_time():
    """token_scores_at (every cut-off from one parse, running sums) equals token_scores at each k alone, with a
    shared span cache across queries; random spans over three documents, chars and a unit counter."""
    import random

    from lab.metrics.tokens import token_scores_at

    rng = random.Random(0)
    count = UnitCounter({"a": list(range(0, 200, 3)), "b": list(range(0, 200, 7))})  # "c" counts chars
    seen: dict = {}
    for _ in range(300):
        ranked = []
        for _ in range(rng.randint(0, 30)):
            s = rng.randint(0, 180)
            ranked.append(f"{rng.choice('abc')}@{s}-{s + rng.randint(0, 40)}")
        evidence = [(rng.choice("abc"), s, s + rng.randint(0, 30)) for s in rng.sample(range(180), rng.randint(0, 3))]
        ks = sorted(rng.sample(range(0, 35), 4))
        for cnt in (None, count):
            got = token_scores_at(ranked, evidence, ks, cnt, seen=seen if cnt is count else None)
            assert got == [token_scores(ranked, evidence, k, cnt) for k in ks]
