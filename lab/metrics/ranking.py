"""Ranking metrics over padded numpy arrays, with the trec_eval / ranx conventions.

Representation
    A run is turned, once, into a padded 2-D array ``grades`` of shape (n_queries, depth): row i holds the
    qrels grade of the documents query i retrieved, in rank order, 0 for an unjudged document and for
    padding past the end of the run. Beside it: ``n_relevant`` (relevant documents per query, retrieved or
    not), ``n_retrieved`` (length of each query's run) and ``ideal`` (the grades of the query's relevant
    documents sorted descending, zero-padded), from which the ideal DCG is taken. Every metric at every
    cut-off is then computed in numpy from prefix sums over the rank axis (one ``cumsum`` per quantity,
    shared by all metrics and cut-offs); there is no per-query Python loop except in building the arrays.

Conventions (every metric; each function's docstring restates its own)
    - Relevant means ``grade >= rel_threshold`` (default 1). Judged documents below the threshold (grade 0,
      or 1 with threshold 2) count as non-relevant everywhere, nDCG included (their gain is 0).
    - ``@k`` keeps the first k ranks; a bare name (``"mrr"``) has no cut-off: the whole ranked list.
    - Precision@k divides by k even when fewer than k documents were retrieved (trec_eval P_k, ranx).
      Bare precision divides by the number retrieved (ranx ``precision`` with k=0, trec_eval ``set_P``).
    - Recall and MAP divide by the number of relevant documents in the qrels, retrieved or not.
    - nDCG: gain = grade, discount = log2(rank + 1), ideal DCG from all judged relevant grades sorted
      descending and cut at k (trec_eval ``ndcg_cut``, ranx ``ndcg``). ``ndcg_exp`` uses gain 2^grade - 1
      (ranx ``ndcg_burges``), same discount and ideal.
    - A query of the qrels with nothing retrieved scores 0 on every metric. A query with no relevant
      document cannot be scored: :func:`evaluate` excludes it and lists it in ``Evaluation.excluded``.
      Queries of the run absent from the qrels are ignored and counted (``n_unjudged_run_queries``).
      The array functions return 0 for a row with no relevant document (no division by zero).
    - Ties: documents are ranked by score descending, then doc id descending (the trec_eval rule, the same
      as :meth:`lab.data.types.Run.ranked`); the order of the run dict does not matter.
    - The array functions take the rows as given: a document repeated in a row counts at each rank where
      it appears (a Run, being a dict, cannot repeat one; de-duplicating a TREC file is the reader's job).

Where ranx and trec_eval differ from each other, we follow the spec above: ranx's ``mrr@k`` has a cut-off
(its docstring says k is ignored, its code applies it; we apply it), trec_eval's ``recip_rank`` has none
(our bare ``mrr``). ranx's hit_rate is trec_eval's ``success``; ranx's f1 uses precision@k = hits / k.

Incomplete judgements (pooled qrels, LLM judgements; Buckley & Voorhees 2004, "Retrieval evaluation with
incomplete information"; Sakai 2007, "Alternatives to Bpref")
    - ``judged@k`` (ir_measures ``Judged@k``): documents in the first k ranks that carry a judgement of any grade
      (0 included) / k, dividing by k like precision@k (ir_measures documents it as P@k with a relevance level
      below every grade, which is how tests/comparison checks it against trec_eval). Bare ``judged`` divides by
      the number retrieved. A query with nothing retrieved scores 0. "Judged" means present in the qrels for that
      query, or in the ``judged`` mapping passed to :func:`evaluate` (e.g. the chunks of documents judged at
      document level, for span-level qrels that only list relevant chunks).
    - Condensed lists (``evaluate(..., condensed=True)``, trec_eval ``-J`` / pytrec_eval ``judged_docs_only_flag``):
      unjudged documents are removed from each ranked list before scoring and the rest move up, so a strategy is
      not punished for retrieving documents nobody labelled. Every metric is then computed on the condensed lists
      (judged@k is then 1 down to the list's end).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from lab import METRICS_VERSION
from lab.data.types import Qrels, Run

#: Metric names, spelled as ranx spells them; ``ndcg_exp`` is ranx's ``ndcg_burges`` (gain 2^rel - 1).
METRIC_NAMES = (
    "ndcg", "ndcg_exp", "recall", "precision", "mrr", "map", "hit_rate", "f1", "weighted_recall", "judged")
DEFAULT_CUTOFFS = (1, 3, 5, 10, 100)
#: The seven metrics of the product and judged@k at the five default cut-offs (40 names, e.g. "ndcg@10").
DEFAULT_METRICS = tuple(
    f"{m}@{k}" for m in ("ndcg", "recall", "precision", "mrr", "map", "hit_rate", "f1", "judged")
    for k in DEFAULT_CUTOFFS
)
#: Evidence tier weights (this project's default; pass others to change them): core 1.0, auxiliary 0.5, edge 0.1.
DEFAULT_TIER_WEIGHTS = {"core": 1.0, "auxiliary": 0.5, "edge": 0.1}
#: Tier of a relevant document that the tiers mapping does not name (EvidenceSpan's default tier).
DEFAULT_TIER = "core"


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: ``name`` (one of METRIC_NAMES), ``k`` (cut-off, None = whole list), ``label``."""

    name: str
    k: int | None

    @property
    def label(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"


def parse_metric(metric: str | MetricSpec) -> MetricSpec:
    """Parse ``"ndcg@10"`` into MetricSpec("ndcg", 10) and a bare ``"mrr"`` into MetricSpec("mrr", None).

    Names are case-insensitive and spelled as ranx spells them; k must be a positive integer.
    """
    if isinstance(metric, MetricSpec):
        return metric
    if not isinstance(metric, str):
        raise ValueError(f"metric {metric!r}: expected a name such as 'ndcg@10' or 'mrr'")
    text = metric.strip().lower()
    name, sep, k_text = text.partition("@")
    if name not in METRIC_NAMES:
        raise ValueError(f"metric {metric!r}: unknown name {name!r}; known: {', '.join(METRIC_NAMES)}")
    if not sep:
        return MetricSpec(name, None)
    if not k_text.isdigit() or int(k_text) < 1:
        raise ValueError(f"metric {metric!r}: the cut-off after '@' must be a positive integer, e.g. '{name}@10'")
    return MetricSpec(name, int(k_text))


# --------------------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankedArrays:
    """The padded arrays every metric is computed from (see the module docstring).

    grades: (n, depth) float64, qrels grade of the document at each rank (0 if unjudged or padding).
    n_retrieved: (n,) int64, length of each query's ranked list (before cutting at depth).
    n_relevant: (n,) int64, relevant documents per query in the qrels (grade >= threshold).
    ideal: (n, depth) float64, relevant grades sorted descending, zero-padded and cut at depth.
    weights: (n, depth) float64 tier weight of each ranked relevant document, or None without tiers.
    total_weight: (n,) float64 sum of the tier weights of all relevant documents, or None.
    judged: (n, depth) float64, 1 where the ranked document carries a judgement (any grade), else 0; None when
        the arrays were built without it (judged@k then raises).
    """

    query_ids: list[str]
    grades: np.ndarray
    n_retrieved: np.ndarray
    n_relevant: np.ndarray
    ideal: np.ndarray
    rel_threshold: int = 1
    weights: np.ndarray | None = None
    total_weight: np.ndarray | None = None
    judged: np.ndarray | None = None

    @property
    def depth(self) -> int:
        return int(self.grades.shape[1])


def _column(k: int | None, depth: int) -> int:
    """Index of the last rank kept by cut-off k in an array of ``depth`` columns (k None = whole list)."""
    return depth - 1 if k is None else min(k, depth) - 1


class _Prefix:
    """Prefix sums over the rank axis, computed once on first use and shared by all metrics and cut-offs."""

    def __init__(self, arrays: RankedArrays):
        self.a = arrays
        self._cache: dict[str, np.ndarray] = {}
        depth = arrays.depth
        self.ranks = np.arange(1, depth + 1, dtype=np.float64)
        self.discount = 1.0 / np.log2(self.ranks + 1.0)

    def get(self, key: str) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = getattr(self, "_" + key)()
        return self._cache[key]

    def _rel(self) -> np.ndarray:  # (n, depth) bool: relevant at rank
        return self.a.grades >= self.a.rel_threshold

    def _hits(self) -> np.ndarray:  # relevant documents in the first r ranks
        return np.cumsum(self.get("rel"), axis=1, dtype=np.float64)

    def _ap_sum(self) -> np.ndarray:  # sum of precision@r over relevant ranks r
        return np.cumsum(np.where(self.get("rel"), self.get("hits") / self.ranks, 0.0), axis=1)

    def _first_rank(self) -> np.ndarray:  # rank (1-based) of the first relevant document, inf if none
        rel = self.get("rel")
        first: np.ndarray = np.argmax(rel, axis=1).astype(np.float64) + 1.0
        first[~rel.any(axis=1)] = np.inf
        return first

    def _gain_lin(self) -> np.ndarray:
        return np.where(self.get("rel"), self.a.grades, 0.0)

    def _dcg_lin(self) -> np.ndarray:
        return np.cumsum(self.get("gain_lin") * self.discount, axis=1)

    def _dcg_exp(self) -> np.ndarray:
        return np.cumsum(np.expm1(self.get("gain_lin") * math.log(2.0)) * self.discount, axis=1)

    def _idcg_lin(self) -> np.ndarray:
        return np.cumsum(self.a.ideal * self.discount, axis=1)

    def _idcg_exp(self) -> np.ndarray:
        return np.cumsum(np.expm1(self.a.ideal * math.log(2.0)) * self.discount, axis=1)

    def _judged_hits(self) -> np.ndarray:  # judged documents in the first r ranks
        if self.a.judged is None:
            raise ValueError("judged@k needs the judged mask: build the arrays with build_arrays")
        return np.cumsum(self.a.judged, axis=1)

    def _wsum(self) -> np.ndarray:
        if self.a.weights is None:
            raise ValueError("weighted_recall needs evidence tiers: pass tiers={qid: {doc_id: tier}}")
        return np.cumsum(self.a.weights, axis=1)


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    den = np.asarray(den, dtype=np.float64)
    out: np.ndarray = np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den > 0)
    return out


