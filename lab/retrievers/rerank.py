"""Two-stage retrieval: any first-stage strategy, then a second stage that rescores its top N.

``rerank`` = a first stage built through :func:`lab.retrievers.base.build` (param ``first_stage``, default
"bm25", with ``first_stage_params``) + a reranker:

- ``reranker="cross-encoder"`` (default): a ``sentence_transformers.CrossEncoder``, any name or local path
  (``model``); without ``model``, the locally trained default ``models/reranker-scifact``
  (``lab train-reranker``). Scores are cached per (model identity, query, passage).
- ``reranker="biencoder"``: a stronger embedding model (``model``, default "all-mpnet-base-v2", loaded with
  :func:`lab.models.embedders.load_embedder`, ``backend`` as dense's: None is the default backend) scores the
  top N by cosine similarity; passage vectors go through the embedding cache, so they are encoded once;
  ``describe()`` names the backend and inference precision that ran.

``hybrid_rerank`` is ``rerank`` with ``first_stage="hybrid"`` (composition, not a copy). Configs of one process
that differ only in their second stage index one first stage and search each query in it once
(:mod:`lab.retrievers.shared_stage`).

Conventions
- The first stage retrieves ``max(top_n, k)`` hits; the top ``top_n`` are rescored and ranked first; the
  remaining first-stage hits follow in first-stage order with scores below every rescored one.
- ``max_length`` (cross-encoder tokens per pair): None = the length the model was trained with
  (``training.json``), else 256.
- ``alpha`` weighs the second stage against the first on the top N: ``alpha * minmax(second) +
  (1 - alpha) * minmax(first)`` per query (min-max over that query's top N). ``alpha=1`` is a pure rerank.
  ``alpha=None`` (default) takes the value the trained model's validation chose (``training.json``:
  ``recommended_alpha``), else 1. That value was chosen against the training run's first stage (BM25):
  over another first stage (hybrid's RRF scores) it is a prior, not a tuned weight; set ``alpha`` there.
- Latency of a query = its first-stage latency + its rerank time (each query rescored alone), with the model
  really run: the bi-encoder encodes each query fresh (passage vectors are corpus-side and come from the
  embedding cache, as an index would hold them), and cross-encoder scores are computed, not read back, unless
  ``cache_scores=True`` (faster reruns; the latency is then the cache lookup's, and ``describe()["score_cache"]``
  counts the pairs read (hits) and scored (misses)).
- A cross-encoder trained by ``lab train-reranker`` records its training queries (text hashes): searching
  one of them raises a ConfigError (the score would be leaked), unless ``allow_trained_queries=True``.
"""
from __future__ import annotations

import time

import numpy as np

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Queries, Run
from lab.models.backends import BACKENDS
from lab.models.crossencoder import CrossEncoderScorer, passage_text, text_sha
from lab.models.embedders import load_embedder, torch_threads
from lab.models.weights import weights_path
from lab.retrievers.base import BaseRetriever, Context, build, register
from lab.retrievers.params import COUNT, between, one_of
from lab.retrievers.shared_stage import shared_embedder, shared_first_stage

RERANKERS = ("cross-encoder", "biencoder")
_ALIASES = {"crossencoder": "cross-encoder", "cross_encoder": "cross-encoder", "ce": "cross-encoder",
            "bi-encoder": "biencoder", "bi_encoder": "biencoder", "embedding": "biencoder"}
DEFAULT_BIENCODER = "all-mpnet-base-v2"


def minmax(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1] (min -> 0, max -> 1); a constant vector maps to all zeros."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return np.zeros_like(x) if hi <= lo else (x - lo) / (hi - lo)


def combine(first: np.ndarray, second: np.ndarray, alpha: float) -> np.ndarray:
    """Final score of the top N: ``alpha * minmax(second) + (1 - alpha) * minmax(first)``; alpha=1 returns
    the second-stage scores unchanged (raw, so a pure rerank keeps the model's own scale)."""
    if alpha >= 1.0:
        return np.asarray(second, dtype=np.float64)
    return alpha * minmax(second) + (1.0 - alpha) * minmax(first)


