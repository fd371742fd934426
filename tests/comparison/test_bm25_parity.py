"""bm25s against rank-bm25 (the plain-Python reference) on the same tokens, SciFact's first 1,000 docs, 50 queries.

Which variants truly agree (checked here, scores to 1e-6, top 10 equal up to equal-score ties):
  bm25s "lucene"    == rank_bm25 BM25Okapi with Lucene's idf (``_calc_idf`` overridden)  x 1/(k1+1)
  bm25s "robertson" == rank_bm25 BM25Okapi(epsilon=0)                                      x 1/(k1+1)
  bm25s "atire"     == rank_bm25 BM25Okapi with idf ln(N/df) (``_calc_idf`` overridden)
  bm25s "bm25+"     == rank_bm25 BM25Plus (unchanged)
and which do not:
  bm25s "bm25l"     != rank_bm25 BM25L (rank_bm25 0.2.2 multiplies each term by tf: dorianbrown/rank_bm25#5)
  rank_bm25 BM25Okapi's default epsilon=0.25 floors negative idf at 0.25 x mean idf, bm25s clips it at 0.
Both libraries' "bm25+" add delta x idf for every query term to every document, so delta shifts a query's
scores by a constant and never changes the ranking (checked below).
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

bm25s = pytest.importorskip("bm25s")
rank_bm25 = pytest.importorskip("rank_bm25")

from lab.data.types import Corpus, Document, Queries  # noqa: E402
from lab.retrievers import Context, build  # noqa: E402
from lab.text.tokenize import Tokenizer  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "scifact"
K1, B, TOL = 0.9, 0.4, 1e-6
N_DOCS, N_QUERIES = 1000, 50


def read_slice():
    """SciFact's first 1,000 docs (file order) and first 50 test queries, read directly from the files."""
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for _, line in zip(range(N_DOCS), fh, strict=False)]
    test_ids = [ln.split("\t")[0] for ln in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    texts = {}
    for line in (DATA / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        o = json.loads(line)
        texts[o["_id"]] = o["text"]
    qids = list(dict.fromkeys(test_ids))[:N_QUERIES]
    return docs, {q: texts[q] for q in qids}


@pytest.fixture(scope="module")
def data():
    docs, queries = read_slice()
    tk = Tokenizer(language="en")
    corpus_tokens = tk.tokenize([d["title"] + " " + d["text"] for d in docs])
    query_tokens = tk.tokenize(list(queries.values()))
    return docs, queries, corpus_tokens, query_tokens


class LuceneIdf(rank_bm25.BM25Okapi):
    def _calc_idf(self, nd):
        for w, df in nd.items():
            self.idf[w] = math.log(1 + (self.corpus_size - df + 0.5) / (df + 0.5))


class AtireIdf(rank_bm25.BM25Okapi):
    def _calc_idf(self, nd):
        for w, df in nd.items():
            self.idf[w] = math.log(self.corpus_size / df)


def bm25s_scores(corpus_tokens, query_tokens, method, delta=0.5):
    m = bm25s.BM25(k1=K1, b=B, delta=delta, method=method, dtype="float64")
    m.index(corpus_tokens, show_progress=False)
    out = []
    for q in query_tokens:
        ids = m.get_tokens_ids(q)
        out.append(np.asarray(m.get_scores_from_ids(ids), dtype=np.float64))
    return out


def rank_scores(model, query_tokens, scale=1.0):
    return [np.asarray(model.get_scores(q), dtype=np.float64) * scale for q in query_tokens]


def top10(scores: np.ndarray) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:10]


def assert_same_top10(a: np.ndarray, b: np.ndarray, where: str):
    """Same top 10, except that docs may swap where their scores are equal to TOL."""
    ta, tb = top10(a), top10(b)
    for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            assert abs(a[x] - a[y]) <= TOL and abs(b[x] - b[y]) <= TOL, f"{where}: rank {i + 1}: {x} vs {y}"


PAIRS = {
    "lucene": lambda ct, d: (LuceneIdf(ct, k1=K1, b=B), 1 / (K1 + 1)),
    "robertson": lambda ct, d: (rank_bm25.BM25Okapi(ct, k1=K1, b=B, epsilon=0.0), 1 / (K1 + 1)),
    "atire": lambda ct, d: (AtireIdf(ct, k1=K1, b=B), 1.0),
    "bm25+": lambda ct, d: (rank_bm25.BM25Plus(ct, k1=K1, b=B, delta=d), 1.0),
}


@pytest.mark.parametrize("variant", list(PAIRS))
def test_equivalent_variants_agree(data, variant):
    _, _, ct, qt = data
    delta = 1.0
    model, scale = PAIRS[variant](ct, delta)
    ours, ref = bm25s_scores(ct, qt, variant, delta), rank_scores(model, qt, scale)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, ref, strict=False))
    assert worst <= TOL, f"{variant}: max |score difference| {worst:.3g}"
    for i, (a, b) in enumerate(zip(ours, ref, strict=False)):
        assert_same_top10(a, b, f"{variant} query {i}")