def _compute(p: _Prefix, spec: MetricSpec) -> np.ndarray:
    a, c = p.a, _column(spec.k, p.a.depth)
    n = len(a.query_ids)
    if a.depth == 0:
        return np.zeros(n)
    name = spec.name
    if name == "recall":
        return _safe_div(p.get("hits")[:, c], a.n_relevant)
    if name == "precision":
        den = a.n_retrieved if spec.k is None else np.full(n, spec.k)
        return _safe_div(p.get("hits")[:, c], den)
    if name == "f1":
        prec = _compute(p, MetricSpec("precision", spec.k))
        rec = _compute(p, MetricSpec("recall", spec.k))
        return _safe_div(2.0 * prec * rec, prec + rec)
    if name == "hit_rate":
        return (p.get("hits")[:, c] > 0).astype(np.float64)
    if name == "mrr":
        first = p.get("first_rank")
        return np.where(first <= c + 1, 1.0 / first, 0.0)
    if name == "map":
        return _safe_div(p.get("ap_sum")[:, c], a.n_relevant)
    if name == "ndcg":
        return _safe_div(p.get("dcg_lin")[:, c], p.get("idcg_lin")[:, c])
    if name == "ndcg_exp":
        return _safe_div(p.get("dcg_exp")[:, c], p.get("idcg_exp")[:, c])
    if name == "weighted_recall":
        wsum = p.get("wsum")[:, c]  # raises without evidence tiers
        assert a.total_weight is not None  # built with the weights
        return _safe_div(wsum, a.total_weight)
    if name == "judged":
        den = a.n_retrieved if spec.k is None else np.full(n, spec.k)
        return _safe_div(p.get("judged_hits")[:, c], den)
    raise ValueError(f"metric {spec.label!r}: no implementation")  # unreachable: parse_metric checks names