def merge(head: list[tuple[str, float]], rescored: np.ndarray, tail: list[tuple[str, float]], k: int
          ) -> dict[str, float]:
    """Hits of one query: the rescored head in its new order, then the first-stage tail in its order, with
    tail scores strictly below the head's minimum (min - 1 - position), cut to ``k``."""
    out = {doc_id: float(s) for (doc_id, _), s in zip(head, rescored, strict=True)}
    floor = float(np.min(rescored)) if len(rescored) else 0.0
    for i, (doc_id, _) in enumerate(tail):
        out[doc_id] = floor - 1.0 - i
    ranked = sorted(out.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
    return dict(ranked)


class RerankRetriever(BaseRetriever):
    """A first stage (any registered strategy) and a second stage over its top N; see the module docstring."""

    name = "rerank"

    def __init__(self, ctx: Context | None = None, *, first_stage: str = "bm25", first_stage_params: dict | None = None,
                 reranker: str = "cross-encoder", model: str | None = None, top_n: int = 50,
                 alpha: float | None = None, max_length: int | None = None, batch_size: int = 32,
                 allow_trained_queries: bool = False, cache_scores: bool = False, backend: str | None = None,
                 name: str | None = None):
        kind = _ALIASES.get(str(reranker).lower(), str(reranker).lower())
        if kind not in RERANKERS:
            raise ConfigError(f"rerank: unknown reranker {reranker!r}; use one of {', '.join(RERANKERS)}")
        if int(top_n) < 1:
            raise ConfigError(f"rerank: top_n must be >= 1, got {top_n}")
        if alpha is not None and not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"rerank: alpha must lie in [0, 1] (1 = pure rerank), got {alpha}")
        if first_stage in ("rerank", "hybrid_rerank"):
            raise ConfigError(f"rerank: first_stage={first_stage!r} would rerank twice; name a first-stage strategy")
        if backend is not None and kind != "biencoder":
            raise ConfigError(f"rerank: backend={backend!r} applies to reranker=biencoder (the embedding model's "
                              "encoding backend); the cross-encoder runs on torch")
        super().__init__(ctx, first_stage=first_stage, reranker=kind, model=model, top_n=int(top_n), alpha=alpha,
                         max_length=max_length, batch_size=int(batch_size),
                         **({"backend": backend} if backend is not None else {}))
        self.backend = backend
        if name:
            self.name = name
        self.kind = kind
        self.top_n = int(top_n)
        self.alpha_param = None if alpha is None else float(alpha)
        self.allow_trained_queries = bool(allow_trained_queries)
        self.cache_scores = bool(cache_scores)
        self.first_params = dict(first_stage_params or {})
        self.first = build(first_stage, self.first_params, self.ctx)
        self.first_stage = first_stage
        self.model_name = model if model is not None or kind == "cross-encoder" else DEFAULT_BIENCODER
        self.max_length = None if max_length is None else int(max_length)
        self.batch_size = int(batch_size)
        self._scorer = None  # built lazily: a missing model fails at index(), not at build()
        self._docs: dict[str, str] = {}
        self._indexed = False
        self._trained_queries: set[str] = set()

    # -------------------------------------------------------------- second stage
    def _cache(self):
        return Cache(self.ctx.cache_dir)

    def scorer(self):
        """The second-stage scorer (loaded on first use)."""
        if self._scorer is None:
            if self.kind == "cross-encoder":
                self._scorer = CrossEncoderScorer(self.model_name, max_length=self.max_length,
                                                  batch_size=self.batch_size,
                                                  cache=self._cache() if self.cache_scores else None)
                training = self._scorer.training or {}
                self._trained_queries = set(training.get("train_query_sha", []))
            else:
                self._scorer = BiEncoderScorer(self.model_name, self.ctx, batch_size=self.batch_size,
                                               backend=self.backend)
        return self._scorer

    @property
    def alpha(self) -> float:
        """The weight of the second stage actually used (see the module docstring)."""
        if self.alpha_param is not None:
            return self.alpha_param
        training = getattr(self.scorer(), "training", None) or {}
        return float(training.get("recommended_alpha", 1.0))

    # -------------------------------------------------------------- Retriever
    def index(self, corpus: Corpus) -> None:
        self.scorer()
        # configs that differ only in their second stage share one first stage (lab.retrievers.shared_stage)
        self.first = shared_first_stage(self.first, self.first_stage, self.first_params, self.ctx, corpus)
        self._docs = {d.id: passage_text(d.title, d.text) for d in corpus}
        if isinstance(self._scorer, BiEncoderScorer):  # static int8: calibrated on the corpus, as dense's index is
            self._scorer.calibrate(list(self._docs.values()))
        self._indexed = True

    def _check_queries(self, queries: Queries) -> None:
        if not self._trained_queries or self.allow_trained_queries:
            return

        seen = [q for q in queries if text_sha(queries[q]) in self._trained_queries]
        if seen:
            raise ConfigError(
                f"rerank: {len(seen)} of the {len(queries)} queries (e.g. id {seen[0]!r}) were training queries of "
                f"reranker {self._scorer.path}; its scores on them are leaked. Evaluate on a held-out split "
                "(e.g. --split test) or set allow_trained_queries=true to override")

    def search(self, queries: Queries, k: int = 100) -> Run:
        """First stage for all queries (timed per query by it), then each query's top N rescored alone."""
        if not self._indexed:
            raise ConfigError("rerank: search() before index(); call index(corpus) first")
        self._check_queries(queries)
        first = self.first.search(queries, max(self.top_n, k))
        scorer, alpha = self.scorer(), self.alpha
        scores, latency = {}, {}
        for qid in progress(list(queries), desc=f"rerank {self.kind} top {self.top_n}", enabled=self.ctx.progress,
                            phase="reranking", unit="query"):
            t0 = time.perf_counter()
            ranked = first.ranked(qid)
            head, tail = ranked[: self.top_n], ranked[self.top_n:]
            second = scorer.score([(queries[qid], self._docs[d]) for d, _ in head]) if head else np.zeros(0)
            final = combine(np.array([s for _, s in head]), second, alpha)
            scores[qid] = merge(head, final, tail, k)
            latency[qid] = first.latency.get(qid, 0.0) + time.perf_counter() - t0
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        run = self.search(Queries({"q": text}), k)
        return run.ranked("q")

    def describe(self) -> dict:
        """Strategy, top_n, alpha, the first stage's describe() and the reranker's identity."""
        out = {"strategy": self.name, "top_n": self.top_n, "reranker": self.kind, "cache_scores": self.cache_scores,
               "alpha": self.alpha if self._scorer is not None else self.alpha_param,
               "first_stage": self.first.describe()}
        out["reranker_model"] = self._scorer.describe() if self._scorer is not None else {"model": self.model_name}
        if self._scorer is not None:
            out["score_cache"] = {"hits": self._scorer.hits, "misses": self._scorer.misses}
        return out


