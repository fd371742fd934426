"""BM25, the sparse baseline: ``build("bm25", {...})``.

Index text is ``title + " " + text`` (as BEIR and Pyserini's "flat" BEIR indexes do), tokenised by
:class:`lab.text.tokenize.Tokenizer` (``language``, ``stem``, ``stopwords``, ``user_dict``). Queries go through the same
tokenizer; a repeated query word counts once per occurrence (as in bm25s, rank_bm25 and Anserini's
bag-of-words queries).

Defaults k1=0.9, b=0.4 and variant "lucene" are Anserini/Pyserini's BM25 defaults, used for their BEIR "flat"
baselines (Lucene's BM25Similarity: idf = ln(1 + (N - df + .5)/(df + .5)), tf part = tf / (tf + k1(1 - b + b
dl/avgdl)), without the constant (k1 + 1) factor).

Backends
- ``bm25s`` (default): bm25s' scores, to the last digit, from an index built lazily (:class:`LazyBm25sBackend`):
  indexing counts each term's documents and frequencies (vectorised, numpy), and a term's score column is computed,
  by bm25s' own formula functions in its operation order, the first time a query asks for it. A sweep over many
  indexes then pays only for the columns of the queries it evaluates (successive halving's early rungs: a few
  queries' terms, not the vocabulary). With ``dtype`` other than float64 it is ``bm25s-eager`` (the casts of a
  narrower dtype were not checked to match).
  A chunk corpus that names its source (``Corpus.source``, set by :func:`lab.text.chunking.chunks_to_corpus`) is
  indexed from its documents' tokens (:class:`PositionalBm25sBackend`: each document tokenised once per process,
  a chunk's tokens read off its span, a term's chunks found when a query asks for it); the same scores.
- ``bm25s-eager``: bm25s builds its eager sparse score matrix over the whole vocabulary; a query is the sum of its
  terms' columns. The reference the lazy index is tested against (tests/retrievers/test_bm25_lazy.py).
- ``rank_bm25``: the plain-Python reference (dense, slow). Variants map as follows; every pair below was checked
  to give the same scores on SciFact (tests/comparison/test_bm25_parity.py):
    lucene    -> BM25Okapi with Lucene's idf (only ``_calc_idf`` overridden), scores / (k1 + 1)
    robertson -> BM25Okapi(epsilon=0): its idf floor becomes bm25s' clip of negative idf at 0; scores / (k1 + 1)
    atire     -> BM25Okapi with idf = ln(N / df) (only ``_calc_idf`` overridden)
    bm25+     -> BM25Plus as is (same formula as bm25s "bm25+")
    bm25l     -> refused: rank_bm25 0.2.2's BM25L multiplies each term by tf (dorianbrown/rank_bm25#5, fixed
                 in #20 after the 0.2.2 release) and gives absent terms 0, while bm25s gives absent terms their
                 tf=0 value; the two rank differently.
  Note on "bm25+" in both libraries: delta is added for every query term to every document, present or not,
  so it shifts all scores of a query by the same amount and does not change the ranking (Lv & Zhai's BM25+
  adds it only for terms the document contains). Likewise bm25s "bm25l" gives absent terms their tf=0 value.

Hits: only documents that contain at least one query term of positive weight are returned (Lucene returns only
matching documents); at most k, in the Run tie order (score descending, then doc id descending), so a cut at k
among equal scores is deterministic.
"""
from __future__ import annotations

import itertools
import math
import time
import unicodedata

import numpy as np
import scipy.sparse as sp

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries, Run
from lab.retrievers.base import BaseRetriever, Context, register
from lab.retrievers.params import at_least, between, one_of
from lab.text.tokenize import STOPWORD_LISTS, CorpusPositions, Tokenizer, corpus_positions

VARIANTS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
BACKENDS = ("bm25s", "bm25s-eager", "rank_bm25")
#: Lv & Zhai's recommended deltas (and rank_bm25's defaults): BM25L 0.5, BM25+ 1.0.
DEFAULT_DELTA = {"bm25l": 0.5, "bm25+": 1.0}


def doc_text(title: str, text: str) -> str:
    """The indexed text of a document: title + " " + text (BEIR's convention; title may be empty)."""
    return f"{title} {text}" if title else text