def compute_metrics(arrays: RankedArrays, metrics: Iterable[str | MetricSpec]) -> dict[str, np.ndarray]:
    """Per-query scores of every metric, as {label: (n,) float64 array}, from one set of prefix sums.

    The arrays must be at least as deep as the largest cut-off for the results to be exact (build_arrays
    with depth = that cut-off, or None for bare names); a cut-off beyond ``arrays.depth`` is read at the
    last column, which is exact only when no query retrieved more than depth documents (precision@k still
    divides by k).
    """
    p = _Prefix(arrays)
    out: dict[str, np.ndarray] = {}
    for m in metrics:
        spec = parse_metric(m)
        out[spec.label] = _compute(p, spec)
    return out


def _single(grades: ArrayLike, n_relevant: ArrayLike, k: int | None, rel_threshold: int, name: str,
            ideal: ArrayLike | None = None, n_retrieved: ArrayLike | None = None) -> np.ndarray:
    grades = np.atleast_2d(np.asarray(grades, dtype=np.float64))
    n = grades.shape[0]
    n_relevant = np.broadcast_to(np.asarray(n_relevant, dtype=np.int64), (n,))
    if n_retrieved is None:
        n_retrieved = np.full(n, grades.shape[1], dtype=np.int64)
    if ideal is None:
        ideal = np.zeros_like(grades)
    arrays = RankedArrays([""] * n, grades, np.asarray(n_retrieved), n_relevant, np.atleast_2d(ideal), rel_threshold)
    return _compute(_Prefix(arrays), MetricSpec(name, k))