class BiEncoderScorer:
    """Scores (query, passage) pairs by the cosine similarity of a sentence embedding model's vectors;
    passages and queries go through :class:`lab.core.cache.EmbeddingCache` (encoded once per model identity)."""

    def __init__(self, name_or_path: str, ctx: Context, batch_size: int = 32, backend: str | None = None):
        self.name = name_or_path
        self.embedder = shared_embedder(name_or_path, ctx.cache_dir, backend, load_embedder)
        self.cache = EmbeddingCache(ctx.cache_dir, progress=False)
        self.training = None

    def calibrate(self, passages) -> None:
        """Give an embedder whose vectors depend on the corpus (lab.models.int8) the corpus's passages before the
        first pair is scored, so its candidates are encoded as a dense index of that corpus encodes them (and read
        back from the embedding cache when one did)."""
        calibrate = getattr(self.embedder, "calibrate", None)
        if calibrate is not None:
            calibrate(passages)

    @property
    def hits(self) -> int:
        """Texts whose vectors came from the embedding cache."""
        return self.cache.hits

    @property
    def misses(self) -> int:
        """Texts encoded by the model."""
        return self.cache.misses

    def describe(self) -> dict:
        ident = getattr(self.embedder, "identity", self.name)
        out = {"kind": "biencoder", "model": self.name, "identity": ident,
               "model_path": weights_path(self.embedder),
               "backend": getattr(self.embedder, "backend", None),
               "inference_precision": getattr(self.embedder, "inference_precision", None)}
        if getattr(self.embedder, "backend_fallback", None):
            out["backend_fallback"] = self.embedder.backend_fallback
        return out

    def score(self, pairs) -> np.ndarray:
        """Cosine similarity per pair (vectors L2-normalised here, whatever the embedder returns)."""
        pairs = list(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        queries = list(dict.fromkeys(q for q, _ in pairs))

        with torch_threads(1):  # one query at a time: one thread is 15-22x faster here (see lab.models.embedders)
            qv = _normalise(self.embedder.encode_queries(queries))  # fresh, so latency is the model's
        pv = _normalise(self.cache.encode(self.embedder, [p for _, p in pairs], kind="passage"))
        qi = {q: i for i, q in enumerate(queries)}
        return np.einsum("ij,ij->i", qv[[qi[q] for q, _ in pairs]], pv).astype(np.float32)


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    n = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(n == 0, 1.0, n)


_RULES = {"top_n": COUNT, "alpha": between(0, 1), "max_length": COUNT, "batch_size": COUNT,
          "backend": one_of(*BACKENDS)}


@register("rerank", params_from=RerankRetriever, exclude=("name",), rules=_RULES,
          nested={"first_stage_params": "first_stage"})
def _rerank(ctx: Context, **params) -> RerankRetriever:
    return RerankRetriever(ctx, **params)


@register("hybrid_rerank", params_from=RerankRetriever, exclude=("name",),
          rules={**_RULES, "first_stage": one_of("hybrid")}, nested={"first_stage_params": "hybrid"},
          defaults={"first_stage": "hybrid"})
def _hybrid_rerank(ctx: Context, **params) -> RerankRetriever:
    """``rerank`` over the ``hybrid`` first stage; any rerank param applies (first_stage_params too)."""
    if params.get("first_stage", "hybrid") != "hybrid":
        raise ConfigError("hybrid_rerank: first_stage is fixed to 'hybrid'; use strategy 'rerank' for another")
    params.pop("first_stage", None)
    return RerankRetriever(ctx, first_stage="hybrid", name="hybrid_rerank", **params)
