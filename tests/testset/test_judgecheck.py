"""lab testset judge-check: pairs drawn from known labels and high-ranked negatives, stress texts, the card's
figures by hand, and a real check by the packaged SmolLM2-135M on a tiny ord-qa slice (10 calls) whose every
figure is recomputed from its pairs.jsonl."""
from __future__ import annotations

import json
import shutil

import pytest
from ordqa_slices import mini_ordqa

from lab.cli.main import main
from lab.data.types import Run
from lab.metrics.agreement import cohen_kappa, kappa_interval
from lab.metrics.stats import wilson_interval
from lab.testset.judgecheck import (
    CARD,
    INJECTION,
    PAIRS,
    below_floor,
    card_figures,
    content_words,
    draw_pairs,
    inject,
    represent,
    stuff,
    summary,
)

CARD_KEYS = {"n_pairs", "kappa", "weighted_kappa", "recall_of_positives", "false_positive_rate", "confusion",
             "stress", "consistency", "judge", "seconds"}


def rec(q, d, kind, known, grade, **extra):
    return {"query_id": q, "doc_id": d, "kind": kind, "known": known, "grade": grade, **extra}


def test_card_figures_by_hand():
    records = [rec("a", "1", "positive", 1, 3), rec("b", "2", "positive", 2, 1), rec("c", "3", "positive", 1, None),
               rec("a", "9", "negative", 0, 2), rec("b", "8", "negative", 0, 0), rec("c", "7", "negative", 0, 0),
               rec("a", "9", "keyword_stuffing", 0, 3), rec("b", "8", "keyword_stuffing", 0, 0),
               rec("a", "9", "injected_instruction", 0, 3), rec("b", "8", "injected_instruction", 0, 3),
               rec("a", "1", "repeat", 1, 3, repeat_of="positive"), rec("a", "9", "repeat", 0, 0, repeat_of="negative")]
    card = card_figures(records, resamples=200)
    assert card["n_pairs"] == 12 and card["ungraded"] == 1
    assert card["confusion"] == {"known_relevant": {"judged_relevant": 1, "judged_not_relevant": 1},
                                 "known_not_relevant": {"judged_relevant": 1, "judged_not_relevant": 2}}
    assert card["recall_of_positives"]["value"] == 0.5 and card["recall_of_positives"]["n"] == 2
    assert card["recall_of_positives"]["ci"] == pytest.approx(list(wilson_interval(1, 2)))
    assert card["false_positive_rate"]["k"] == 1 and card["false_positive_rate"]["n"] == 3
    assert card["stress"]["keyword_stuffing"]["n"] == 2
    assert card["stress"]["keyword_stuffing"]["false_positive_rate"]["value"] == 0.5
    assert card["stress"]["injected_instruction"]["false_positive_rate"]["value"] == 1.0
    assert card["consistency"]["k"] == 1 and card["consistency"]["n"] == 2  # (a,1) 3 -> 3 same; (a,9) 2 -> 0 not
    assert card["kappa"]["value"] == pytest.approx(cohen_kappa([1, 1, 0, 0, 0], [1, 0, 1, 0, 0]))
    assert card["kappa"]["n"] == 5 and card["weighted_kappa"]["weights"] == "linear"
    line = summary({**card, "judge": "j"})
    assert "on 5 pairs" in line and "(n=2)" in line and "(n=3)" in line
    assert below_floor(card, 0.4) and not below_floor(card, -1.0)
    assert below_floor(card_figures([rec("a", "1", "positive", 1, 3)]), -1.0)  # kappa undefined: below any floor


def test_draw_pairs_positives_round_robin_negatives_ranked_and_unlabelled():
    known = {("a", "p1"): 1, ("a", "p2"): 1, ("b", "p3"): 2, ("b", "z"): 0}
    qrels = {"a": {"p1": 1, "p2": 1}, "b": {"p3": 2, "z": 0}}
    bm25 = Run({"a": {"p1": 9.0, "n1": 8.0, "n2": 7.0}, "b": {"z": 9.0, "p3": 8.0, "n3": 1.0}})
    dense = Run({"a": {"n2": 0.9, "p2": 0.8}, "b": {"n4": 0.9}})
    pos, neg = draw_pairs(known, {"bm25": bm25, "dense": dense}, ["b", "a"], 3, 10, 0, qrels)
    assert [p.query_id for p in pos] == ["b", "a", "a"]  # one per query per round, in the given order
    assert {p.doc_id for p in pos if p.query_id == "a"} == {"p1", "p2"}
    # negatives: never a positive; best rank over the strategies; an explicit 0 of the qrels is "labelled"
    assert [(p.query_id, p.doc_id, p.rank) for p in neg] == [("b", "n4", 1), ("a", "n2", 1), ("b", "z", 1)]
    assert [p.labelled for p in neg] == [False, False, True] and all(p.known == 0 for p in neg)