def test_bm25l_does_not_agree(data):
    """rank_bm25 0.2.2's BM25L is not bm25s' BM25L: if this starts failing, rank_bm25 was fixed; revisit the map."""
    _, _, ct, qt = data
    ours = bm25s_scores(ct, qt, "bm25l", 0.5)
    ref = rank_scores(rank_bm25.BM25L(ct, k1=K1, b=B, delta=0.5), qt)
    differing = sum(top10(a) != top10(b) for a, b in zip(ours, ref, strict=False))
    assert differing > 0


def test_bm25plus_delta_never_changes_the_ranking(data):
    _, _, ct, qt = data
    with_delta, without = bm25s_scores(ct, qt, "bm25+", 1.0), bm25s_scores(ct, qt, "bm25+", 0.0)
    for a, b in zip(with_delta, without, strict=False):
        shift = a - b
        assert np.ptp(shift) <= TOL  # one constant per query
        assert top10(a) == top10(b)


def test_retriever_backends_agree(data, tmp_path):
    """The bm25 strategy gives the same hits and scores with either backend, for each shared variant."""
    docs, queries, _, _ = data
    corpus = Corpus({d["_id"]: Document(d["_id"], d["text"], d["title"]) for d in docs})
    qs = Queries(queries)
    ctx = Context(cache_dir=tmp_path, progress=False)
    for variant in PAIRS:
        runs = []
        for backend in ("bm25s", "rank_bm25"):
            r = build("bm25", {"backend": backend, "variant": variant}, ctx)
            r.index(corpus)
            runs.append(r.search_batch(qs, k=10))
        a, b = runs
        for q in qs:
            ra, rb = a.ranked(q), b.ranked(q)
            assert len(ra) == len(rb), (variant, q)
            for (da, sa), (db, sb) in zip(ra, rb, strict=False):
                assert abs(sa - sb) <= TOL, (variant, q, da, db)
                assert da == db or abs(a[q][da] - a[q].get(db, -1)) <= TOL, (variant, q, da, db)


def test_okapi_default_epsilon_is_not_robertson(data):
    """Without stopwords some words sit in more than half the docs (negative Robertson idf): rank_bm25's
    default epsilon=0.25 floors them at 0.25 x mean idf, bm25s clips them at 0, so only epsilon=0 agrees."""
    docs, queries, _, _ = data
    tk = Tokenizer(language="en", stopwords=None)
    ct = tk.tokenize([d["title"] + " " + d["text"] for d in docs])
    qt = tk.tokenize(list(queries.values()))
    ours = bm25s_scores(ct, qt, "robertson")
    default = rank_scores(rank_bm25.BM25Okapi(ct, k1=K1, b=B), qt, 1 / (K1 + 1))
    eps0 = rank_scores(rank_bm25.BM25Okapi(ct, k1=K1, b=B, epsilon=0.0), qt, 1 / (K1 + 1))
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, eps0, strict=False)) <= TOL
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, default, strict=False)) > 0.01