def top_k(cand: np.ndarray, scores: np.ndarray, id_rank: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of candidate docs ``cand`` with ``scores``: score descending, ties by doc id descending.

    ``id_rank[i]`` is the rank of doc i's id in string order, so the tie rule equals :meth:`Run.ranked`.
    """
    if len(cand) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        cand, scores = cand[keep], scores[keep]
    order = np.lexsort((-id_rank[cand], -scores))[:k]
    return cand[order], scores[order]


class _Backend:
    """Scores of one tokenised query over the corpus, and which docs match it."""

    def hits(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        """(matching doc indices, their scores)."""
        raise NotImplementedError


class Bm25sBackend(_Backend):
    def __init__(self, corpus_tokens, k1, b, variant, delta, dtype, show_progress):
        import bm25s  # heavy (numba, ~2 s): loaded only when this backend is chosen

        words = dict.fromkeys(itertools.chain.from_iterable(corpus_tokens))  # first-seen order
        vocab = {t: i for i, t in enumerate(words)}
        ids = [list(map(vocab.__getitem__, doc)) for doc in corpus_tokens]
        self.model = bm25s.BM25(k1=k1, b=b, delta=delta, method=variant, dtype=dtype, backend="numpy")
        self.model.index((ids, vocab), create_empty_token=False, show_progress=show_progress)
        self.vocab = vocab
        s = self.model.scores
        self.n_docs = s["num_docs"]
        # the transpose of bm25s' doc x term CSC matrix is a term x doc CSR matrix over the same arrays
        self.term_doc = sp.csr_matrix((s["data"], s["indices"], s["indptr"]), shape=(len(vocab), self.n_docs))
        nonocc = self.model.nonoccurrence_array
        self.nonocc = np.zeros(len(vocab)) if nonocc is None else np.asarray(nonocc, dtype=np.float64)

    def query_ids(self, tokens: list[str]) -> np.ndarray:
        return np.array([self.vocab[t] for t in tokens if t in self.vocab], dtype=np.int32)

    def hits(self, tokens):
        """bm25s' own scoring (``get_scores_from_ids``); a hit scores above a doc with no query term."""
        qids = self.query_ids(tokens)
        if len(qids) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        scores = self.model.get_scores_from_ids(qids)
        # bm25s adds nonoccurrence_array[qids].sum() to every doc (bm25l, bm25+): the same expression here gives
        # exactly the score of a doc with no query term; a matching term of positive weight adds to it
        nonocc = self.model.nonoccurrence_array
        baseline = nonocc[qids].sum() if nonocc is not None else 0.0
        cand = np.flatnonzero(scores > baseline)
        return cand, scores[cand].astype(np.float64)

    def batch_hits(self, token_lists: list[list[str]]):
        """All queries at once: one sparse product (queries x terms) @ (terms x docs)."""
        rows, cols = [], []
        for i, tokens in enumerate(token_lists):
            q = self.query_ids(tokens)
            rows.append(np.full(len(q), i, dtype=np.int64))
            cols.append(q)
        rows = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        cols = np.concatenate(cols) if cols else np.empty(0, dtype=np.int32)
        q = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(token_lists), len(self.vocab)))
        q.sum_duplicates()  # repeated query words: count
        s = (q @ self.term_doc).tocsr()
        baseline = q @ self.nonocc
        for i in range(len(token_lists)):
            lo, hi = s.indptr[i], s.indptr[i + 1]
            vals = s.data[lo:hi]
            keep = vals > 0  # the product keeps docs with a query term; weight-0 terms add nothing
            yield s.indices[lo:hi][keep].astype(np.int64), vals[keep] + baseline[i]