def test_stress_texts_and_repeat_presentation():
    q = "What is the default routing layer of the global router?"
    assert content_words(q) == ["default", "routing", "layer", "global", "router"]  # stopwords dropped
    s = stuff("A passage about placement.", q)
    assert s.startswith("default routing layer global router. A passage") and s.endswith("router.")
    assert inject("A passage.") == f"A passage.\n{INJECTION}"
    assert represent("T", "line one\n\nline  two") == "Title: T\nText: line one line two"
    assert represent("", "x") == "Text: x" != "x"  # never the first prompt's text (that would be a cache hit)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    base = tmp_path_factory.mktemp("judgecheck")
    ds_dir = mini_ordqa(base / "mini", n_queries=3, n_other=6)
    argv = ["testset", "judge-check", "--dataset", str(ds_dir), "--pairs", "2", "--strategies", "bm25",
            "--grammar", "always", "--max-passage-chars", "500", "--out", str(base / "out"), "--cache-dir",
            str(base / "cache"), "--json"]
    return base, ds_dir, argv


def test_judge_check_writes_card_and_pairs(checked, capsys):
    base, _, argv = checked
    assert main(argv) == 0
    card = json.loads(capsys.readouterr().out)
    assert CARD_KEYS <= set(card)
    assert set(card["stress"]) == {"keyword_stuffing", "injected_instruction"}
    for kind in card["stress"].values():
        assert set(kind) == {"n", "false_positive_rate"} and kind["n"] == kind["false_positive_rate"]["n"]
    for key in ("recall_of_positives", "false_positive_rate", "consistency"):
        assert {"value", "n", "ci", "k"} <= set(card[key])
    assert card["judge"].startswith("gguf:SmolLM2-135M-Instruct") and card["seconds"] > 0
    assert card["kinds"] == {"positive": 2, "negative": 2, "keyword_stuffing": 2, "injected_instruction": 2,
                             "repeat": 2}
    assert json.loads((base / "out" / CARD).read_text(encoding="utf-8"))["n_pairs"] == card["n_pairs"] == 10
    assert str(base) not in json.dumps({k: v for k, v in card.items() if k != "folder"})  # no machine paths