def recall_at_k(grades: ArrayLike, n_relevant: ArrayLike, k: int | None = None, rel_threshold: int = 1) -> np.ndarray:
    """Recall@k = relevant documents in the first k ranks / relevant documents in the qrels (retrieved or not).

    grades: (n, depth) grades of the ranked hits, 0-padded; n_relevant: (n,) relevant counts. 0 if n_relevant is 0.
    """
    return _single(grades, n_relevant, k, rel_threshold, "recall")


def precision_at_k(grades: ArrayLike, k: int | None = None, rel_threshold: int = 1,
                   n_retrieved: ArrayLike | None = None) -> np.ndarray:
    """Precision@k = relevant documents in the first k ranks / k, even when fewer than k were retrieved.

    With k None: relevant retrieved / number retrieved (``n_retrieved``, default the row length), 0 if none.
    """
    grades = np.atleast_2d(grades)
    return _single(grades, np.zeros(grades.shape[0]), k, rel_threshold, "precision", n_retrieved=n_retrieved)


def f1_at_k(grades: ArrayLike, n_relevant: ArrayLike, k: int | None = None, rel_threshold: int = 1,
            n_retrieved: ArrayLike | None = None) -> np.ndarray:
    """F1@k = 2 P R / (P + R) with P = precision@k (divides by k) and R = recall@k; 0 when P + R = 0."""
    return _single(grades, n_relevant, k, rel_threshold, "f1", n_retrieved=n_retrieved)


def hit_rate_at_k(grades: ArrayLike, k: int | None = None, rel_threshold: int = 1) -> np.ndarray:
    """Hit Rate@k = 1 if any of the first k ranks is relevant, else 0 (trec_eval ``success``)."""
    grades = np.atleast_2d(grades)
    return _single(grades, np.zeros(grades.shape[0]), k, rel_threshold, "hit_rate")


def mrr_at_k(grades: ArrayLike, k: int | None = None, rel_threshold: int = 1) -> np.ndarray:
    """Reciprocal rank@k = 1 / rank of the first relevant document if that rank <= k, else 0."""
    grades = np.atleast_2d(grades)
    return _single(grades, np.zeros(grades.shape[0]), k, rel_threshold, "mrr")


def map_at_k(grades: ArrayLike, n_relevant: ArrayLike, k: int | None = None, rel_threshold: int = 1) -> np.ndarray:
    """Average precision@k = sum of precision@r over relevant ranks r <= k / all relevant documents.

    The divisor counts every relevant document of the qrels, retrieved or not (trec_eval map_cut, ranx map).
    """
    return _single(grades, n_relevant, k, rel_threshold, "map")


def ndcg_at_k(grades: ArrayLike, ideal: ArrayLike, k: int | None = None, rel_threshold: int = 1,
              exponential: bool = False) -> np.ndarray:
    """nDCG@k = DCG@k / IDCG@k, DCG@k = sum_{r<=k} gain(grade_r) / log2(r + 1).

    gain = grade (trec_eval ndcg_cut, ranx ndcg), or 2^grade - 1 with ``exponential`` (ranx ndcg_burges);
    grades below rel_threshold have gain 0. ``ideal``: the query's relevant grades sorted descending
    (all judged ones, retrieved or not), zero-padded; IDCG@k uses its first k. 0 when IDCG is 0.
    """
    grades = np.atleast_2d(np.asarray(grades, dtype=np.float64))
    ideal = np.atleast_2d(np.asarray(ideal, dtype=np.float64))
    width = max(grades.shape[1], ideal.shape[1])
    g = np.zeros((grades.shape[0], width))
    g[:, : grades.shape[1]] = grades
    i = np.zeros((ideal.shape[0], width))
    i[:, : ideal.shape[1]] = ideal
    name = "ndcg_exp" if exponential else "ndcg"
    return _single(g, np.zeros(g.shape[0]), k, rel_threshold, name, ideal=i)


