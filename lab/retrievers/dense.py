"""Dense retrieval: a bi-encoder embeds passages and queries; faiss finds the nearest passages.

Conventions
- A passage is ``title + " " + text`` (stripped), as BEIR and MTEB embed it.
- Score = inner product of L2-normalised vectors = cosine similarity (higher is better).
- ``index="auto"`` (default) is "flat" up to :data:`ANN_THRESHOLD` passages and "hnsw" above; ``describe()``
  logs the type built (``index_type``, ``index_chosen``).
- ``index="flat"`` is exact search (faiss ``IndexFlatIP``); ``index="hnsw"`` is approximate
  (``IndexHNSWFlat`` with inner product; ``M`` links per node, ``ef_construction`` at build, ``ef_search`` at
  query time) for large corpora. HNSW indexes are stored in the cache (keyed by the vectors and the params).
- Passage vectors go through :class:`lab.core.cache.EmbeddingCache`: a rerun encodes nothing. ``search`` encodes
  each query alone, uncached, so ``Run.latency`` is the honest time of a new query (encode + search);
  ``search_batch`` encodes queries through the cache and searches them together (no latency).
- faiss runs one thread during ``search`` (single-query search is faster without thread start-up: measured
  ~3x here against 2 threads) and its previous thread count during ``search_batch`` and index build.
"""
from __future__ import annotations

import hashlib
import sys
from contextlib import contextmanager

import numpy as np

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.data.types import Corpus, Queries, Run
from lab.models.backends import BACKENDS
from lab.models.embedders import Embedder, load_embedder
from lab.models.weights import weights_path
from lab.retrievers.base import BaseRetriever, Context, register
from lab.retrievers.params import COUNT, one_of

INDEX_TYPES = ("auto", "flat", "hnsw")
#: ``index="auto"`` (default) builds exact search up to this many passages and HNSW above it. Measured by
#: benchmarks/scale.py on 2 busy cores: at 100k passages one flat search took 67 ms P50 (more than encoding the
#: query), HNSW (M 32) 0.19 ms at recall@10 0.979 against flat, for a 77 s build; at 10k flat took 0.5 ms.
ANN_THRESHOLD = 100_000


def choose_index(n_passages: int, index: str = "auto") -> str:
    """The index type to build: ``index`` itself unless "auto", then "flat" up to :data:`ANN_THRESHOLD` passages
    and "hnsw" above."""
    if index != "auto":
        return index
    return "hnsw" if n_passages > ANN_THRESHOLD else "flat"


def passage_text(title: str, text: str) -> str:
    """The text embedded for one document: ``title + " " + text``, stripped."""
    return f"{title or ''} {text or ''}".strip()


@contextmanager
def faiss_threads(n: int | None):
    """Run the block with faiss (and torch, when loaded) on ``n`` threads; restore both after (None: unchanged).

    torch is set too, last, because faiss imported after torch shares torch's OpenMP runtime (the dynamic
    linker binds faiss's ``omp_*``/``GOMP_*`` to torch's libgomp): changing the OpenMP thread count behind
    torch's back made single-query encodes take 0.6-3.8 s instead of ~30 ms here, until torch's setter ran again.
    """

    import faiss

    torch = sys.modules.get("torch")
    old_f = faiss.omp_get_max_threads()
    old_t = torch.get_num_threads() if torch is not None else None
    if n:
        faiss.omp_set_num_threads(int(n))
        if torch is not None:
            torch.set_num_threads(int(n))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(old_f)
        if torch is not None:
            torch.set_num_threads(old_t)


