"""Fusion of several runs into one (RRF, weighted score fusion), and the "hybrid" strategy built on it.

Conventions
- Ranks start at 1 and follow :meth:`Run.ranked` (score descending, ties by doc id descending), so two runs with
  the same scores always fuse the same way.
- A document missing from a run (not in its top ``depth``) contributes 0 from that run, in both fusers.
- Queries: the union of the runs' queries, in first-seen order; a query missing from a run gets nothing from it.
- The fused run carries no latency: the fusers are pure functions over finished runs. The "hybrid" strategy
  times each query as a whole (all parts plus fusion), as ``BaseRetriever.search`` does.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

from lab.data.types import Corpus, Queries, Run
from lab.errors import ConfigError
from lab.retrievers.base import BaseRetriever, Context, build, register
from lab.retrievers.params import COUNT, at_least, one_of

FUSIONS = ("rrf", "weighted")
NORMS = ("minmax", "zscore", "none")


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
        for wi, run in zip(w, runs):
            for rank, (doc, _) in enumerate(run.ranked(qid), start=1):
                fused[doc] = fused.get(doc, 0.0) + wi / (k + rank)
        scores[qid] = _top(fused, top)
    return Run(scores, name=_name("rrf", runs))


def normalise(scores: dict[str, float], norm: str = "minmax") -> dict[str, float]:
    """One query's scores normalised: "minmax" to [0, 1], "zscore" to mean 0 and sd 1, "none" unchanged.

    Degenerate cases: minmax of equal scores (or one score) gives 1.0 to each (all are the run's best);
    zscore with standard deviation 0 gives 0.0 to each. The standard deviation is the population one (ddof=0).
    """
    if norm not in NORMS:
        raise ConfigError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    if norm == "none" or not scores:
        return {d: float(s) for d, s in scores.items()}
    vals = [float(s) for s in scores.values()]
    if norm == "minmax":
        lo, hi = min(vals), max(vals)
        if hi == lo:
            return {d: 1.0 for d in scores}
        return {d: (float(s) - lo) / (hi - lo) for d, s in scores.items()}
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    if sd == 0:
        return {d: 0.0 for d in scores}
    return {d: (float(s) - mean) / sd for d, s in scores.items()}


def weighted(runs: Sequence[Run], weights: Sequence[float], norm: str = "minmax", top: int | None = None) -> Run:
    """Weighted score fusion: ``score(d) = sum_i w_i * norm_i(d)``, scores normalised per query and run.

    Each run's scores of a query are normalised over that run's retrieved documents (see :func:`normalise`);
    a document the run did not retrieve contributes 0 *after* normalisation. With "minmax" 0 is the run's
    worst retrieved score, a fair stand-in for "not retrieved"; with "zscore" 0 is the run's mean, so a missing
    document counts as average there (prefer "minmax" or RRF when depths are shallow). ``top`` as in :func:`rrf`.
    """
    w = _weights(runs, weights)
    scores: dict[str, dict[str, float]] = {}
    for qid in _query_ids(runs):
        fused: dict[str, float] = {}
        for wi, run in zip(w, runs):
            for doc, s in normalise(run.scores.get(qid, {}), norm).items():
                fused[doc] = fused.get(doc, 0.0) + wi * s
        scores[qid] = _top(fused, top)
    return Run(scores, name=_name(f"weighted-{norm}", runs))


def fuse(runs: Sequence[Run], fusion: str = "rrf", rrf_k: int = 60, weights: Sequence[float] | None = None,
         norm: str = "minmax", top: int | None = None) -> Run:
    """Dispatch to :func:`rrf` or :func:`weighted` by name (``weights`` default to equal for "weighted")."""
    if fusion == "rrf":
        return rrf(runs, k=rrf_k, weights=weights, top=top)
    if fusion == "weighted":
        return weighted(runs, weights if weights is not None else [1.0 / len(runs)] * len(runs), norm, top)
    raise ConfigError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")


def part_problems(extra: dict, params: dict, where: str) -> list[str]:
    """Problems of hybrid's part params (keys outside its own params): each key must name a part (its strategy or
    label) and hold a mapping of that strategy's params, checked like any strategy's (see lab.retrievers.params)."""
    from lab.retrievers.base import param_problems

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
                           "depth": COUNT}, extra=part_problems)
class HybridRetriever(BaseRetriever):
    """Several retrievers, each built through the registry, fused per query.

    Params: ``retrievers`` (default ["bm25", "dense"]; an entry is a strategy name, or a dict
    ``{"strategy": name, "label": ..., **params}`` to use one strategy twice), ``fusion`` "rrf" | "weighted",
    ``rrf_k`` (60), ``weights`` (one per part; RRF default 1 each, weighted default equal), ``norm``
    ("minmax" | "zscore" | "none", weighted only), ``depth`` (candidates per part, default 100; a part is searched
    at ``max(depth, k)``), and params of a part under its strategy name or its label, e.g.
    ``bm25={"k1": 0.9}``, ``dense={"model": "all-MiniLM-L6-v2"}`` (label params win over strategy params, and
    params inside a dict entry win over both).
    """

    name = "hybrid"

    def __init__(self, ctx: Context | None = None, retrievers: Sequence = ("bm25", "dense"), fusion: str = "rrf",
                 rrf_k: int = 60, weights: Sequence[float] | None = None, norm: str = "minmax", depth: int = 100,
                 **part_params):
        super().__init__(ctx, retrievers=list(retrievers), fusion=fusion, rrf_k=rrf_k, weights=weights, norm=norm,
                         depth=depth, **part_params)
        if fusion not in FUSIONS:
            raise ConfigError(f"hybrid: unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")
        if norm not in NORMS:
            raise ConfigError(f"hybrid: unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
        if not isinstance(depth, int) or depth < 1:
            raise ConfigError(f"hybrid: depth must be a positive integer, got {depth!r}")
        specs = [self._spec(r) for r in retrievers]
        if len(specs) < 2:
            raise ConfigError("hybrid: give at least two retrievers to fuse")
        if weights is not None and len(weights) != len(specs):
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
        self.fusion, self.rrf_k, self.weights, self.norm, self.depth = fusion, rrf_k, weights, norm, depth
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
        for label, part in zip(self.labels, self.parts):
            t0 = time.perf_counter()
            part.index(corpus)
            self.index_seconds[label] = time.perf_counter() - t0

    def _part_hits(self, part, text: str, depth: int) -> dict[str, float]:
        if hasattr(part, "search_one"):
            return dict(part.search_one(text, depth))
        return part.search(Queries({"q": text}), depth).scores.get("q", {})

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        depth = max(self.depth, k)
        runs = [Run({"q": self._part_hits(part, text, depth)}, name=label)
                for label, part in zip(self.labels, self.parts)]
        fused = fuse(runs, self.fusion, self.rrf_k, self.weights, self.norm)
        return fused.ranked("q", k)

    def search_batch(self, queries: Queries, k: int = 100) -> Run:
        """All queries at once: each part's fastest batch path (``search_batch`` if it has one), then fusion.

        The hits of ``search`` up to what a part's own batch path changes (a dense part encodes queries in
        batches, which may move scores in the last float digits); no per-query latency (``search`` measures it).
        """
        depth = max(self.depth, k)
        runs = []
        for label, part in zip(self.labels, self.parts):
            run = part.search_batch(queries, depth) if hasattr(part, "search_batch") else part.search(queries, depth)
            runs.append(Run(run.scores, name=label))
        fused = fuse(runs, self.fusion, self.rrf_k, self.weights, self.norm, top=k)
        return Run(fused.scores, name=self.name)

    def describe(self) -> dict:
        out = {"strategy": self.name, "fusion": self.fusion, "depth": self.depth,
               "retrievers": list(self.labels), "parts": [p.describe() for p in self.parts]}
        if self.fusion == "rrf":
            out["rrf_k"] = self.rrf_k
        else:
            out["norm"] = self.norm
        out["weights"] = list(self.weights) if self.weights is not None else None
        if self.index_seconds:
            out["index_seconds"] = {k: round(v, 3) for k, v in self.index_seconds.items()}
        return out