def judged_at_k(judged: ArrayLike, k: int | None = None, n_retrieved: ArrayLike | None = None) -> np.ndarray:
    """Judged@k = documents in the first k ranks that carry a judgement / k (ir_measures Judged@k).

    judged: (n, depth) 1 where the ranked document is judged (any grade, 0 included), 0 otherwise or padding.
    With k None: judged / number retrieved (``n_retrieved``, default the row length), 0 if none.
    """
    judged = np.atleast_2d(np.asarray(judged, dtype=np.float64))
    n = judged.shape[0]
    if n_retrieved is None:
        n_retrieved = np.full(n, judged.shape[1], dtype=np.int64)
    arrays = RankedArrays([""] * n, np.zeros_like(judged), np.asarray(n_retrieved), np.zeros(n, dtype=np.int64),
                          np.zeros_like(judged), 1, judged=judged)
    return _compute(_Prefix(arrays), MetricSpec("judged", k))


def weighted_recall_at_k(weights: ArrayLike, total_weight: ArrayLike, k: int | None = None) -> np.ndarray:
    """Evidence-tier weighted recall@k = sum of tier weights of relevant documents in the first k ranks /
    sum of tier weights of all relevant documents (:data:`DEFAULT_TIER_WEIGHTS`). ``weights``: (n, depth), the
    weight of each ranked document (0 for a non-relevant one). With all weights 1 this is recall@k.
    """
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    n = weights.shape[0]
    arrays = RankedArrays(
        [""] * n, np.zeros_like(weights), np.full(n, weights.shape[1]), np.zeros(n, dtype=np.int64),
        np.zeros_like(weights), 1, weights, np.broadcast_to(np.asarray(total_weight, dtype=np.float64), (n,)),
    )
    return _compute(_Prefix(arrays), MetricSpec("weighted_recall", k))


# --------------------------------------------------------------------------------------------------------
# From Qrels / Run to arrays
# --------------------------------------------------------------------------------------------------------
_EMPTY: dict[str, int] = {}


def _qrels_dict(qrels: Qrels | Mapping[str, Mapping[str, int]]) -> Mapping[str, Mapping[str, int]]:
    return qrels.qrels if isinstance(qrels, Qrels) else qrels


def _run_dict(run: Run | Mapping[str, Mapping[str, float]]) -> Mapping[str, Mapping[str, float]]:
    return run.scores if isinstance(run, Run) else run


def _pad(values: np.ndarray, lengths: np.ndarray, width: int, fill: float) -> np.ndarray:
    """Scatter a flat array of per-row values (rows back to back, ``lengths`` each) into (n, width)."""
    n = len(lengths)
    if n and values.size == n * width:  # every row full (the usual run: k hits per query): a reshape
        return values.reshape(n, width).copy()
    out = np.full((n, width), fill, dtype=values.dtype)
    if values.size:
        rows = np.repeat(np.arange(n), lengths)
        starts = np.cumsum(lengths) - lengths
        cols = np.arange(values.size) - np.repeat(starts, lengths)
        out[rows, cols] = values
    return out


