"""bm25's lazy index (backend "bm25s") against bm25s' eager score matrix ("bm25s-eager") on real data: the same
hits and the same scores to the last digit, for several k1/b and every variant; columns computed only for the
terms asked; the late work counted as indexing by IndexedExperiment. Chunks of a corpus read off their documents'
tokens (the positional backend) against the eager matrix over the chunks tokenised one by one, on ORD-QA, a
SciFact slice and hostile texts cut anywhere."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.data import load_dataset
from lab.data.types import Corpus, Document, Queries
from lab.experiment.run import prepare_experiment
from lab.retrievers import Context, build
from lab.retrievers.bm25 import Bm25sBackend, LazyBm25sBackend, PositionalBm25sBackend
from lab.text.chunking import Chunk, chunk_corpus, chunk_id, chunks_to_corpus
from lab.text.tokenize import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = [
    {},  # Anserini's defaults: lucene, k1 0.9, b 0.4
    {"k1": 1.5, "b": 0.75},
    {"k1": 0.0, "b": 0.0},
    {"variant": "robertson", "k1": 1.2, "b": 1.0},
    {"variant": "atire", "k1": 2.0, "b": 0.3},
    {"variant": "bm25l"},
    {"variant": "bm25+", "k1": 1.2, "b": 0.9, "delta": 0.7},
]


@pytest.fixture(scope="module")
def ordqa():
    ds = load_dataset(ROOT / "data" / "ord-qa", progress=False)
    return ds.corpus, ds.split("test")[0]


@pytest.fixture(scope="module")
def scifact_slice():
    """SciFact's first 1,500 documents and its test queries (real text, a vocabulary of thousands of terms)."""
    ds = load_dataset(ROOT / "data" / "scifact", progress=False)
    docs = list(ds.corpus)[:1500]
    return Corpus({d.id: d for d in docs}), ds.split("test")[0]


def _indexed(corpus, backend, params, tmp_path):
    r = build("bm25", {**params, "backend": backend}, Context(cache_dir=tmp_path, progress=False))
    r.index(corpus)
    return r


