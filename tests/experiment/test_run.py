"""lab.experiment.run.run_experiment: token-level chunk metrics beside the ranking metrics in span mode, and
condensed evaluation (unjudged units removed first), on a small slice of SciFact with its rationale spans."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lab.experiment.run import run_experiment
from lab.metrics.tokens import UnitCounter, chunk_span, token_scores
from lab.retrievers.base import Context

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mini_scifact(tmp_path_factory) -> Path:
    """5 SciFact test claims with evidence, their documents and 40 other documents."""
    src = REPO / "data" / "scifact"
    folder = tmp_path_factory.mktemp("scifact") / "mini"
    ev = [json.loads(x) for x in (src / "evidence.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    ev = [e for e in ev if e.get("split") == "test"]
    qids = list(dict.fromkeys(e["query_id"] for e in ev))[:5]
    rows = [r.split("\t") for r in (src / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    rows = [r for r in rows if r[0] in qids]
    wanted = {d for _, d, _ in rows}
    docs = []
    with gzip.open(src / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if json.loads(line)["_id"] in wanted or i < 40:
                docs.append(line.rstrip("\n"))
    queries = [x for x in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if x.strip() and json.loads(x)["_id"] in qids]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, d, g in rows), encoding="utf-8")
    (folder / "evidence.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev if e["query_id"] in qids),
                                           encoding="utf-8")
    return folder


CHUNKING = {"chunker": "recursive", "size": 40, "overlap": 8, "size_unit": "words"}


def test_span_runs_carry_token_metrics(mini_scifact, tmp_path):
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    res = run_experiment(mini_scifact, "bm25", {}, k=20, chunking=CHUNKING, relevance="span",
                         metrics=["ndcg@10", "recall@10", "judged@10"], ctx=ctx)
    assert res.info["relevance_mode"] == "span"
    pq = res.evaluation.per_query
    for m in ("token_recall", "token_precision", "token_iou"):
        assert f"{m}@10" in pq and f"{m}@10" in res.evaluation.means and f"{m}@10" in res.summary()
        assert pq[f"{m}@10"].between(0, 1).all()
    assert (pq["token_iou@10"] <= pq[["token_recall@10", "token_precision@10"]].min(axis=1) + 1e-12).all()
    # one query recomputed from its spans directly
    from lab.data.beir import load_dataset

    ds = load_dataset(mini_scifact, progress=False)
    q = pq.index[0]
    spans = [(s.doc_id, s.start, s.end) for s in ds.evidence if s.query_id == q]
    ranked = [d for d, _ in res.eval_run.ranked(q, 10)]
    docs = {d for d, _, _ in spans} | {chunk_span(c)[0] for c in ranked}
    assert docs - {d for d, _, _ in spans}, "the check needs a chunk from a document without evidence"
    count = UnitCounter.for_docs({d: ds.corpus[d].text for d in docs}, "words")  # every chunk sized in words
    want = token_scores(ranked, spans, 10, count)
    for m in ("token_recall", "token_precision", "token_iou"):
        assert pq.loc[q, f"{m}@10"] == pytest.approx(want[m])
    # sized in characters, the chunks of documents without evidence would deflate precision
    evidence_only = UnitCounter.for_docs({d: ds.corpus[d].text for d, _, _ in spans}, "words")
    assert token_scores(ranked, spans, 10, evidence_only)["token_precision"] < want["token_precision"]


def test_doc_runs_have_no_token_metrics_and_condensed_is_recorded(mini_scifact, tmp_path):
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    plain = run_experiment(mini_scifact, "bm25", {}, k=20, metrics=["ndcg@10", "judged@10"], ctx=ctx)
    cond = run_experiment(mini_scifact, "bm25", {}, k=20, metrics=["ndcg@10", "judged@10"], ctx=ctx,
                          condensed=True)
    assert not any(c.startswith("token_") for c in plain.evaluation.per_query)
    assert "condensed" not in plain.config and cond.config["condensed"] is True
    assert cond.evaluation.means["ndcg@10"] >= plain.evaluation.means["ndcg@10"]
    assert plain.evaluation.means["judged@10"] < 1.0
    # condensed lists hold judged documents only: every retrieved rank of them is judged
    assert cond.evaluation.means["judged@10"] <= 1.0


def test_span_mode_condensed_keeps_chunks_of_judged_documents(mini_scifact, tmp_path):
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    res = run_experiment(mini_scifact, "bm25", {}, k=20, chunking=CHUNKING, relevance="span",
                         metrics=["ndcg@10", "judged@1"], ctx=ctx, condensed=True)
    # after condensing, the first rank of every query holds a chunk of a judged document
    assert res.evaluation.per_query["judged@1"].eq(1.0).all()


class _Counting:
    """Wraps a retriever and records the query ids each search call was given."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def search(self, queries, k=100):
        self.calls.append(list(queries))
        return self.inner.search(queries, k)