class LazyBm25sBackend(_Backend):
    """bm25s' scores, to the last digit, with each term's score column computed when a query first asks for it.

    Indexing: the vocabulary in first-seen order (as :class:`Bm25sBackend` builds it), each document's length, and
    for every term its documents (ascending) and frequencies: a stable sort of the corpus' term ids, no score. A
    term's column is then what bm25s' ``_build_scores_and_indices_for_matrix`` stores for it: ``idf * tfc`` by
    bm25s' own ``_select_idf_scorer`` / ``_select_tfc_scorer`` functions, on float64 arrays (the same IEEE
    operations, elementwise, as bm25s' per-document loop), less the non-occurrence value for bm25l and bm25+.
    Queries sum columns as bm25s' ``get_scores_from_ids`` does (``np.add.at`` per query term, in query order), and
    a batch multiplies the same sparse matrices :class:`Bm25sBackend` does, restricted to the queries' terms.
    ``lazy_seconds`` sums the time spent computing columns (index work done late: see :meth:`warm`).
    """

    def __init__(self, corpus_tokens: list[list[str]], k1: float, b: float, variant: str, delta: float) -> None:
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer  # heavy package (numba): see above

        self.k1, self.b, self.variant, self.delta = k1, b, variant, delta
        self._idf_fn, self._tfc_fn = _select_idf_scorer(variant), _select_tfc_scorer(variant)
        self.n_docs = len(corpus_tokens)
        self.lengths = np.array([len(t) for t in corpus_tokens])
        self.avg_doc_len = self.lengths.mean()  # bm25s' expression (np.array(lengths).mean()), so the same float
        flat = list(itertools.chain.from_iterable(corpus_tokens))
        self.vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}  # first-seen order, as bm25s' vocabulary
        terms = np.fromiter(map(self.vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        # one key per token, sorted: by term, then by document (equal keys are the same term in the same document)
        keys = np.sort(terms * self.n_docs + np.repeat(np.arange(self.n_docs, dtype=np.int64), self.lengths))
        new = np.ones(len(keys), dtype=bool)
        new[1:] = keys[1:] != keys[:-1]
        starts = np.flatnonzero(new)
        self.post_docs = keys[starts] % self.n_docs
        self.post_tf = np.diff(np.append(starts, len(keys))).astype(np.float64)
        self.indptr = np.zeros(len(self.vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys[starts] // self.n_docs, minlength=len(self.vocab)), out=self.indptr[1:])
        self.columns: dict[int, np.ndarray] = {}
        self.nonocc: dict[int, float] = {}
        self.lazy_seconds = 0.0

    def query_ids(self, tokens: list[str]) -> np.ndarray:
        return np.array([self.vocab[t] for t in tokens if t in self.vocab], dtype=np.int32)

    def _posting(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ``t``'s documents (ascending) and its frequency in each (float64)."""
        lo, hi = self.indptr[t], self.indptr[t + 1]
        return self.post_docs[lo:hi], self.post_tf[lo:hi]

    def _order(self, used: list[int]) -> list[int]:
        """Term ids in bm25s' vocabulary order (first seen in the corpus), the order a batch product sums in."""
        return sorted(used)

    def _column(self, t: int) -> np.ndarray:
        """Term ``t``'s scores over its documents (:meth:`_posting`), as bm25s stores them."""
        col = self.columns.get(t)
        if col is None:
            docs, tf = self._posting(t)  # (a posting computed late times itself: see PositionalBm25sBackend)
            t0 = time.perf_counter()
            idf = self._idf_fn(len(docs), N=self.n_docs)
            tfc = self._tfc_fn(tf_array=tf, l_d=self.lengths[docs],
                               l_avg=self.avg_doc_len, k1=self.k1, b=self.b, delta=self.delta)
            col = np.float64(idf) * tfc
            if self.variant in DEFAULT_DELTA:  # bm25s' _build_nonoccurrence_array, for this term
                self.nonocc[t] = float(np.float64(idf * self._tfc_fn(tf_array=0, l_d=self.avg_doc_len,
                                                                     l_avg=self.avg_doc_len, k1=self.k1, b=self.b,
                                                                     delta=self.delta)))
                col -= self.nonocc[t]
            self.columns[t] = col
            self.lazy_seconds += time.perf_counter() - t0
        return col

    def warm(self, token_lists: list[list[str]]) -> None:
        """Compute the columns of every term of these queries now (so a search timed later does not pay them)."""
        for tokens in token_lists:
            for t in self.query_ids(tokens).tolist():
                self._column(t)

    def _baseline(self, qids: np.ndarray) -> float:
        """What bm25s adds to every document (``nonoccurrence_array[qids].sum()``; 0 without non-occurrence)."""
        if self.variant not in DEFAULT_DELTA:
            return 0.0
        for t in qids.tolist():
            self._column(t)
        return np.array([self.nonocc[t] for t in qids.tolist()], dtype=np.float64).sum()

    def hits(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """bm25s' ``get_scores_from_ids`` over the lazy columns; a hit scores above a doc with no query term."""
        qids = self.query_ids(tokens)
        if len(qids) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        scores = np.zeros(self.n_docs, dtype=np.float64)
        for t in qids.tolist():
            col = self._column(t)
            np.add.at(scores, self._posting(t)[0], col)
        baseline = self._baseline(qids)
        if self.variant in DEFAULT_DELTA:
            scores += baseline
        cand = np.flatnonzero(scores > baseline)
        return cand, scores[cand]

    def batch_hits(self, token_lists: list[list[str]]):
        """:meth:`Bm25sBackend.batch_hits` on the rows of the queries' terms (ids kept in vocabulary order, so
        each product sums in the same order)."""
        per_query = [self.query_ids(tokens) for tokens in token_lists]
        used = self._order(sorted(set(np.concatenate(per_query).tolist()))) if per_query else []
        local = {t: i for i, t in enumerate(used)}
        cols = [self._column(t) for t in used]
        rows = [np.full(len(q), i, dtype=np.int64) for i, q in enumerate(per_query)]
        q_rows = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        q_cols = np.array([local[t] for q in per_query for t in q.tolist()], dtype=np.int64)
        q = sp.csr_matrix((np.ones(len(q_rows)), (q_rows, q_cols)), shape=(len(token_lists), len(used)))
        q.sum_duplicates()  # repeated query words: count
        postings = [self._posting(t)[0] for t in used]
        indptr = np.zeros(len(used) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in postings], out=indptr[1:])
        docs = np.concatenate(postings) if used else np.empty(0, dtype=np.int64)
        data = np.concatenate(cols) if cols else np.empty(0)
        term_doc = sp.csr_matrix((data, docs, indptr), shape=(len(used), self.n_docs))
        s = (q @ term_doc).tocsr()
        nonocc = np.array([self.nonocc.get(t, 0.0) for t in used], dtype=np.float64)
        baseline = q @ nonocc
        for i in range(len(token_lists)):
            lo, hi = s.indptr[i], s.indptr[i + 1]
            vals = s.data[lo:hi]
            keep = vals > 0  # the product keeps docs with a query term; weight-0 terms add nothing
            yield s.indices[lo:hi][keep].astype(np.int64), vals[keep] + baseline[i]


class PositionalBm25sBackend(LazyBm25sBackend):
    """The lazy index of chunks cut from a corpus' documents, read off the documents' tokens: no chunk tokenised.

    Each document is tokenised once per process (:func:`lab.text.tokenize.corpus_positions`: every token's term and
    char offset). A chunk ``doc.text[start:end]`` whose bounds cut no word (:meth:`CorpusPositions.safe`) holds
    exactly the document's tokens that start in its span, so per config indexing is a few ``searchsorted`` calls over
    the chunk bounds (each chunk's token range, so its length); its prefix (title, heading path) is tokenised as a
    text of its own (``prefix + body`` tokenises as the two apart: the prefix ends with a newline). A chunk that
    fails a check (a bound inside a word or a possessive, a document that is not slice-safe, a text not in the
    tokenizer's normal form) is tokenised whole, as :class:`LazyBm25sBackend` does. A term's documents and
    frequencies are found the first time a query asks for it, from its positions in the corpus (the chunks holding
    each position: two ``searchsorted`` over the chunks' token ranges) plus its occurrences in prefixes and in the
    chunks tokenised whole; that work counts in ``lazy_seconds`` with the column. Scores are those of
    :class:`LazyBm25sBackend` on the chunks' own tokens, so bm25s' to the last digit: the same lengths, average
    length, documents and frequencies, and the same vocabulary order for batch products (a term's first
    occurrence in the chunks in index order).
    """

    def __init__(self, positions: CorpusPositions, tokenizer: Tokenizer, doc_index: np.ndarray, start: np.ndarray,
                 end: np.ndarray, texts: list[str], prefixes: list[str | None], k1: float, b: float, variant: str,
                 delta: float) -> None:
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer  # heavy package (numba): see above

        self.k1, self.b, self.variant, self.delta = k1, b, variant, delta
        self._idf_fn, self._tfc_fn = _select_idf_scorer(variant), _select_tfc_scorer(variant)
        self.positions = P = positions
        n = self.n_docs = len(texts)
        g0, g1 = P.offsets[doc_index] + start, P.offsets[doc_index] + end
        checked = np.fromiter((p is not None for p in prefixes), dtype=bool, count=n)
        ok = P.eligible[doc_index] & checked & P.safe(g0) & P.safe(g1)
        self.i0 = np.searchsorted(P.starts, g0, "left")
        self.i1 = np.searchsorted(P.starts, g1, "left")
        if len(self.i0) > 1 and ((np.diff(self.i0) < 0).any() or (np.diff(self.i1) < 0).any()):
            ok[:] = False  # chunks out of document order: no contiguous ranges; every chunk tokenised whole
            self.i0 = self.i1 = np.zeros(n, dtype=np.int64)
        self.ok = ok
        # the explicit tokens: each positional chunk's prefix, each other chunk's whole text
        ok_list = ok.tolist()
        own = [p if good else t for p, t, good in zip(prefixes, texts, ok_list, strict=True)]
        unique = list(dict.fromkeys(own))
        where = {t: i for i, t in enumerate(unique)}
        toks = tokenizer.tokenize(unique, memo=True)
        base = len(P.vocab)
        words = [w for tk in toks for w in tk]
        get = P.vocab.get
        flat = np.fromiter((get(w, -1) for w in words), dtype=np.int64, count=len(words))
        self.vocab_extra: dict[str, int] = {}
        for j in np.flatnonzero(flat < 0).tolist():  # terms no document holds (a title's, a cut word's)
            flat[j] = self.vocab_extra.setdefault(words[j], base + len(self.vocab_extra))
        u_len = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        u_off = np.zeros(len(unique) + 1, dtype=np.int64)
        np.cumsum(u_len, out=u_off[1:])
        which = np.fromiter((where[t] for t in own), dtype=np.int64, count=n)
        self.explicit_len = u_len[which]
        total = int(self.explicit_len.sum())
        ex_chunk = np.repeat(np.arange(n, dtype=np.int64), self.explicit_len)
        ex_first = np.repeat(np.cumsum(self.explicit_len) - self.explicit_len, self.explicit_len)
        ex_pos = np.arange(total, dtype=np.int64) - ex_first  # position in the chunk's own token list
        ex_term = flat[np.repeat(u_off[which], self.explicit_len) + ex_pos]
        order = np.argsort(ex_term, kind="stable")  # by term, then chunk, then position
        self.ex_chunk, self.ex_pos = ex_chunk[order], ex_pos[order]
        self.ex_indptr = np.zeros(base + len(self.vocab_extra) + 1, dtype=np.int64)
        np.cumsum(np.bincount(ex_term, minlength=base + len(self.vocab_extra)), out=self.ex_indptr[1:])
        self.lengths = self.explicit_len + np.where(ok, self.i1 - self.i0, 0)
        self.avg_doc_len = self.lengths.mean()  # an integer sum over n: the same float as bm25s' mean
        self.postings: dict[int, tuple[np.ndarray, np.ndarray, tuple[int, int]]] = {}
        self.columns: dict[int, np.ndarray] = {}
        self.nonocc: dict[int, float] = {}
        self.lazy_seconds = 0.0

    def _term(self, t: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """(chunks holding term t, ascending; its frequency in each; its first occurrence (chunk, position))."""
        got = self.postings.get(t)
        if got is not None:
            return got
        t0 = time.perf_counter()
        P = self.positions
        chunks, pos = [], []
        if t < len(P.vocab):
            g = P.term_pos[P.term_indptr[t]:P.term_indptr[t + 1]]
            lo = np.searchsorted(self.i1, g, "right")  # the chunks whose token range holds g: lo <= c < hi
            hi = np.searchsorted(self.i0, g, "right")
            count = hi - lo
            c = np.repeat(lo, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
            g = np.repeat(g, count)
            keep = self.ok[c]
            c, g = c[keep], g[keep]
            chunks.append(c)
            pos.append(self.explicit_len[c] + g - self.i0[c])
        if t + 1 < len(self.ex_indptr):
            lo, hi = self.ex_indptr[t], self.ex_indptr[t + 1]
            chunks.append(self.ex_chunk[lo:hi])
            pos.append(self.ex_pos[lo:hi])
        c = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
        docs, tf = np.unique(c, return_counts=True)
        first = (-1, -1)
        if len(docs):
            first = (int(docs[0]), int(np.concatenate(pos)[c == docs[0]].min()))
        got = (docs, tf.astype(np.float64), first)
        self.postings[t] = got
        self.lazy_seconds += time.perf_counter() - t0
        return got

    def _posting(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        docs, tf, _ = self._term(t)
        return docs, tf

    def _order(self, used: list[int]) -> list[int]:
        """Terms by first occurrence in the chunks, in index order: bm25s' vocabulary order on these chunks."""
        return sorted(used, key=lambda t: self._term(t)[2])

    def query_ids(self, tokens: list[str]) -> np.ndarray:
        """The ids of the query's terms that some chunk holds, in query order."""
        P, extra = self.positions, self.vocab_extra
        out = []
        for w in tokens:
            t = P.vocab.get(w)
            if t is None:
                t = extra.get(w)
            if t is not None and len(self._term(t)[0]):
                out.append(t)
        return np.array(out, dtype=np.int64)


class _RankBm25Backend(_Backend):
    def __init__(self, corpus_tokens, k1, b, variant, delta):
        import rank_bm25

        class LuceneIdf(rank_bm25.BM25Okapi):
            """BM25Okapi with Lucene's idf ln(1 + (N - df + .5)/(df + .5)), never negative."""

            def _calc_idf(self, nd):
                for word, df in nd.items():
                    self.idf[word] = math.log(1 + (self.corpus_size - df + 0.5) / (df + 0.5))

        class AtireIdf(rank_bm25.BM25Okapi):
            """BM25Okapi with ATIRE's idf ln(N / df)."""

            def _calc_idf(self, nd):
                for word, df in nd.items():
                    self.idf[word] = math.log(self.corpus_size / df)

        self.variant, self.delta = variant, delta
        if variant == "lucene":
            self.model, self.scale = LuceneIdf(corpus_tokens, k1=k1, b=b), 1.0 / (k1 + 1)
        elif variant == "robertson":
            self.model, self.scale = rank_bm25.BM25Okapi(corpus_tokens, k1=k1, b=b, epsilon=0.0), 1.0 / (k1 + 1)
        elif variant == "atire":
            self.model, self.scale = AtireIdf(corpus_tokens, k1=k1, b=b), 1.0
        elif variant == "bm25+":
            self.model, self.scale = rank_bm25.BM25Plus(corpus_tokens, k1=k1, b=b, delta=delta), 1.0
        else:
            raise ConfigError(
                f"bm25: backend 'rank_bm25' has no variant {variant!r} equal to bm25s' (rank_bm25 0.2.2's BM25L "
                "multiplies each term by tf, see dorianbrown/rank_bm25#5); use backend='bm25s' or another variant"
            )
        self.n_docs = self.model.corpus_size

    def hits(self, tokens):
        idf = self.model.idf
        tokens = [t for t in tokens if t in idf]
        if not tokens:
            return np.empty(0, dtype=np.int64), np.empty(0)
        scores = np.asarray(self.model.get_scores(tokens), dtype=np.float64)
        baseline = 0.0
        if self.variant == "bm25+":  # rank_bm25 adds idf * delta for every query term to every document
            for t in tokens:
                baseline += idf[t] * self.delta
        # computed in the order rank_bm25 sums, so a doc with no query term scores exactly the baseline
        cand = np.flatnonzero(scores > baseline)
        return cand, scores[cand] * self.scale


@register("bm25", rules={"backend": one_of(*BACKENDS), "k1": at_least(0), "b": between(0, 1),
                         "variant": one_of(*VARIANTS), "delta": at_least(0),
                         "stopwords": one_of(*STOPWORD_LISTS, True, False, lists=True)})
class BM25Retriever(BaseRetriever):
    """BM25 over ``title + " " + text``; see the module docstring for variants and backends.

    Params: backend ("bm25s" | "bm25s-eager" | "rank_bm25"), k1 (0.9), b (0.4), variant ("lucene"), delta (bm25l 0.5,
    bm25+ 1.0), language (ctx.language), stem (True), stopwords ("lucene"), user_dict (None), dtype ("float64").
    """

    name = "bm25"

    def __init__(
        self,
        ctx: Context | None = None,
        backend: str = "bm25s",
        k1: float = 0.9,
        b: float = 0.4,
        variant: str = "lucene",
        delta: float | None = None,
        language: str | None = None,
        stem: bool | str = True,
        stopwords: str | bool | list[str] | None = "lucene",
        user_dict: str | None = None,
        dtype: str = "float64",
    ):
        super().__init__(ctx)
        if backend == "rank_bm25" and variant == "bm25l":
            raise ConfigError(
                "bm25: backend 'rank_bm25' has no BM25L equal to bm25s' (rank_bm25 0.2.2 multiplies each term by tf,"
                " see dorianbrown/rank_bm25#5); use backend='bm25s' for variant 'bm25l'"
            )
        self.backend_name, self.k1, self.b, self.variant = backend, float(k1), float(b), variant
        self.delta = float(delta) if delta is not None else DEFAULT_DELTA.get(variant)
        self.dtype = dtype
        self.tokenizer = Tokenizer(
            language=language or self.ctx.language,
            stem=stem,
            stopwords=stopwords,
            user_dict=user_dict,
            cache_dir=self.ctx.cache_dir,
        )
        self.params = {"backend": backend, "k1": self.k1, "b": self.b, "variant": variant, "delta": self.delta}
        self._backend: _Backend | None = None
        self.doc_ids: list[str] = []
        self.index_stats: dict = {}

    def index(self, corpus: Corpus) -> None:
        """Tokenise and index ``corpus`` (replaces any previous index)."""
        docs = list(corpus)
        if not docs:
            raise ConfigError("bm25: the corpus is empty; nothing to index")
        source = getattr(corpus, "source", None)
        if (source is not None and self.backend_name == "bm25s" and self.dtype == "float64"
                and all(not d.title and "doc_id" in d.metadata for d in docs)):
            self._index_spans(docs, source)
            return
        tokens = self.tokenizer.tokenize([doc_text(d.title, d.text) for d in docs], show_progress=self.ctx.progress,
                                         memo=True)  # texts seen by an earlier config (sweeps) are not tokenised again
        self.index_tokens(tokens, [d.id for d in docs])

    def _index_spans(self, docs: list[Document], source: Corpus) -> None:
        """Index chunks of ``source``'s documents from the documents' tokens (:class:`PositionalBm25sBackend`)."""
        src = list(source)
        texts = [d.text for d in src]
        where = {d.id: i for i, d in enumerate(src)}
        doc_index, start, end, prefixes, chunk_texts = [], [], [], [], []
        norm = self.tokenizer.normalize
        for d in docs:  # one pass: the chunk's span, and its prefix when its text is that prefix then the span
            m, t = d.metadata, d.text
            i = where.get(m["doc_id"])
            if i is None:
                raise ConfigError(f"bm25: chunk {d.id!r} names a document its source corpus does not hold")
            s, e = m["start"], m["end"]
            k = len(t) - (e - s)  # the prefix's length: it must end with a newline (or be empty)
            good = (0 <= s <= e <= len(texts[i]) and k >= 0 and (k == 0 or t[k - 1] == "\n")
                    and t.endswith(texts[i][s:e])
                    and (t.isascii() or not norm or unicodedata.is_normalized(norm, t)))  # what NFKC changes: apart
            doc_index.append(i)
            start.append(s)
            end.append(e)
            prefixes.append(t[:k] if good else None)
            chunk_texts.append(t)
        positions = corpus_positions(self.tokenizer, texts)
        backend = PositionalBm25sBackend(positions, self.tokenizer, np.array(doc_index, dtype=np.int64),
                                          np.array(start, dtype=np.int64), np.array(end, dtype=np.int64),
                                          chunk_texts, prefixes, self.k1, self.b, self.variant, self.delta or 0.0)
        if not backend.lengths.any():
            raise ConfigError("bm25: no document has a token; check the texts and the language/stopwords settings")
        self._set_ids([d.id for d in docs])
        self._backend = backend
        self.index_stats = {"docs": len(docs), "tokens": int(backend.lengths.sum()),
                            "avg_doc_len": float(np.mean(backend.lengths))}

    def _set_ids(self, doc_ids: list[str]) -> None:
        self.doc_ids = list(doc_ids)
        order = sorted(range(len(doc_ids)), key=self.doc_ids.__getitem__)
        self._id_rank = np.empty(len(doc_ids), dtype=np.int64)
        self._id_rank[order] = np.arange(len(doc_ids))

    def index_tokens(self, corpus_tokens: list[list[str]], doc_ids: list[str]) -> None:
        """Index already-tokenised docs (for benchmarks and parity tests); ``doc_ids`` aligned with them."""
        if len(corpus_tokens) != len(doc_ids):
            raise ConfigError(f"bm25: {len(corpus_tokens)} token lists for {len(doc_ids)} doc ids")
        if not any(corpus_tokens):
            raise ConfigError("bm25: no document has a token; check the texts and the language/stopwords settings")
        self._set_ids(doc_ids)
        if self.backend_name == "bm25s" and self.dtype == "float64":
            self._backend = LazyBm25sBackend(corpus_tokens, self.k1, self.b, self.variant, self.delta or 0.0)
        elif self.backend_name in ("bm25s", "bm25s-eager"):
            self._backend = Bm25sBackend(
                corpus_tokens, self.k1, self.b, self.variant, self.delta or 0.0, self.dtype, self.ctx.progress
            )
        else:
            self._backend = _RankBm25Backend(corpus_tokens, self.k1, self.b, self.variant, self.delta)
        lengths = [len(t) for t in corpus_tokens]
        self.index_stats = {"docs": len(lengths), "tokens": int(sum(lengths)), "avg_doc_len": float(np.mean(lengths))}

    def warm(self, queries: Queries) -> None:
        """Compute now the score columns these queries will read (lazy index; nothing for the eager backends).

        Index work done late: a caller that times searches calls this first and counts it as indexing
        (:meth:`lab.experiment.run.IndexedExperiment.search`), so per-query latency stays search alone."""
        self._check()
        if isinstance(self._backend, LazyBm25sBackend):  # the positional backend included
            self._backend.warm(self.tokenizer.tokenize([queries[q] for q in queries]))

    @property
    def lazy_seconds(self) -> float:
        """Seconds spent computing score columns after :meth:`index` (0 for the eager backends)."""
        return self._backend.lazy_seconds if isinstance(self._backend, LazyBm25sBackend) else 0.0

    def _check(self):
        if self._backend is None:
            raise ConfigError("bm25: search before index; call index(corpus) first")

    def _hits_to_list(self, cand, scores, k) -> list[tuple[str, float]]:
        cand, scores = top_k(cand, scores, self._id_rank, k)
        ids = self.doc_ids
        return [(ids[i], float(s)) for i, s in zip(cand.tolist(), scores.tolist(), strict=True)]

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        self._check()
        return self.search_tokens(self.tokenizer(text), k)

    def search_tokens(self, tokens: list[str], k: int) -> list[tuple[str, float]]:
        """Top-k hits of an already-tokenised query."""
        self._check()
        cand, scores = self._backend.hits(tokens)
        return self._hits_to_list(cand, scores, k)

    def search_batch(self, queries: Queries, k: int = 100) -> Run:
        """All queries at once (no per-query latency): one sparse product with bm25s, a loop with rank_bm25.

        Gives the same hits as :meth:`search`.
        """
        self._check()
        qids = list(queries)
        token_lists = self.tokenizer.tokenize([queries[q] for q in qids])
        if isinstance(self._backend, (Bm25sBackend, LazyBm25sBackend)):
            results = self._backend.batch_hits(token_lists)
        else:
            results = (self._backend.hits(t) for t in token_lists)
        scores = {q: dict(self._hits_to_list(c, s, k)) for q, (c, s) in zip(qids, results, strict=True)}
        return Run(scores, name=self.name)

    def describe(self) -> dict:
        d = {
            "strategy": self.name,
            "backend": self.backend_name,
            "k1": self.k1,
            "b": self.b,
            "variant": self.variant,
            "delta": self.delta if self.variant in DEFAULT_DELTA else None,
            "dtype": self.dtype,
            "index_text": "title + ' ' + text",
        }
        d.update({f"tokenizer.{k}": v for k, v in self.tokenizer.describe().items()})
        return d