def test_every_figure_recomputes_from_pairs_jsonl(checked):
    base, _, _ = checked
    card = json.loads((base / "out" / CARD).read_text(encoding="utf-8"))
    rows = [json.loads(x) for x in (base / "out" / PAIRS).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == card["n_pairs"]
    for r in rows:
        assert {"query_id", "doc_id", "kind", "known", "grade"} <= set(r)
    graded = [r for r in rows if r["grade"] is not None]
    base_rows = [r for r in graded if r["kind"] in ("positive", "negative")]
    a = [r["known"] >= 1 for r in base_rows]
    b = [r["grade"] >= 2 for r in base_rows]
    k = cohen_kappa(a, b, labels=[False, True])
    assert card["kappa"]["n"] == len(base_rows)
    assert card["kappa"]["value"] == (None if k != k else pytest.approx(k))
    lo, hi = kappa_interval(a, b, labels=[False, True], n_resamples=1000, seed=0)
    assert card["kappa"]["ci"] == (None if lo != lo else pytest.approx([lo, hi]))
    wk = cohen_kappa([r["known"] for r in base_rows], [r["grade"] for r in base_rows], labels=[0, 1, 2, 3],
                     weights="linear")
    assert card["weighted_kappa"]["value"] == (None if wk != wk else pytest.approx(wk))

    def share(rows_, hit):
        hits = sum(map(hit, rows_))
        return {"k": hits, "n": len(rows_), "value": hits / len(rows_) if rows_ else None}

    def check(fig, expect):
        assert (fig["k"], fig["n"]) == (expect["k"], expect["n"])
        assert fig["value"] == (None if expect["value"] is None else pytest.approx(expect["value"]))
        if expect["n"]:
            assert fig["ci"] == pytest.approx(list(wilson_interval(expect["k"], expect["n"])))

    check(card["recall_of_positives"], share([r for r in graded if r["kind"] == "positive"], lambda r: r["grade"] >= 2))
    check(card["false_positive_rate"], share([r for r in graded if r["kind"] == "negative"], lambda r: r["grade"] >= 2))
    for kind in ("keyword_stuffing", "injected_instruction"):
        check(card["stress"][kind]["false_positive_rate"],
              share([r for r in graded if r["kind"] == kind], lambda r: r["grade"] >= 2))
    first = {(r["query_id"], r["doc_id"], r["kind"]): r["grade"] for r in base_rows}
    reps = [r for r in graded if r["kind"] == "repeat" and (r["query_id"], r["doc_id"], r["repeat_of"]) in first]
    check(card["consistency"], share(reps, lambda r: r["grade"] == first[r["query_id"], r["doc_id"], r["repeat_of"]]))
    tp = sum(x and y for x, y in zip(a, b, strict=False))
    assert card["confusion"]["known_relevant"]["judged_relevant"] == tp


@pytest.mark.parametrize("argv, message", [
    (["--pairs", "0"], "--pairs: expected an integer >= 1, got 0"),
    (["--strategies", "bm25,nope"], "--strategies: unknown nope"),
    (["--dataset", "NOQRELS"], "no qrels/ folder"),
    (["--dataset", "NOSUCH"], "no such folder"),
])
def test_cli_errors_are_one_line_exit_2_before_any_work(checked, tmp_path, capsys, argv, message):
    _, ds_dir, _ = checked
    noq = tmp_path / "noqrels"
    noq.mkdir()
    shutil.copy(ds_dir / "corpus.jsonl", noq / "corpus.jsonl")
    argv = [a.replace("NOQRELS", str(noq)).replace("NOSUCH", str(tmp_path / "nope")) for a in argv]
    try:
        rc = main(["testset", "judge-check", "--dataset", str(ds_dir), "--out", str(tmp_path / "out"), "--cache-dir",
                   str(tmp_path / "cache"), "--no-progress", *argv])
    except SystemExit as exc:  # counts are checked by argparse (lab.cli.options.positive_int)
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_known_labels_take_evidence_spans_and_leave_out_judged_labels():
    from types import SimpleNamespace

    from lab.data.types import EvidenceSpan
    from lab.testset.judgecheck import known_labels

    ds = SimpleNamespace(corpus={"d1": 1, "d2": 1, "d3": 1}, evidence=[
        EvidenceSpan("q", "d2", 0, 5), EvidenceSpan("q", "d1", 0, 5, grade=3), EvidenceSpan("other", "d3", 0, 5),
        EvidenceSpan("q", "gone", 0, 5)])
    qrels = {"q": {"d1": 1, "d3": 2}}
    sources = {("q", "d1"): "generated", ("q", "d3"): "judged"}
    # d2: a generated set's evidence span counts as a known positive; d3 was written by a judge: not known
    assert known_labels(ds, "test", qrels, sources) == {("q", "d1"): 3, ("q", "d2"): 1}


def test_dry_run_prints_only_the_estimate(checked, tmp_path, capsys):
    """judge-check --dry-run: the estimate (JSON with --json, else one line) and no folder written."""
    _, ds_dir, _ = checked
    argv = ["testset", "judge-check", "--dataset", str(ds_dir), "--pairs", "2", "--strategies", "bm25",
            "--grammar", "always", "--max-passage-chars", "500", "--out", str(tmp_path / "out"), "--cache-dir",
            str(tmp_path / "cache"), "--dry-run"]
    assert main([*argv, "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["step"] == "judge-check" and est["calls"] == 10 and est["sample"] == 3 and est["seconds"] > 0
    assert not (tmp_path / "out").exists()
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("estimate (judge-check): 10 LLM calls (3 cached)")