@pytest.mark.parametrize("chunking, relevance", [(None, "auto"), (CHUNKING, "span"), (CHUNKING, "doc")])
def test_prepared_experiment_scores_slices_as_run_experiment_does(mini_scifact, tmp_path, chunking, relevance):
    """result(slice) equals run_experiment on the dataset with the split's qrels cut to the slice; nested slices
    search each query once and reuse one index."""
    from dataclasses import replace

    from lab.data.beir import load_dataset
    from lab.experiment.run import prepare_experiment

    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    ds = load_dataset(mini_scifact, progress=False)
    metrics = ["ndcg@10", "recall@20", "mrr@10"]
    exp = prepare_experiment(ds, "bm25", {}, k=20, chunking=chunking, relevance=relevance, metrics=metrics, ctx=ctx)
    exp.retriever = counting = _Counting(exp.retriever)
    order = sorted(exp.queries)
    for n in (2, 4, len(order)):
        part = exp.result(order[:n])
        qrels = ds.qrels["test"]
        cut = replace(ds, qrels={"test": type(qrels)({q: qrels[q] for q in order[:n]}, name=qrels.name)})
        ref = run_experiment(cut, "bm25", {}, k=20, chunking=chunking, relevance=relevance, metrics=metrics, ctx=ctx)
        assert sorted(part.evaluation.per_query.index) == sorted(ref.evaluation.per_query.index) == order[:n]
        for m in ref.evaluation.means:
            assert part.evaluation.means[m] == pytest.approx(ref.evaluation.means[m], abs=1e-12), m
        assert part.info["n_queries"] == n and part.index_seconds == exp.index_seconds
    searched = [q for call in counting.calls for q in call]
    assert sorted(searched) == order  # every query searched exactly once over the three slices
    assert [len(c) for c in counting.calls] == [2, 2, len(order) - 4]
    whole = exp.result()
    assert counting.calls[-1] == order[4:] and len(counting.calls) == 3  # all answers reused
    assert whole.evaluation.means == pytest.approx(part.evaluation.means)


def test_dataset_fingerprint_hashed_once_per_experiment(mini_scifact, tmp_path, monkeypatch):
    """Each query slice's result names the dataset's fingerprint; the files are hashed once, not per slice."""
    import importlib

    from lab.experiment.run import prepare_experiment

    run_module = importlib.import_module("lab.experiment.run")  # where the experiment looks the function up

    calls = []
    real = run_module.fingerprint
    monkeypatch.setattr(run_module, "fingerprint", lambda *a, **k: calls.append(a) or real(*a, **k))
    exp = prepare_experiment(mini_scifact, "bm25", {}, k=20, ctx=Context(cache_dir=tmp_path, progress=False))
    qids = sorted(exp.queries)
    first, whole = exp.result(qids[:2]), exp.result(qids)
    assert len(calls) == 1
    assert first.info["dataset_fingerprint"] == whole.info["dataset_fingerprint"] == real(mini_scifact)