@pytest.mark.parametrize("params", SETTINGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
@pytest.mark.parametrize("data", ["ordqa", "scifact_slice"])
def test_lazy_scores_equal_eager_to_the_last_digit(data, params, request, tmp_path):
    corpus, queries = request.getfixturevalue(data)
    lazy, eager = _indexed(corpus, "bm25s", params, tmp_path), _indexed(corpus, "bm25s-eager", params, tmp_path)
    assert isinstance(lazy._backend, LazyBm25sBackend) and isinstance(eager._backend, Bm25sBackend)
    one, ref = lazy.search(queries, 100), eager.search(queries, 100)
    assert sum(len(h) for h in ref.scores.values()) > 0
    assert one.scores == ref.scores  # dicts of floats: equal ids and equal doubles
    assert lazy.search_batch(queries, 100).scores == eager.search_batch(queries, 100).scores


def test_columns_only_for_the_terms_asked(ordqa, tmp_path):
    corpus, queries = ordqa
    r = _indexed(corpus, "bm25s", {}, tmp_path)
    backend = r._backend
    assert backend.columns == {} and r.lazy_seconds == 0.0
    first = list(queries)[0]
    r.search(queries.subset([first]), 10)
    asked = {t for t in r.tokenizer(queries[first]) if t in backend.vocab}
    assert {backend.vocab[t] for t in asked} == set(backend.columns)
    assert len(backend.columns) < len(backend.vocab)
    assert r.lazy_seconds > 0.0


def test_narrow_dtype_uses_the_eager_matrix(ordqa, tmp_path):
    corpus, _ = ordqa
    assert isinstance(_indexed(corpus, "bm25s", {"dtype": "float32"}, tmp_path)._backend, Bm25sBackend)


def test_late_index_work_counts_as_indexing(tmp_path):
    exp = prepare_experiment(ROOT / "data" / "ord-qa", "bm25", {}, ctx=Context(cache_dir=tmp_path, progress=False))
    built = exp.index_seconds
    assert exp.retriever.lazy_seconds == 0.0
    exp.result(list(exp.queries)[:5])
    lazy = exp.retriever.lazy_seconds
    assert lazy > 0.0 and exp.index_seconds == pytest.approx(built + lazy)
    exp.result(list(exp.queries)[:5])  # nothing new searched: nothing added
    assert exp.retriever.lazy_seconds == lazy and exp.index_seconds == pytest.approx(built + lazy)


CHUNKINGS = [("recursive", 64, 0), ("recursive", 256, 32), ("fixed", 128, 32), ("fixed", 1024, 0)]


@pytest.mark.parametrize("params", [SETTINGS[0], SETTINGS[1], SETTINGS[5], SETTINGS[6]],
                         ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
@pytest.mark.parametrize("chunking", CHUNKINGS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("data", ["ordqa", "scifact_slice"])
def test_chunks_read_off_document_tokens_score_as_eager(data, chunking, params, request, tmp_path):
    """Chunks indexed from their documents' tokens (a chunk corpus that names its source) against bm25s' eager
    matrix over the chunks tokenised one by one: the same hits, the same floats, one query at a time and batched."""
    corpus, queries = request.getfixturevalue(data)
    chunker, size, overlap = chunking
    chunks = chunk_corpus(corpus, chunker=chunker, size=size, overlap=overlap, progress=False)
    positional = _indexed(chunks_to_corpus(chunks, source=corpus), "bm25s", params, tmp_path)
    eager = _indexed(chunks_to_corpus(chunks), "bm25s-eager", params, tmp_path)
    backend = positional._backend
    assert isinstance(backend, PositionalBm25sBackend)
    assert backend.ok.mean() > 0.75  # most chunks read off the documents (the rest tokenised whole: ORD-QA's
    # identifiers with underscores are cut by fixed windows, SciFact's non-NFKC or sigma texts)
    assert positional.index_stats == eager.index_stats
    one, ref = positional.search(queries, 100), eager.search(queries, 100)
    assert sum(len(h) for h in ref.scores.values()) > 0
    assert one.scores == ref.scores
    assert positional.search_batch(queries, 100).scores == eager.search_batch(queries, 100).scores


HOSTILE = [
    "The cell's wall and the cells' walls: o's's x'sy ’s 'S alone.",
    "ΑΣ.Β ends; Σ alone; ςσ lower. İstanbul has a dotted İ.",
    "Ｆｕｌｌ-width and the ﬁ ligature, café (NFC) and cafe\u0301 (decomposed).",
    "北京大学 and English words mixed with 中文 text.",
    "Plain ascii text with numbers 12.5 mg/kg, e.g. IL-6 and TNF-α; then don't stop.",
    "under_score words_with_digits2 and a word cut-off at the end",
]


def test_hostile_texts_cut_anywhere_score_as_eager(tmp_path):
    """Spans cut at every few characters (inside words, possessives, at a capital sigma, in Han runs, in text NFKC
    changes): the chunks that cannot be read off their document are tokenised whole, so scores stay bm25s'."""
    docs = {f"d{i}": Document(f"d{i}", text, title=f"Title {i} ΣΑΣ" if i % 2 else "") for i, text in enumerate(HOSTILE)}
    source = Corpus(docs)
    chunks = []
    for d in docs.values():
        cuts = sorted({0, len(d.text), *range(0, len(d.text), 7), *range(3, len(d.text), 11)})
        for s, e in zip(cuts, cuts[1:], strict=False):
            chunks.append(Chunk(chunk_id(d.id, s, e), d.id, s, e, f"{d.title}\n{d.text[s:e]}" if d.title else
                                d.text[s:e], d.title, f"{d.title}\n" if d.title else ""))
    queries = Queries({"q1": "cell's walls s", "q2": "σ ας Σ istanbul", "q3": "full width fi cafe café",
                       "q4": "北京 english", "q5": "il 6 tnf α don", "q6": "under_score cut off word"})
    for params in (SETTINGS[0], SETTINGS[6]):
        positional = _indexed(chunks_to_corpus(chunks, source=source), "bm25s", params, tmp_path)
        eager = _indexed(chunks_to_corpus(chunks), "bm25s-eager", params, tmp_path)
        assert isinstance(positional._backend, PositionalBm25sBackend)
        assert 0 < positional._backend.ok.sum() < len(chunks)  # both paths taken
        assert positional.index_stats == eager.index_stats
        assert positional.search(queries, 100).scores == eager.search(queries, 100).scores
        assert positional.search_batch(queries, 100).scores == eager.search_batch(queries, 100).scores


def test_token_spans_are_the_tokens():
    """A slice-safe text's token_spans give exactly its tokens; texts whose spans tokenise differently say None."""
    tok = Tokenizer()
    for text in HOSTILE:
        got = tok.token_spans(text)
        if got is not None:
            assert got[0] == tok(text)
            for t, s in zip(got[0], got[1], strict=True):
                assert tok(text[s:s + 40])[0] == t
    assert tok.token_spans(HOSTILE[1]) is None and tok.token_spans(HOSTILE[3]) is None  # sigma; Han
    assert tok.token_spans(HOSTILE[2]) is None  # not NFKC


def test_headings_and_a_corpus_no_span_can_be_read_off(tmp_path):
    """Markdown heading paths as prefixes (one per chunk), and a corpus of Chinese texts only (jieba's tokens depend
    on the context: every chunk tokenised whole, no cut interval at all): still bm25s' scores."""
    md = Corpus({"m1": Document("m1", "# Setup\nInstall the cell's tools.\n\n## Build\nRun make, then make test.\n\n"
                                      "## Use\nCall draw() on a path; fill the cells.", title="Guide"),
                 "m2": Document("m2", "Plain text about cells and paths without headings.", title="")})
    zh = Corpus({"z1": Document("z1", "北京大学是一所大学。清华大学也在北京。"),
                 "z2": Document("z2", "上海有很多大学和研究所。")})
    for corpus, queries in ((md, Queries({"q1": "cell tools", "q2": "make test", "q3": "fill path"})),
                            (zh, Queries({"q1": "北京大学", "q2": "上海 研究所"}))):
        chunks = chunk_corpus(corpus, chunker="recursive", size=4, overlap=1, size_unit="words", progress=False)
        positional = _indexed(chunks_to_corpus(chunks, source=corpus), "bm25s", {}, tmp_path)
        eager = _indexed(chunks_to_corpus(chunks), "bm25s-eager", {}, tmp_path)
        assert isinstance(positional._backend, PositionalBm25sBackend)
        assert positional.index_stats == eager.index_stats
        assert positional.search(queries, 100).scores == eager.search(queries, 100).scores
        assert positional.search_batch(queries, 100).scores == eager.search_batch(queries, 100).scores
    assert any(c.prefix.count("\n") > 1 for c in chunk_corpus(md, size=4, overlap=1, size_unit="words",
                                                                progress=False))  # heading paths were used
    assert not positional._backend.ok.any()  # the Chinese corpus: every chunk tokenised whole
