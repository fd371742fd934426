"""Fusion of several runs into one (RRF, score fusion: weighted sum, CombSUM, CombMNZ), and the "hybrid" strategy.

Conventions
- Ranks start at 1 and follow :meth:`Run.ranked` (score descending, ties by doc id descending), so two runs with
  the same scores always fuse the same way.
- Score fusion (Fox & Shaw 1994; the definitions of ranx, Bassani 2022, ``ranx.fuse``): each run's scores of a
  query are normalised over that run's retrieved documents (:func:`normalise`), then
  ``weighted``: ``sum_i w_i * norm_i(d)``; ``combsum``: the same with every weight 1 (ranx "sum", comb_sum);
  ``combmnz``: ``(sum_i norm_i(d)) * (number of runs that retrieved d)`` (ranx "mnz", comb_mnz); with weights,
  ``(sum_i norm_i(d)) * (sum of w_i over the runs that retrieved d)`` (ranx "wmnz", weighted MNZ).
- A document missing from a run (not in its top ``depth``) contributes 0 from that run, *after* normalisation, in
  every fuser (as ranx does).
- Queries: the union of the runs' queries, in first-seen order; a query missing from a run gets nothing from it.
- The fused run carries no latency: the fusers are pure functions over finished runs. The "hybrid" strategy
  times each query as a whole (all parts plus fusion), as ``BaseRetriever.search`` does.
- ``weights="tuned"`` (hybrid): weights picked per fold by k-fold cross-validation over queries
  (:mod:`lab.retrievers.fusion_cv`); a query is never fused with weights tuned on its own judgments.

Normalisations (per query and run; ranx ``ranx/normalization``): "minmax" ``(s - min) / (max - min)``;
"zscore" ``(s - mean) / sd`` (population sd, ranx "zmuv"); "sum" ``(s - min) / sum(s - min)``; "max"
``s / max`` (meant for non-negative scores: BM25, cosine of normalised vectors mostly); "rank" ``1 - i / n`` for
the document at position i (from 0) of the run's n hits in :meth:`Run.ranked` order; "none" unchanged.
Degenerate cases: ranx divides by ``max(denominator, 1e-9)``, so equal scores give 0 under minmax, sum and
zscore; we follow it except for minmax, where equal scores (or a single hit) give 1.0 to each (they are all the
run's best: a run that found one document vouches for it fully, where ranx makes it count as "not retrieved").

Parity with ranx (tests/comparison/test_fusion_parity.py): the same fused scores for rrf, weighted/wsum,
combsum and combmnz under every norm ranx shares (min-max, zmuv, sum, max, rank), hence the same nDCG@10 to 1e-6,
on runs without tied scores and without constant-score queries. Two documented differences remain:
1. minmax of equal scores (above): 1.0 here, 0.0 in ranx.
2. Ties. ranx orders equal scores by ``np.argsort`` of the negated scores inside numba (quicksort: no stable or
   documented order), both when it ranks a run for "rank"/rrf and when it evaluates; we break ties by doc id
   descending (trec_eval's rule) everywhere. Where fused scores tie across the nDCG cut-off, the metric differs.
Why ``hybrid`` (weighted, minmax) and ranx's wsum with min-max gave 0.6214 vs 0.6181 nDCG@10 on ORD-QA from the
same two ``lab run --out`` runs (bm25, dense): not the fusion. ranx's fused run evaluated by ``lab.metrics``
gives 0.6214 exactly, and the top 10 of every query is the same list; ranx's *evaluation* differs on one query
(57): chunks ``restructure_0`` and ``floorplan_initialization_0`` of the ORD-QA corpus have the same text, so
BM25 and dense score them the same and their fused scores tie at ranks 10-11. Our rule (doc id descending) puts
the relevant ``restructure_0`` at rank 10 (nDCG@10 0.289 for that query), ranx's sort puts it at 11 (0.0):
0.289 / 90 queries = 0.0032, the whole gap. On SciFact no fused score ties across rank 10, so both agree.
No query there or on ORD-QA has a single hit in either run, so the minmax degenerate case played no part.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Queries, Run
from lab.retrievers.base import BaseRetriever, Context, build, param_problems, register
from lab.retrievers.fusion_cv import tune_fusion
from lab.retrievers.params import COUNT, at_least, between, one_of

FUSIONS = ("rrf", "weighted", "combsum", "combmnz")
NORMS = ("minmax", "zscore", "sum", "max", "rank", "none")
TUNED = "tuned"  # weights="tuned": picked by cross-validation over queries (lab.retrievers.fusion_cv)
_EPS = 1e-9  # ranx's floor on every normaliser's denominator


def _weights(runs: Sequence[Run], weights: Sequence[float] | None) -> list[float]:
    if not runs:
        raise ConfigError("fusion needs at least one run")
    if weights is None:
        return [1.0] * len(runs)
    weights = [float(w) for w in weights]
    if len(weights) != len(runs):
        raise ConfigError(f"fusion: {len(weights)} weights for {len(runs)} runs; give one weight per run")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ConfigError(f"fusion weights must be finite and >= 0, got {weights}")
    return weights


def _query_ids(runs: Sequence[Run]) -> list[str]:
    return list(dict.fromkeys(q for r in runs for q in r))


def _name(kind: str, runs: Sequence[Run]) -> str:
    return f"{kind}({'+'.join(r.name for r in runs)})"


def _top(scores: dict[str, float], k: int | None) -> dict[str, float]:
    if k is None:
        return scores
    return dict(sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k])


def rrf(runs: Sequence[Run], k: int = 60, weights: Sequence[float] | None = None, top: int | None = None) -> Run:
    """Reciprocal rank fusion: ``score(d) = sum_i w_i / (k + rank_i(d))``.

    ``rank_i(d)`` counts from 1 in ``runs[i].ranked(q)`` order; a document absent from run i adds nothing.
    ``weights`` default to 1 each (Cormack et al. 2009 use k=60 and no weights). ``top`` keeps the best
    ``top`` documents per query (all when None). Scores only matter through ranks, so runs on different
    scales fuse without normalisation.
    """
    if k < 0:
        raise ConfigError(f"rrf k must be >= 0, got {k}")
    w = _weights(runs, weights)
    scores: dict[str, dict[str, float]] = {}
    for qid in _query_ids(runs):
        fused: dict[str, float] = {}
        for wi, run in zip(w, runs, strict=True):
            for rank, (doc, _) in enumerate(run.ranked(qid), start=1):
                fused[doc] = fused.get(doc, 0.0) + wi / (k + rank)
        scores[qid] = _top(fused, top)
    return Run(scores, name=_name("rrf", runs))


def _ranked_items(scores: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)


def normalise(scores: dict[str, float], norm: str = "minmax") -> dict[str, float]:
    """One query's scores of one run normalised (see the module docstring for each norm and the degenerate cases).

    "minmax" to [0, 1]; "zscore" to mean 0 and sd 1 (population sd, ddof=0); "sum" shifted to min 0 and divided
    by their sum; "max" divided by the maximum; "rank" ``1 - i / n`` in :meth:`Run.ranked` order; "none" unchanged.
    """
    if norm not in NORMS:
        raise ConfigError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    if norm == "none" or not scores:
        return {d: float(s) for d, s in scores.items()}
    if norm == "rank":
        n = len(scores)
        return {d: 1.0 - i / n for i, (d, _) in enumerate(_ranked_items(scores))}
    vals = [float(s) for s in scores.values()]
    lo, hi = min(vals), max(vals)
    if norm == "minmax":
        if hi == lo:
            return {d: 1.0 for d in scores}
        return {d: (float(s) - lo) / max(hi - lo, _EPS) for d, s in scores.items()}
    if norm == "max":
        return {d: float(s) / max(hi, _EPS) for d, s in scores.items()}
    if norm == "sum":
        denom = max(sum(vals) - lo * len(vals), _EPS)
        return {d: (float(s) - lo) / denom for d, s in scores.items()}
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    if sd == 0:
        return {d: 0.0 for d in scores}
    return {d: (float(s) - mean) / max(sd, _EPS) for d, s in scores.items()}


def _score_fusion(runs: Sequence[Run], w: list[float], norm: str, mnz: bool, top: int | None, label: str) -> Run:
    scores: dict[str, dict[str, float]] = {}
    for qid in _query_ids(runs):
        fused: dict[str, float] = {}
        hit_weight: dict[str, float] = {}
        for wi, run in zip(w, runs, strict=True):
            for doc, s in normalise(run.scores.get(qid, {}), norm).items():
                fused[doc] = fused.get(doc, 0.0) + (s if mnz else wi * s)
                hit_weight[doc] = hit_weight.get(doc, 0.0) + wi
        if mnz:
            fused = {d: s * hit_weight[d] for d, s in fused.items()}
        scores[qid] = _top(fused, top)
    return Run(scores, name=_name(f"{label}-{norm}", runs))


def weighted(runs: Sequence[Run], weights: Sequence[float], norm: str = "minmax", top: int | None = None) -> Run:
    """Weighted score fusion: ``score(d) = sum_i w_i * norm_i(d)``, scores normalised per query and run (ranx wsum).

    Each run's scores of a query are normalised over that run's retrieved documents (see :func:`normalise`);
    a document the run did not retrieve contributes 0 *after* normalisation. With "minmax" 0 is the run's
    worst retrieved score, a fair stand-in for "not retrieved"; with "zscore" 0 is the run's mean, so a missing
    document counts as average there (prefer "minmax" or RRF when depths are shallow). ``top`` as in :func:`rrf`.
    """
    return _score_fusion(runs, _weights(runs, weights), norm, False, top, "weighted")


def combsum(runs: Sequence[Run], norm: str = "minmax", weights: Sequence[float] | None = None,
            top: int | None = None) -> Run:
    """CombSUM (Fox & Shaw 1994): the sum of the normalised scores (weights, when given, as in :func:`weighted`)."""
    return _score_fusion(runs, _weights(runs, weights), norm, False, top, "combsum")


def combmnz(runs: Sequence[Run], norm: str = "minmax", weights: Sequence[float] | None = None,
            top: int | None = None) -> Run:
    """CombMNZ (Fox & Shaw 1994): CombSUM times the number of runs that retrieved the document (ranx "mnz");
    with weights, CombSUM times the sum of the weights of the runs that retrieved it (ranx "wmnz")."""
    return _score_fusion(runs, _weights(runs, weights), norm, True, top, "combmnz")


def fuse(runs: Sequence[Run], fusion: str = "rrf", rrf_k: int = 60, weights: Sequence[float] | None = None,
         norm: str = "minmax", top: int | None = None) -> Run:
    """Dispatch by name: "rrf", "weighted" (weights default to equal), "combsum", "combmnz" (weights default 1)."""
    if fusion == "rrf":
        return rrf(runs, k=rrf_k, weights=weights, top=top)
    if fusion == "weighted":
        return weighted(runs, weights if weights is not None else [1.0 / len(runs)] * len(runs), norm, top)
    if fusion == "combsum":
        return combsum(runs, norm, weights, top)
    if fusion == "combmnz":
        return combmnz(runs, norm, weights, top)
    raise ConfigError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")


def part_problems(extra: dict, params: dict, where: str) -> list[str]:
    """Problems of hybrid's part params (keys outside its own params): each key must name a part (its strategy or
    label) and hold a mapping of that strategy's params, checked like any strategy's (see lab.retrievers.params)."""

    retrievers = params.get("retrievers", ("bm25", "dense"))
    if not isinstance(retrievers, (list, tuple)):
        return []  # the type check of `retrievers` reports it
    parts: dict[str, str] = {}
    problems = []
    for entry in retrievers:
        if isinstance(entry, str):
            parts.setdefault(entry, entry)
        elif isinstance(entry, dict) and isinstance(entry.get("strategy"), str):
            parts.setdefault(entry["strategy"], entry["strategy"])
            parts.setdefault(str(entry.get("label", entry["strategy"])), entry["strategy"])
            own = {k: v for k, v in entry.items() if k not in ("strategy", "label")}
            problems += param_problems(entry["strategy"], own, f"{where}: retrievers entry {entry['strategy']}")
        else:
            problems.append(f"{where}: a retrievers entry is a strategy name or a mapping with 'strategy', got "
                            f"{entry!r}")
    for name, strategy in parts.items():
        if name == strategy:
            problems += [p for p in param_problems(strategy, {}, where) if "unknown strategy" in p]
    weights = params.get("weights")
    if isinstance(weights, str) and weights != TUNED:
        problems.append(f"{where}: param weights={weights!r} is not valid; weights takes a list of numbers (one per "
                        f"part), {TUNED!r} (picked by cross-validation over queries) or null")
    for key, value in extra.items():
        if key not in parts:
            problems.append(f"{where}: unknown param {key!r}; hybrid accepts retrievers, fusion, rrf_k, weights, norm, "
                            f"depth, and a mapping of params per part ({', '.join(sorted(parts))}), e.g. "
                            f"bm25={{k1: 0.9}}")
        elif not isinstance(value, dict):
            problems.append(f"{where}: param {key}={value!r} is not valid; a part's params are a mapping, e.g. "
                            f"{key}={{...}}")
        else:
            problems += param_problems(parts[key], value, f"{where}: {key}")
    return problems


@register("hybrid", rules={"fusion": one_of(*FUSIONS), "rrf_k": at_least(0), "norm": one_of(*NORMS),
                           "depth": COUNT, "folds": at_least(2), "tune_step": between(0.01, 1)},
          extra=part_problems)
class HybridRetriever(BaseRetriever):
    """Several retrievers, each built through the registry, fused per query.

    Params: ``retrievers`` (default ["bm25", "dense"]; an entry is a strategy name, or a dict
    ``{"strategy": name, "label": ..., **params}`` to use one strategy twice), ``fusion`` "rrf" | "weighted" |
    "combsum" | "combmnz", ``rrf_k`` (60), ``weights`` (one per part; RRF, combsum and combmnz default 1 each,
    weighted default equal; or "tuned": picked per fold by ``folds``-fold cross-validation over the queries on
    ``tune_metric`` with simplex step ``tune_step``, see :mod:`lab.retrievers.fusion_cv`; needs the evaluation's
    qrels, which ``run_experiment`` hands over through :meth:`use_qrels`), ``norm`` ("minmax" | "zscore" | "sum" |
    "max" | "rank" | "none", score fusions only), ``depth`` (candidates per part, default 100; a part is searched
    at ``max(depth, k)``), and params of a part under its strategy name or its label, e.g.
    ``bm25={"k1": 0.9}``, ``dense={"model": "all-MiniLM-L6-v2"}`` (label params win over strategy params, and
    params inside a dict entry win over both).
    """

    name = "hybrid"

    def __init__(self, ctx: Context | None = None, retrievers: Sequence = ("bm25", "dense"), fusion: str = "rrf",
                 rrf_k: int = 60, weights: Sequence[float] | str | None = None, norm: str = "minmax",
                 depth: int = 100, folds: int = 5, tune_metric: str = "ndcg@10", tune_step: float = 0.1,
                 **part_params):
        super().__init__(ctx, retrievers=list(retrievers), fusion=fusion, rrf_k=rrf_k, weights=weights, norm=norm,
                         depth=depth, **part_params)
        if isinstance(weights, str) and weights != TUNED:
            raise ConfigError(f"hybrid: weights={weights!r}; give a list of numbers (one per retriever) or {TUNED!r}")
        self.tuned = weights == TUNED
        self.folds, self.tune_metric, self.tune_step = int(folds), str(tune_metric), float(tune_step)
        self._qrels = None
        self._prepare = None
        self.tuning = None
        specs = [self._spec(r) for r in retrievers]
        if len(specs) < 2:
            raise ConfigError("hybrid: give at least two retrievers to fuse")
        if weights is not None and not self.tuned and len(weights) != len(specs):
            raise ConfigError(f"hybrid: {len(weights)} weights for {len(specs)} retrievers; give one per retriever")
        names = {strategy for strategy, _, _ in specs} | {label for _, label, _ in specs}
        unknown = sorted(set(part_params) - names)
        if unknown:
            raise ConfigError(f"hybrid: unknown params {unknown}; nested part params go under a part's name "
                              f"({', '.join(sorted(names))}), e.g. bm25={{'k1': 0.9}}")
        self.labels: list[str] = []
        self.parts = []
        for strategy, label, params in specs:
            merged = {**(part_params.get(strategy) or {}),
                      **((part_params.get(label) or {}) if label != strategy else {}), **params}
            if label in self.labels:
                label = f"{label}#{len(self.labels) + 1}"
            self.labels.append(label)
            self.parts.append(build(strategy, merged, self.ctx))
        self.fusion, self.rrf_k, self.norm, self.depth = fusion, rrf_k, norm, depth
        self.weights = None if self.tuned else weights
        self.index_seconds: dict[str, float] = {}

    @staticmethod
    def _spec(entry) -> tuple[str, str, dict]:
        """(strategy, label, own params) of one ``retrievers`` entry."""
        if isinstance(entry, str):
            return entry, entry, {}
        if isinstance(entry, dict) and isinstance(entry.get("strategy"), str):
            params = {k: v for k, v in entry.items() if k not in ("strategy", "label")}
            return entry["strategy"], str(entry.get("label", entry["strategy"])), params
        raise ConfigError(f"hybrid: a retrievers entry is a strategy name or a dict with 'strategy', got {entry!r}")

    def index(self, corpus: Corpus) -> None:
        """Index every part; the seconds each took are kept in ``index_seconds`` (and in describe())."""
        for label, part in zip(self.labels, self.parts, strict=True):
            t0 = time.perf_counter()
            part.index(corpus)
            self.index_seconds[label] = time.perf_counter() - t0

    def _part_hits(self, part, text: str, depth: int) -> dict[str, float]:
        return dict(part.search_one(text, depth))

    def use_qrels(self, qrels, prepare=None) -> None:
        """The judgments ``weights="tuned"`` cross-validates on (``prepare`` maps a fused run to their level, e.g.
        chunks to documents). Ignored unless weights are tuned."""
        self._qrels, self._prepare = qrels, prepare

    def _fuser(self, k: int | None):
        return lambda runs, w: fuse(runs, self.fusion, self.rrf_k, w, self.norm, top=k)

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Each query searched alone (timed), as ``BaseRetriever.search``; with ``weights="tuned"``: each part
        searches every query (timed per query by the part), then the out-of-fold fusion; a query's latency is
        the sum of its parts' latencies plus its share of one fusion with the weights of its fold."""
        if not self.tuned:
            return super().search(queries, k)
        depth = max(self.depth, k)
        runs = [self._timed_part(part, label, queries, depth) for label, part in zip(self.labels, self.parts,
                                                                                     strict=True)]
        return self._tuned_fuse(runs, k)

    @staticmethod
    def _timed_part(part, label: str, queries: Queries, depth: int) -> Run:
        run = part.search(queries, depth)
        return Run(run.scores, name=label, latency=dict(run.latency))

    def _tuned_fuse(self, runs: list[Run], k: int) -> Run:
        if self._qrels is None:
            raise ConfigError("hybrid: weights='tuned' picks weights by cross-validation over judged queries; run it "
                              "through `lab run`, `lab sweep` or run_experiment (they pass the qrels), or give weights")
        t0 = time.perf_counter()
        self.tuning = tune_fusion(runs, self._qrels, self._fuser(k), folds=self.folds, seed=self.ctx.seed,
                                  metric=self.tune_metric, step=self.tune_step, prepare=self._prepare)
        # the tuning scores every candidate on every query; a user's query pays for one fusion only
        share = (time.perf_counter() - t0) / max(len(self.tuning.run.scores), 1) / len(self.tuning.grid)
        latency = {q: sum(r.latency.get(q, 0.0) for r in runs) + share for q in self.tuning.run.scores}
        return Run(self.tuning.run.scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        if self.tuned:
            raise ConfigError("hybrid: weights='tuned' fuses a whole query set (cross-validation); use search()")
        depth = max(self.depth, k)
        runs = [Run({"q": self._part_hits(part, text, depth)}, name=label)
                for label, part in zip(self.labels, self.parts, strict=True)]
        fused = fuse(runs, self.fusion, self.rrf_k, self.weights, self.norm)
        return fused.ranked("q", k)

    def search_batch(self, queries: Queries, k: int = 100) -> Run:
        """All queries at once: each part's fastest batch path (``search_batch`` if it has one), then fusion.

        The hits of ``search`` up to what a part's own batch path changes (a dense part encodes queries in
        batches, which may move scores in the last float digits); no per-query latency (``search`` measures it).
        """
        depth = max(self.depth, k)
        runs = []
        for label, part in zip(self.labels, self.parts, strict=True):
            run = part.search_batch(queries, depth)
            runs.append(Run(run.scores, name=label))
        if self.tuned:
            return Run(self._tuned_fuse(runs, k).scores, name=self.name)
        fused = fuse(runs, self.fusion, self.rrf_k, self.weights, self.norm, top=k)
        return Run(fused.scores, name=self.name)

    def describe(self) -> dict:
        out = {"strategy": self.name, "fusion": self.fusion, "depth": self.depth,
               "retrievers": list(self.labels), "parts": [p.describe() for p in self.parts]}
        if self.fusion == "rrf":
            out["rrf_k"] = self.rrf_k
        else:
            out["norm"] = self.norm
        out["weights"] = TUNED if self.tuned else (list(self.weights) if self.weights is not None else None)
        if self.tuned:
            out.update({"folds": self.folds, "tune_metric": self.tune_metric, "tune_step": self.tune_step})
            if self.tuning is not None:
                out.update(self.tuning.describe())
        if self.index_seconds:
            out["index_seconds"] = {k: round(v, 3) for k, v in self.index_seconds.items()}
        return out