def _rank_order(run_dicts: Sequence[Mapping[str, float]], qids: Sequence[str], depth: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Column order of each row's documents by score descending, doc id descending; scores padded -inf.

    Returns (order (n, depth) int64 into each row's dict order, lengths (n,)). Rows whose top depth + 1
    contain a tie of scores are re-sorted in Python with the doc id rule (rare; exact).
    """
    lengths = np.fromiter(map(len, run_dicts), dtype=np.int64, count=len(run_dicts))
    total = int(lengths.sum())
    scores = np.fromiter(chain.from_iterable(d.values() for d in run_dicts), dtype=np.float64, count=total)
    if np.isnan(scores).any():
        bad = int(np.repeat(np.arange(len(lengths)), lengths)[np.isnan(scores)][0])
        raise ValueError(f"run, query {qids[bad]!r}: a score is NaN; fix the retriever's scores")
    width = int(lengths.max()) if len(lengths) else 0
    padded = _pad(-scores, lengths, width, np.inf)  # negated: ascending sort = score descending
    full = np.argsort(padded, axis=1, kind="stable")  # padding sits after the real documents of a row
    order = full[:, :depth]
    # ties of scores among the first depth + 1 ranks decide membership or order: apply the doc id rule
    look = min(depth + 1, width)
    if look > 1:
        head = np.take_along_axis(padded, full[:, :look], axis=1)
        real = np.arange(1, look)[None, :] < lengths[:, None]
        tied = ((head[:, 1:] == head[:, :-1]) & real).any(axis=1)
        for i in np.flatnonzero(tied):
            items = list(run_dicts[int(i)].items())
            idx = sorted(range(len(items)), key=lambda j: (items[j][1], items[j][0]), reverse=True)[:depth]
            order[i, : len(idx)] = idx
    return order, lengths


def build_arrays(
    qrels: Qrels | Mapping[str, Mapping[str, int]],
    run: Run | Mapping[str, Mapping[str, float]],
    depth: int | None,
    rel_threshold: int = 1,
    query_ids: Sequence[str] | None = None,
    tiers: Mapping[str, Mapping[str, str]] | None = None,
    tier_weights: Mapping[str, float] | None = None,
    judged: Mapping[str, Iterable[str]] | None = None,
) -> RankedArrays:
    """Padded arrays for the given queries (default: every qrels query), cut at ``depth`` ranks.

    depth=None keeps every rank (the longest run, or the most relevant documents, whichever is larger).
    A query absent from the run gets an all-zero row. With ``tiers`` (qid -> {doc id: tier}), each ranked
    relevant document gets the weight of its tier (tier_weights, default DEFAULT_TIER_WEIGHTS; a relevant
    document without a tier is "core"); documents below the threshold weigh 0 whatever their tier.
    ``judged`` (qid -> doc ids): documents that count as judged for judged@k besides those in the qrels.
    """
    if rel_threshold < 1:
        raise ValueError(f"rel_threshold={rel_threshold}: must be >= 1 (grade 0 means judged non-relevant)")
    qd, rd = _qrels_dict(qrels), _run_dict(run)
    qids = list(qd) if query_ids is None else list(query_ids)
    n = len(qids)
    qrel_dicts = [qd.get(q, _EMPTY) for q in qids]
    run_dicts = [rd.get(q, _EMPTY) for q in qids]

    # qrels side: relevant counts and ideal grades
    qlens = np.fromiter(map(len, qrel_dicts), dtype=np.int64, count=n)
    qgrades = np.fromiter(chain.from_iterable(d.values() for d in qrel_dicts), dtype=np.float64,
                          count=int(qlens.sum()))
    qrow = np.repeat(np.arange(n), qlens)
    is_rel = qgrades >= rel_threshold
    n_relevant = np.bincount(qrow[is_rel], minlength=n).astype(np.int64)

    if depth is None:
        longest = max(map(len, run_dicts), default=0)
        depth = max(longest, int(n_relevant.max()) if n else 0, 1)

    rel_rows, rel_grades = qrow[is_rel], qgrades[is_rel]
    srt = np.lexsort((-rel_grades, rel_rows))
    rel_rows, rel_grades = rel_rows[srt], rel_grades[srt]
    starts = np.cumsum(n_relevant) - n_relevant
    pos = np.arange(rel_rows.size) - starts[rel_rows]
    keep = pos < depth
    ideal = np.zeros((n, depth))
    ideal[rel_rows[keep], pos[keep]] = rel_grades[keep]

    # run side: grades of the hits, in rank order
    order, n_retrieved = _rank_order(run_dicts, qids, depth)
    width = order.shape[1]
    total = int(n_retrieved.sum())
    hit_grades = np.fromiter(
        chain.from_iterable(map(q.get, r, repeat(0)) for q, r in zip(qrel_dicts, run_dicts, strict=True)),
        dtype=np.float64, count=total,
    )
    grades = np.zeros((n, depth))
    if width:
        full_width = int(n_retrieved.max())
        grades[:, :width] = np.take_along_axis(_pad(hit_grades, n_retrieved, full_width, 0.0), order, axis=1)
    extra = [judged_sets(judged, qid) for qid in qids]
    hit_judged = np.fromiter(
        chain.from_iterable((1.0 if (d in q or d in x) else 0.0 for d in r)
                            for q, x, r in zip(qrel_dicts, extra, run_dicts, strict=True)),
        dtype=np.float64, count=total)
    judged_arr = np.zeros((n, depth))
    if width:
        judged_arr[:, :width] = np.take_along_axis(_pad(hit_judged, n_retrieved, full_width, 0.0), order, axis=1)

    weights = total_weight = None
    if tiers is not None:
        tw = dict(DEFAULT_TIER_WEIGHTS if tier_weights is None else tier_weights)
        if not all(isinstance(w, (int, float)) and math.isfinite(w) and w >= 0 for w in tw.values()):
            raise ValueError(f"tier_weights {tw}: weights must be finite numbers >= 0")
        weight_dicts = []  # per query: relevant doc id -> weight of its tier
        for qid, q in zip(qids, qrel_dicts, strict=True):
            t = tiers.get(qid, _EMPTY)
            wd = {}
            for d, g in q.items():
                if g >= rel_threshold:
                    tier = t.get(d, DEFAULT_TIER)
                    if tier not in tw:
                        raise ValueError(f"tiers, query {qid!r}, document {d!r}: unknown tier {tier!r}; "
                                         f"known: {sorted(tw)} (or pass tier_weights)")
                    wd[d] = float(tw[tier])
            weight_dicts.append(wd)
        total_weight = np.fromiter((sum(w.values()) for w in weight_dicts), dtype=np.float64, count=n)
        hit_w = np.fromiter(
            chain.from_iterable(map(w.get, r, repeat(0.0)) for w, r in zip(weight_dicts, run_dicts, strict=True)),
            dtype=np.float64, count=total)
        weights = np.zeros((n, depth))
        if width:
            weights[:, :width] = np.take_along_axis(_pad(hit_w, n_retrieved, full_width, 0.0), order, axis=1)

    return RankedArrays(qids, grades, n_retrieved, n_relevant, ideal, rel_threshold, weights, total_weight,
                        judged_arr)


def judged_sets(judged: Mapping[str, Iterable[str]] | None, qid: str) -> Collection[str]:
    """The extra judged documents of ``qid`` as a set-like object (empty when ``judged`` is None)."""
    if not judged:
        return _EMPTY
    docs = judged.get(qid, _EMPTY)
    return docs if isinstance(docs, (set, frozenset, dict)) else set(docs)


def condense(qrels: Qrels | Mapping[str, Mapping[str, int]], run: Run | Mapping[str, Mapping[str, float]],
             judged: Mapping[str, Iterable[str]] | None = None) -> dict[str, dict[str, float]]:
    """The run with every unjudged document removed from each query's list (trec_eval ``-J``).

    Judged: in the qrels of that query (any grade), or in ``judged[qid]``. Scores are kept, so the remaining
    documents keep their order and move up. Queries absent from the qrels keep an empty list.
    """
    qd, rd = _qrels_dict(qrels), _run_dict(run)
    out = {}
    for qid, docs in rd.items():
        q, x = qd.get(qid, _EMPTY), judged_sets(judged, qid)
        out[qid] = {d: s for d, s in docs.items() if d in q or d in x}
    return out


# --------------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------------
@dataclass
class Evaluation:
    """Result of :func:`evaluate`: one row per evaluated query, one column per metric.

    per_query: DataFrame indexed by query id (str, index name "query_id"), columns = metric labels.
    means: metric label -> mean over the evaluated queries.
    n_queries: evaluated queries (qrels queries with at least one relevant document).
    excluded: qrels queries without a relevant document (grade >= rel_threshold), not scored.
    n_unjudged_run_queries: queries of the run absent from the qrels, ignored.
    condensed: True when unjudged documents were removed from the lists before scoring (trec_eval -J).
    """

    per_query: pd.DataFrame
    means: dict[str, float]
    n_queries: int
    excluded: list[str]
    n_unjudged_run_queries: int
    metrics_version: str = METRICS_VERSION
    rel_threshold: int = 1
    tier_weights: dict[str, float] | None = field(default=None)
    condensed: bool = False

    @property
    def metrics(self) -> list[str]:
        return list(self.per_query.columns)

    def to_dict(self, per_query: bool = True) -> dict[str, Any]:
        """JSON-ready dict (plain floats and strings); ``per_query`` as {query id: {metric: value}}."""
        out = {
            "metrics_version": self.metrics_version,
            "rel_threshold": self.rel_threshold,
            "n_queries": self.n_queries,
            "excluded": list(self.excluded),
            "n_unjudged_run_queries": self.n_unjudged_run_queries,
            "means": {k: float(v) for k, v in self.means.items()},
        }
        if self.tier_weights is not None:
            out["tier_weights"] = dict(self.tier_weights)
        if self.condensed:
            out["condensed"] = True
        if per_query:
            out["per_query"] = {
                str(q): {m: float(v) for m, v in zip(self.per_query.columns, row, strict=True)}
                for q, row in zip(self.per_query.index, self.per_query.to_numpy().tolist(), strict=True)
            }
        return out


def evaluate(
    qrels: Qrels | Mapping[str, Mapping[str, int]],
    run: Run | Mapping[str, Mapping[str, float]],
    metrics: Iterable[str] = DEFAULT_METRICS,
    rel_threshold: int = 1,
    tiers: Mapping[str, Mapping[str, str]] | None = None,
    tier_weights: Mapping[str, float] | None = None,
    condensed: bool = False,
    judged: Mapping[str, Iterable[str]] | None = None,
) -> Evaluation:
    """Score ``run`` against ``qrels`` on ``metrics`` (names as ranx spells them: "ndcg@10", "mrr", ...).

    Evaluated queries: those of the qrels with at least one document of grade >= rel_threshold, in qrels
    order; a query with nothing retrieved scores 0. Qrels queries without a relevant document are listed in
    ``excluded``; run queries absent from the qrels are ignored and counted. With ``tiers`` (qid ->
    {doc id: "core" | "auxiliary" | "edge"}) and no weighted_recall requested, ``weighted_recall@k`` is
    added for every cut-off k among the requested metrics. ``condensed``: score the condensed lists (unjudged
    documents removed first, trec_eval -J); ``judged`` (qid -> doc ids): documents that count as judged besides
    those of the qrels (for judged@k and condensing). Conventions: see the module docstring.
    """
    specs = [parse_metric(m) for m in metrics]
    if not specs:
        raise ValueError("evaluate: no metric requested; e.g. metrics=DEFAULT_METRICS")
    if tiers is not None and not any(s.name == "weighted_recall" for s in specs):
        cutoffs = sorted({s.k for s in specs if s.k is not None})
        specs += [MetricSpec("weighted_recall", k) for k in cutoffs] or [MetricSpec("weighted_recall", None)]
    if tiers is None and any(s.name == "weighted_recall" for s in specs):
        raise ValueError("evaluate: weighted_recall needs evidence tiers: pass tiers={qid: {doc_id: tier}}")
    labels = list(dict.fromkeys(s.label for s in specs))
    specs = [parse_metric(lbl) for lbl in labels]

    qd, rd = _qrels_dict(qrels), _run_dict(run)
    thr = rel_threshold
    excluded = [q for q, docs in qd.items() if not any(g >= thr for g in docs.values())]
    excluded_set = set(excluded)
    qids = [q for q in qd if q not in excluded_set]
    if not qids:
        raise ValueError(
            f"evaluate: no qrels query has a document with grade >= {thr} ({len(qd)} queries in the qrels); "
            "check the split and rel_threshold")
    n_unjudged = sum(1 for q in rd if q not in qd)

    if condensed:
        rd = condense(qd, rd, judged)
    depth = None if any(s.k is None for s in specs) else max(s.k for s in specs if s.k is not None)
    arrays = build_arrays(qd, rd, depth, thr, query_ids=qids, tiers=tiers, tier_weights=tier_weights, judged=judged)
    scores = compute_metrics(arrays, specs)
    per_query = pd.DataFrame(scores, index=pd.Index(qids, name="query_id"), columns=labels)
    means = {m: float(v) for m, v in zip(labels, per_query.to_numpy().mean(axis=0), strict=True)}
    return Evaluation(
        per_query=per_query,
        means=means,
        n_queries=len(qids),
        excluded=excluded,
        n_unjudged_run_queries=n_unjudged,
        metrics_version=METRICS_VERSION,
        rel_threshold=thr,
        tier_weights=None if tiers is None else dict(DEFAULT_TIER_WEIGHTS if tier_weights is None else tier_weights),
        condensed=bool(condensed),
    )
