"""What the configs of a rerank grid share in one process: the first stage (indexed once, each query searched
once) and the second stage's loaded model.

A rerank grid (``params/rerank_grid.yaml``) varies only the second stage: ``top_n``, ``alpha``, the reranker
model. Every config's first stage is then the same retriever over the same corpus, so this process indexes it once
and searches each query once: :func:`shared_first_stage` returns the :class:`SharedStage` of (strategy name, its
params, seed, cache folder, corpus content) from :data:`FIRST_STAGES`, an in-process
:class:`lab.core.cache.Memo` (``lab.core.cache.clear_memos()`` empties it, as ``lab sweep --halving
--compare-full`` does before the full grid).

A shared stage answers ``search(queries, k)`` from the hits it found for the same query text at the same ``k``;
a query's latency is the one measured when it was searched (the first stage's cost, paid once, is still counted
in every config's per-query latency, so the configs' latencies compare as if each had searched). A first stage
that tunes on the judgments (``tuned``: hybrid's ``weights="tuned"``) is not shared.

The bi-encoder a second stage loads (``lab.models.embedders.load_embedder``: an OpenVINO compile, a model
assembled from its parts) is loaded once per (model, backend, cache folder): :func:`shared_embedder`, memo
:data:`EMBEDDERS`. Encoding does not change an embedder, so sharing one changes no score.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lab.core.cache import Memo
from lab.data.fingerprint import fingerprint_texts
from lab.data.types import Corpus, Queries, Run

#: (strategy, params, seed, cache folder, corpus digest) -> the indexed :class:`SharedStage`; a few kept.
FIRST_STAGES = Memo(max_items=4)


def corpus_digest(corpus: Corpus) -> str:
    """Content hash of a corpus: every document's id, title and text, in order."""
    return fingerprint_texts(f"{d.id}\0{d.title}\0{d.text}" for d in corpus)


class SharedStage:
    """An indexed retriever whose searches are memoised per (query text, k); other attributes are the
    retriever's (``describe()``, ``name`` ...)."""

    def __init__(self, retriever: Any):
        self.retriever = retriever
        self.hits: dict[tuple[str, int], tuple[dict[str, float], float]] = {}
        self.searched = self.reused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.retriever, name)

    def search(self, queries: Queries, k: int = 100) -> Run:
        todo = [q for q in queries if (queries[q], k) not in self.hits]
        if todo:
            run = self.retriever.search(queries.subset(todo), k)
            for q in todo:
                self.hits[(queries[q], k)] = (run.scores.get(q, {}), run.latency.get(q, 0.0))
        self.searched += len(todo)
        self.reused += len(queries) - len(todo)
        found = {q: self.hits[(queries[q], k)] for q in queries}
        return Run({q: dict(h) for q, (h, _) in found.items()}, name=self.retriever.name,
                   latency={q: t for q, (_, t) in found.items()})

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search(Queries({"q": text}), k).ranked("q")


def shared_first_stage(retriever: Any, strategy: str, params: dict, ctx: Any, corpus: Corpus) -> Any:
    """``retriever`` (built, not indexed) indexed over ``corpus``, or the equal first stage this process indexed
    before (see the module docstring); returns what to search."""
    if getattr(retriever, "tuned", False):
        retriever.index(corpus)
        return retriever
    key = (strategy, json.dumps(params, sort_keys=True, default=str), int(getattr(ctx, "seed", 0) or 0),
           str(getattr(ctx, "cache_dir", "")), corpus_digest(corpus))
    (stage,) = FIRST_STAGES.get_many([key])
    if stage is None:
        retriever.index(corpus)
        stage = SharedStage(retriever)
        FIRST_STAGES.put_many([key], [stage])
    return stage


#: (model name or path, backend, cache folder) -> a loaded embedder; a few kept.
EMBEDDERS = Memo(max_items=4)


def shared_embedder(name: str, cache_dir: Any, backend: str | None, load: Callable[..., Any]) -> Any:
    """``load(name, cache_dir=cache_dir, backend=backend)``, once per process for the same arguments."""
    key = (str(name), str(backend), str(cache_dir))
    (embedder,) = EMBEDDERS.get_many([key])
    if embedder is None:
        embedder = load(name, cache_dir=cache_dir, backend=backend)
        EMBEDDERS.put_many([key], [embedder])
    return embedder