def build_index(vectors: np.ndarray, index: str = "flat", M: int = 32, ef_construction: int = 200,
                ef_search: int = 128):
    """A faiss inner-product index over ``vectors`` (float32, rows normalised)."""
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    dim = vectors.shape[1]
    if index == "flat":
        idx = faiss.IndexFlatIP(dim)
    elif index == "hnsw":
        idx = faiss.IndexHNSWFlat(dim, int(M), faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = int(ef_construction)
    else:
        raise ConfigError(f"dense: index must be one of {INDEX_TYPES}, not {index!r}")
    idx.add(vectors)
    if index == "hnsw":
        idx.hnsw.efSearch = int(ef_search)
    return idx


@register("dense", rules={"backend": one_of(*BACKENDS), "batch_size": COUNT, "max_seq_length": COUNT,
                          "index": one_of(*INDEX_TYPES), "M": COUNT,
                          "ef_search": COUNT, "ef_construction": COUNT, "num_threads": COUNT})
class DenseRetriever(BaseRetriever):
    """Bi-encoder + faiss. Params: model, batch_size, max_seq_length, query_prefix, passage_prefix,
    index ("auto" | "flat" | "hnsw"), M, ef_search, ef_construction, num_threads (threads for encoding), backend (torch,
    onnx, onnx-int8, openvino, openvino-int8; None: the default of :mod:`lab.models.backends`, openvino-int8, for
    sentence-transformers models, which quantises corpora from 2,000 passages; describe() names the backend that ran
    and its inference_precision, the int8 calibration or why the default did not quantise (int8_skipped), and
    backend_fallback when the default fell back to torch).

    ``embedder=`` takes an already loaded :class:`lab.models.Embedder` (shared between strategies).
    """

    name = "dense"

    def __init__(self, ctx: Context | None = None, model: str = "all-MiniLM-L6-v2", batch_size: int = 32,
                 max_seq_length: int | None = None, query_prefix: str | None = None,
                 passage_prefix: str | None = None, index: str = "auto", M: int = 32, ef_search: int = 128,
                 ef_construction: int = 200, num_threads: int | None = None, backend: str | None = None,
                 embedder: Embedder | None = None):
        super().__init__(ctx, model=model, batch_size=batch_size, max_seq_length=max_seq_length,
                         query_prefix=query_prefix, passage_prefix=passage_prefix, index=index, M=M,
                         ef_search=ef_search, ef_construction=ef_construction, num_threads=num_threads,
                         backend=backend)
        self._embedder = embedder
        self._cache = Cache(self.ctx.cache_dir)
        self.embeddings = EmbeddingCache(self._cache, progress=self.ctx.progress)
        self._index = None
        self._ids: list[str] = []
        self.index_chosen: str | None = None

    # ------------------------------------------------------------------ parts
    @property
    def embedder(self):
        """The embedding model, loaded on first use."""
        if self._embedder is None:
            p = self.params
            self._embedder = load_embedder(p["model"], cache_dir=self.ctx.cache_dir, batch_size=p["batch_size"],
                                           max_seq_length=p["max_seq_length"], query_prefix=p["query_prefix"],
                                           passage_prefix=p["passage_prefix"], num_threads=p["num_threads"],
                                           progress=self.ctx.progress, backend=p["backend"])
        return self._embedder

    def index(self, corpus: Corpus) -> None:
        """Embed every document (cached) and build the faiss index."""
        self._ids = corpus.ids
        texts = [passage_text(d.title, d.text) for d in corpus]
        vectors = self.embeddings.encode(self.embedder, texts, kind="passage")
        self._index = self._build_or_load(vectors)

    def _build_or_load(self, vectors: np.ndarray):
        p = self.params
        self.index_chosen = choose_index(len(vectors), p["index"])
        if self.index_chosen == "flat":
            return build_index(vectors, "flat")
        import faiss

        h = hashlib.sha256(np.ascontiguousarray(vectors).tobytes())
        h.update("\0".join(self._ids).encode())
        ident = f"{self.embedder.cache_identity('passage')}|hnsw|M={p['M']}|efC={p['ef_construction']}"
        key = self._cache.key("index:faiss", ident, h.hexdigest())
        data = self._cache.get_bytes(key)
        if data is not None:
            idx = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
            idx.hnsw.efSearch = int(p["ef_search"])
            return idx
        idx = build_index(vectors, "hnsw", M=p["M"], ef_construction=p["ef_construction"], ef_search=p["ef_search"])
        self._cache.put_bytes(key, faiss.serialize_index(idx).tobytes())
        return idx

    def _chosen(self) -> str:
        """The index type built (before ``index()``: "flat" unless "hnsw" was asked for)."""
        return self.index_chosen or ("hnsw" if self.params["index"] == "hnsw" else "flat")

    def _require_index(self):
        if self._index is None:
            raise ConfigError("dense: search before index(corpus); call index() first")
        return self._index

    def _hits(self, scores: np.ndarray, rows: np.ndarray) -> list[tuple[str, float]]:
        return [(self._ids[int(i)], float(s)) for s, i in zip(scores, rows, strict=True) if i >= 0]

    # ------------------------------------------------------------------ search
    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        """Top-k (doc id, cosine) for one query; the query is encoded now, uncached."""
        idx = self._require_index()
        q = self.embedder.encode_queries([text])
        scores, rows = idx.search(np.ascontiguousarray(q, dtype=np.float32), min(int(k), idx.ntotal))
        return self._hits(scores[0], rows[0])

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Top-k (doc id, inner product) for each row of ``vectors``: queries already encoded by the caller (e.g.
        HyDE's mean of query and hypothetical-passage vectors), searched in the built index as given.

        Rows must be L2-normalised by the caller for the scores to be cosines; a 1-d vector is one query. One hit
        list per row, in row order; ``k`` is capped at the number of indexed documents. faiss runs with its
        current thread count (wrap in :func:`faiss_threads` for single-query timing).
        """
        idx = self._require_index()
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != idx.d:
            raise ConfigError(f"dense.search_vectors: expected vectors of shape (n, {idx.d}) for this index "
                              f"({self.params['model']}), got {tuple(np.shape(vectors))}; encode queries with the "
                              "same embedder the index was built with")
        if q.shape[0] == 0:
            return []
        scores, rows = idx.search(np.ascontiguousarray(q), min(int(k), idx.ntotal))
        return [self._hits(scores[j], rows[j]) for j in range(q.shape[0])]

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Each query alone (timed), faiss on one thread."""
        self._require_index()
        with faiss_threads(1):
            return super().search(queries, k)

    def search_batch(self, queries: Queries, k: int = 100) -> Run:
        """All queries at once: query vectors through the cache, one faiss call; no per-query latency."""
        idx = self._require_index()
        qids = list(queries)
        q = self.embeddings.encode(self.embedder, [queries[i] for i in qids], kind="query")
        scores, rows = idx.search(np.ascontiguousarray(q, dtype=np.float32), min(int(k), idx.ntotal))
        return Run({qid: dict(self._hits(scores[j], rows[j])) for j, qid in enumerate(qids)}, name=self.name)

    def describe(self) -> dict:
        """Params plus model identity, dim, prefixes and the faiss index type."""
        import faiss

        out = super().describe()
        emb = self.embedder
        out.update({"model": getattr(emb, "name", out.get("model")), "model_identity": emb.identity,
                    "model_path": weights_path(emb), "dim": emb.dim,
                    "query_prefix": getattr(emb, "query_prefix", None),
                    "passage_prefix": getattr(emb, "passage_prefix", None),
                    "max_seq_length": getattr(emb, "max_seq_length", None),
                    "backend": getattr(emb, "backend", None),
                    "inference_precision": getattr(emb, "inference_precision", None),
                    "index_type": "IndexHNSWFlat(IP)" if self._chosen() == "hnsw" else "IndexFlatIP",
                    "index_chosen": self._chosen(), "ann_threshold": ANN_THRESHOLD,
                    "faiss_version": faiss.__version__})
        if getattr(emb, "backend_fallback", None):  # the default backend could not run this model
            out["backend_fallback"] = emb.backend_fallback
        described = emb.describe() if callable(getattr(emb, "describe", None)) else {}
        for key in ("calibration_key", "calibration_passages", "int8_skipped"):  # static int8 (lab.models.int8)
            if key in described:
                out[key] = described[key]
        if self._chosen() != "hnsw":
            for p in ("M", "ef_search", "ef_construction"):
                out.pop(p, None)
        return out
