"""Knowledge-graph-enhanced retrieval ("kg"): an entity-chunk graph expanded from the query's entities, fused with
a base retriever (vector search by default).

Index
1. Entities of every chunk (``title + " " + text``) by an extractor of :mod:`lab.retrievers.entities`
   (param ``extractor``: "auto" (default: "jieba" when the corpus is Chinese, else "phrases"; ``Context.language``
   "en"/"zh" decides
   when set), "phrases", "jieba", "llm"). The cheap extractors' output is cached per text in :mod:`lab.core.cache`;
   LLM answers are cached by the LLM layer.
2. A networkx graph: a node ``("c", doc_id)`` per chunk, a node ``("e", key)`` per kept entity, an edge (weight 1)
   per chunk-entity mention. Entities in more chunks than the document-frequency cap are pruned (hubs such as
   "command" or "use" would otherwise carry PageRank everywhere): ``max_df`` < 1 is a share of the chunks, the cap
   being ``max(2, floor(max_df * n_chunks))``; ``max_df`` >= 1 is a count. ``min_df`` drops rarer entities.
   ``cooccurrence=True`` adds entity-entity edges (weight ``cooccurrence_weight``) between kept entities that
   share at least ``min_cooccurrence`` chunks.
3. The base retriever (param ``base``, default "dense", params ``base_params``) is built with
   :func:`lab.retrievers.base.build` and indexes the same chunks.

Query
1. Link: the query's entities (same extractor) that are graph entities, by exact key; with ``link="fuzzy"``, a
   query entity with no exact match also links to graph entities whose character-trigram Jaccard similarity is at
   least ``fuzzy_threshold`` (weight scaled by the similarity).
2. Expand (param ``expand``):
   - "ppr" (default): personalised PageRank over the graph, restarting at the linked entities (restart weight
     per entity: ``entity_weight`` "idf" = ``log(1 + n_chunks / df)``, or "uniform"); damping ``alpha`` (0.85);
     power iteration as networkx's ``pagerank`` (dangling nodes jump to the personalisation), stopped when the
     L1 change is below ``tol`` (1e-4) or after ``max_iter`` steps (30: on the 90 ord-qa queries the top 10
     chunks after 30 steps overlapped those of the converged vector (tol 1e-12) by 99.9%, the top 100 by 99.7%;
     after 10 steps by 95.6% and 95.5%). A chunk's score is its PageRank mass.
   - "hops": breadth-first from the linked entities; a chunk first reached after h chunk-to-chunk steps
     (h = 1: it mentions a linked entity) ranks above every chunk reached later; within a level the score is the
     summed weight of the linked entities it mentions (level 1) or of the entities it shares with the previous
     level (later levels). ``hops`` levels (default 2).
   The graph run keeps the ``depth`` best chunks with a score above 0.
3. Fuse: RRF (:func:`lab.retrievers.fusion.rrf`, ``rrf_k``) of the base run and the graph run, each searched to
   ``max(depth, k)``, with ``weights`` [base, graph] (default [1, 1]). A query with no linked entity gets the base
   run alone (counted in ``describe()["fallbacks"]``). ``base="none"``: the graph run alone (a query with no
   linked entity then gets nothing).

Latency: each query alone, as ``BaseRetriever.search`` (faiss and torch on one thread, as the dense strategy):
entity extraction, linking, graph expansion, base search and fusion; with the "llm" extractor an answer read
from the cache counts the seconds its generation took (``Completion.gen_seconds``), so reruns report the latency
a new query would see. Cost: ``usage()`` sums the extractor's LLM and the base's counters (cost convention of
:mod:`lab.retrievers.base`): chunk extraction is index-time cost, the query's extraction query-time cost.

``describe()``: the params, ``extractor`` (resolved name) and ``extractor_settings``, ``graph`` (nodes, edges,
entities, df_cap, pruned counts, the most frequent pruned keys), ``base_settings`` (the base's describe()),
``prompt_version`` and the LLM identity with the "llm" extractor, and after a search: ``queries``, ``fallbacks``,
``mean_query_entities``, ``mean_linked_entities``, ``mean_graph_ms`` (extraction + linking + expansion per query),
``index_seconds`` (base, extract, graph).
"""
from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from lab.core.cache import Cache
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Queries, Run
from lab.models.llm import LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.dense import faiss_threads, passage_text
from lab.retrievers.entities import PROMPT_VERSION, cached_extract, make_extractor
from lab.retrievers.fusion import rrf
from lab.retrievers.llmutil import llm_describe, llm_for
from lab.retrievers.params import COUNT, above, at_least, between, one_of
from lab.text.tokenize import detect_language

EXPANSIONS = ("ppr", "hops")
LINKS = ("exact", "fuzzy")
ENTITY_WEIGHTS = ("idf", "uniform")
CHUNK, ENTITY = "c", "e"


# --------------------------------------------------------------------------------------------- graph
def df_cap(max_df: float, n_chunks: int) -> int:
    """Largest document frequency an entity may have and stay in the graph (see the module docstring)."""
    if max_df <= 0:
        raise ConfigError(f"kg: max_df must be > 0 (a share < 1 or a count >= 1), got {max_df}")
    if max_df < 1:
        return max(2, math.floor(max_df * n_chunks))
    return int(max_df)


def build_graph(chunk_entities: Mapping[str, Sequence[str]], max_df: float = 0.05, min_df: int = 1,
                cooccurrence: bool = False, min_cooccurrence: int = 2, cooccurrence_weight: float = 1.0):
    """(networkx Graph, info) for chunk id -> entity keys; see the module docstring for nodes, edges and pruning.

    Every chunk is a node, even one left without entities. ``info``: n_chunks, df_cap, entities (kept),
    pruned_hubs (entities above the cap), pruned_rare (below ``min_df``), top_pruned (the 10 most frequent pruned
    keys), cooccurrence_edges.
    """
    import networkx as nx

    df = Counter(e for ents in chunk_entities.values() for e in set(ents))
    cap = df_cap(max_df, len(chunk_entities))
    keep = {e for e, n in df.items() if min_df <= n <= cap}
    g = nx.Graph()
    g.add_nodes_from(((CHUNK, c) for c in chunk_entities), kind="chunk")
    g.add_nodes_from(((ENTITY, e) for e in sorted(keep)), kind="entity")
    for c, ents in chunk_entities.items():
        g.add_edges_from((((CHUNK, c), (ENTITY, e)) for e in set(ents) if e in keep), weight=1.0)
    n_co = 0
    if cooccurrence:
        pairs: Counter = Counter()
        for ents in chunk_entities.values():
            # an entity in fewer than min_cooccurrence chunks cannot be in a pair that often: skip it early
            kept = sorted({e for e in ents if e in keep and df[e] >= min_cooccurrence})
            pairs.update((a, b) for i, a in enumerate(kept) for b in kept[i + 1:])
        for (a, b), n in pairs.items():
            if n >= min_cooccurrence:
                g.add_edge((ENTITY, a), (ENTITY, b), weight=float(cooccurrence_weight))
                n_co += 1
    hubs = sorted((e for e, n in df.items() if n > cap), key=lambda e: (-df[e], e))
    info = {"n_chunks": len(chunk_entities), "df_cap": cap, "entities": len(keep), "pruned_hubs": len(hubs),
            "pruned_rare": sum(1 for n in df.values() if n < min_df), "top_pruned": hubs[:10],
            "cooccurrence_edges": n_co}
    return g, info


class GraphIndex:
    """The graph in matrix form for fast expansion: node order, the row-stochastic transition matrix, degrees."""

    def __init__(self, graph):
        import networkx as nx

        self.graph = graph
        self.nodes = list(graph)
        self.pos = {n: i for i, n in enumerate(self.nodes)}
        a = nx.to_scipy_sparse_array(graph, nodelist=self.nodes, weight="weight", dtype=float, format="csr")
        s = np.asarray(a.sum(axis=1)).ravel()
        inv = np.divide(1.0, s, out=np.zeros_like(s), where=s != 0)
        self.transition = sp.csr_array(sp.diags(inv) @ a)  # row i: where a walker at node i steps next
        self.transition_t = sp.csr_array(self.transition.T)
        self.dangling = np.flatnonzero(s == 0)
        self.chunk_rows = np.array([i for i, n in enumerate(self.nodes) if n[0] == CHUNK], dtype=np.int64)
        self.chunk_ids = [self.nodes[i][1] for i in self.chunk_rows]
        self.entity_df = {n[1]: sum(1 for m in graph[n] if m[0] == CHUNK) for n in self.nodes if n[0] == ENTITY}

    def has_entity(self, key: str) -> bool:
        return (ENTITY, key) in self.pos


def personalized_pagerank(index: GraphIndex, personalization: Mapping[tuple, float], alpha: float = 0.85,
                          tol: float = 1e-4, max_iter: int = 200) -> np.ndarray:
    """PageRank vector (node order of ``index.nodes``) restarting at ``personalization`` (node -> weight, scaled
    to sum 1), as networkx's ``pagerank``: ``x <- alpha * (x P + sum(x[dangling]) v) + (1 - alpha) v``, starting
    from ``v``, until the L1 change is below ``tol`` (networkx stops at ``n_nodes * tol``), at most ``max_iter``
    steps (the last iterate is returned: it only ranks chunks)."""
    n = len(index.nodes)
    v = np.zeros(n)
    for node, w in personalization.items():
        v[index.pos[node]] += float(w)
    total = v.sum()
    if total <= 0:
        raise ConfigError("personalized_pagerank: the personalisation has no positive weight")
    v /= total
    x = v.copy()
    pt, dangling = index.transition_t, index.dangling
    restart = (1.0 - alpha) * v
    for _ in range(int(max_iter)):
        last = x
        x = alpha * (pt @ x) + restart
        if len(dangling):
            x += alpha * last[dangling].sum() * v
        if np.abs(x - last).sum() < tol:
            break
    return x


def hop_scores(index: GraphIndex, seeds: Mapping[str, float], hops: int = 2) -> dict[str, float]:
    """Chunk scores of the "hops" expansion (module docstring): ``(hops - level + 1) + activation / (1 + max
    activation of the level)`` so a closer level always ranks first. ``seeds``: entity key -> weight."""
    g = index.graph
    scores: dict[str, float] = {}
    frontier = {(ENTITY, e): w for e, w in seeds.items() if (ENTITY, e) in index.pos}
    seen_entities = set(frontier)
    for level in range(1, int(hops) + 1):
        act: dict[str, float] = defaultdict(float)
        for ent, w in frontier.items():
            for nb in g[ent]:
                if nb[0] == CHUNK and nb[1] not in scores:
                    act[nb[1]] += w
        if not act:
            break
        top = max(act.values())
        for c, a in act.items():
            scores[c] = (hops - level + 1) + a / (1.0 + top)
        nxt: dict[tuple, float] = defaultdict(float)
        for c in act:
            for nb in g[(CHUNK, c)]:
                if nb[0] == ENTITY and nb not in seen_entities:
                    nxt[nb] += 1.0
        seen_entities.update(nxt)
        frontier = nxt
    return scores


def trigrams(key: str) -> set[str]:
    """Character trigrams of `` key `` (padded with one space each side)."""
    s = f" {key} "
    return {s[i:i + 3] for i in range(len(s) - 2)}


# --------------------------------------------------------------------------------------------- strategy
@register("kg", rules={"extractor": one_of("auto", "phrases", "jieba", "llm"), "expand": one_of(*EXPANSIONS),
                       "alpha": between(0, 1, open_low=True, open_high=True), "tol": above(0), "max_iter": COUNT,
                       "hops": COUNT, "max_df": above(0),
                       "min_df": COUNT, "min_cooccurrence": COUNT, "cooccurrence_weight": at_least(0),
                       "link": one_of(*LINKS), "fuzzy_threshold": between(0, 1, open_low=True),
                       "entity_weight": one_of(*ENTITY_WEIGHTS),
                       "rrf_k": at_least(0), "depth": COUNT}, nested={"base_params": "base"})
class KGRetriever(BaseRetriever):
    """Entity-chunk graph + base retriever, fused per query; see the module docstring for params."""

    name = "kg"

    def __init__(self, ctx: Context | None = None, *, extractor: str = "auto", extractor_params: dict | None = None,  # noqa: PLR0913 - the strategy's registered params, keyword-only
                 base: str | None = "dense", base_params: dict | None = None, expand: str = "ppr",
                 alpha: float = 0.85, tol: float = 1e-4, max_iter: int = 30, hops: int = 2,
                 max_df: float = 0.05, min_df: int = 1, cooccurrence: bool = False, min_cooccurrence: int = 2,
                 cooccurrence_weight: float = 1.0, link: str = "exact", fuzzy_threshold: float = 0.8,
                 entity_weight: str = "idf", weights: tuple[float, float] = (1.0, 1.0), rrf_k: int = 60,
                 depth: int = 100, llm: LLMSpec = None, llm_fallback: str | None = None):
        if base in ("kg",):
            raise ConfigError("kg: base='kg' would nest the graph in itself; name a vector or lexical strategy")
        df_cap(float(max_df), 100)  # validates
        super().__init__(ctx, extractor=extractor, base=base or "none", expand=expand, alpha=float(alpha), tol=tol,
                         max_iter=int(max_iter), hops=int(hops), max_df=max_df, min_df=int(min_df),
                         cooccurrence=bool(cooccurrence), link=link, fuzzy_threshold=float(fuzzy_threshold),
                         entity_weight=entity_weight, rrf_k=int(rrf_k), depth=int(depth))
        self.extractor_name = extractor
        self.extractor_params = dict(extractor_params or {})
        self.llm_spec, self.llm_fallback = llm, llm_fallback
        self.weights = [float(w) for w in weights]
        self.cooccurrence_opts = {"min_cooccurrence": int(min_cooccurrence),
                                  "cooccurrence_weight": float(cooccurrence_weight)}
        self.base = None if base in (None, "none") else build(base, dict(base_params or {}), self.ctx)
        self.llm = None
        self.extractor = None
        self.graph = None
        self.graph_info: dict = {}
        self._index: GraphIndex | None = None
        self._trigram_index: dict[str, list[str]] | None = None
        self.index_seconds: dict[str, float] = {}
        self.stats = {"queries": 0, "linked_queries": 0, "fallbacks": 0, "linked_entities": 0,
                      "query_entities": 0, "graph_seconds": 0.0}

    # ------------------------------------------------------------------ parts
    def _resolve_extractor(self, corpus: Corpus, name: str) -> str:
        """The extractor ``name`` stands for ("auto": ctx.language when "en"/"zh", else the corpus's script)."""
        if name != "auto":
            return name
        lang = self.ctx.language
        if lang not in ("en", "zh"):
            sample = " ".join(d.text[:300] for d in list(corpus)[:200])
            lang = detect_language(sample)
        return "jieba" if lang == "zh" else "phrases"

    def _make_extractor(self, name: str, corpus: Corpus):
        if name != "llm":
            return make_extractor(name, cache_dir=self.ctx.cache_dir, options=self.extractor_params)

        self.llm = llm_for(self.ctx, self.llm_spec)
        fallback = self.llm_fallback or self._resolve_extractor(corpus, "auto")
        return make_extractor("llm", llm=self.llm, fallback=fallback, cache_dir=self.ctx.cache_dir,
                              options=self.extractor_params)

    # ------------------------------------------------------------------ index
    def index(self, corpus: Corpus) -> None:
        """Index the base, extract chunk entities (cached where slow), build the graph and its matrix."""
        if self.base is not None:
            t0 = time.perf_counter()
            self.base.index(corpus)
            self.index_seconds["base"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.extractor = self._make_extractor(self._resolve_extractor(corpus, self.extractor_name), corpus)
        texts = [passage_text(d.title, d.text) for d in corpus]
        cache = Cache(self.ctx.cache_dir) if getattr(self.extractor, "cacheable", False) else None
        ents = cached_extract(self.extractor, texts, cache, progress=self.ctx.progress,
                              desc=f"kg entities ({self.extractor.name})")
        self.index_seconds["extract"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        chunk_entities = dict(zip(corpus.ids, ents, strict=True))
        self.graph, self.graph_info = build_graph(chunk_entities, self.params["max_df"], self.params["min_df"],
                                                  self.params["cooccurrence"], **self.cooccurrence_opts)
        self._index = GraphIndex(self.graph)
        self._trigram_index = None
        self.index_seconds["graph"] = time.perf_counter() - t0

    def _require_index(self) -> GraphIndex:
        if self._index is None:
            raise ConfigError("kg: search before index(corpus); call index() first")
        return self._index

    # ------------------------------------------------------------------ query
    def _entity_weight(self, key: str) -> float:
        if self.params["entity_weight"] == "uniform":
            return 1.0
        idx = self._require_index()
        return math.log(1.0 + len(idx.chunk_ids) / max(1, idx.entity_df.get(key, 1)))

    def _fuzzy(self, key: str) -> list[tuple[str, float]]:
        """Graph entities whose trigram Jaccard similarity with ``key`` reaches ``fuzzy_threshold``."""
        idx = self._require_index()
        if self._trigram_index is None:
            inv: dict[str, list[str]] = defaultdict(list)
            for node in idx.nodes:
                if node[0] == ENTITY:
                    for t in trigrams(node[1]):
                        inv[t].append(node[1])
            self._trigram_index = dict(inv)
        q = trigrams(key)
        overlap: Counter = Counter()
        for t in q:
            overlap.update(self._trigram_index.get(t, ()))
        out = []
        for cand, n in overlap.items():
            sim = n / (len(q) + len(trigrams(cand)) - n)
            if sim >= self.params["fuzzy_threshold"]:
                out.append((cand, sim))
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))

    def link(self, text: str) -> dict[str, float]:
        """Linked graph entities of a query text: key -> restart weight (see the module docstring)."""
        idx = self._require_index()
        linked: dict[str, float] = {}
        query_entities = self.extractor.extract(text)
        self.stats["query_entities"] += len(query_entities)
        for key in query_entities:
            if idx.has_entity(key):
                linked[key] = max(linked.get(key, 0.0), self._entity_weight(key))
            elif self.params["link"] == "fuzzy":
                for cand, sim in self._fuzzy(key):
                    linked[cand] = max(linked.get(cand, 0.0), sim * self._entity_weight(cand))
        return linked

    def graph_scores(self, linked: Mapping[str, float]) -> dict[str, float]:
        """Chunk scores of the expansion from linked entities (key -> weight); only chunks scoring above 0."""
        idx = self._require_index()
        if not linked:
            return {}
        if self.params["expand"] == "hops":
            return hop_scores(idx, linked, self.params["hops"])
        x = personalized_pagerank(idx, {(ENTITY, e): w for e, w in linked.items()}, self.params["alpha"],
                                  self.params["tol"], self.params["max_iter"])
        mass = x[idx.chunk_rows]
        return {idx.chunk_ids[i]: float(mass[i]) for i in np.flatnonzero(mass > 0)}

    def _base_hits(self, text: str, depth: int) -> dict[str, float]:
        if self.base is None:
            return {}
        return dict(self.base.search_one(text, depth))

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        depth = max(self.params["depth"], k)
        self.stats["queries"] += 1
        t0 = time.perf_counter()
        linked = self.link(text)
        graph = self.graph_scores(linked)
        self.stats["graph_seconds"] += time.perf_counter() - t0
        base = self._base_hits(text, depth)
        if not linked:
            self.stats["fallbacks"] += 1
            return Run({"q": base}).ranked("q", k)
        self.stats["linked_queries"] += 1
        self.stats["linked_entities"] += len(linked)
        top = dict(Run({"q": graph}).ranked("q", depth))
        if self.base is None:
            return Run({"q": top}).ranked("q", k)
        fused = rrf([Run({"q": base}, name="base"), Run({"q": top}, name="graph")], k=self.params["rrf_k"],
                    weights=self.weights)
        return fused.ranked("q", k)

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Each query alone, timed (faiss and torch on one thread); an LLM answer read from the cache adds the
        seconds its generation took (see the module docstring)."""
        self._require_index()
        scores, latency = {}, {}
        with faiss_threads(1):
            for qid in progress(list(queries), desc=f"search {self.name}", enabled=self.ctx.progress):
                self.extractor.last_debt = 0.0
                t0 = time.perf_counter()
                hits = self.search_one(queries[qid], k)
                latency[qid] = time.perf_counter() - t0 + float(self.extractor.last_debt)
                scores[qid] = dict(hits)
        return Run(scores, name=self.name, latency=latency)

    # ------------------------------------------------------------------ reporting
    def usage(self) -> dict[str, float]:
        """LLM counters of the extractor's LLM and of the base (cost convention)."""
        return llm_usage(self.llm, self.base)

    def describe(self) -> dict:
        out = super().describe()
        out["weights"] = list(self.weights)
        out.update(self.cooccurrence_opts if self.params["cooccurrence"] else {})
        if self.params["expand"] == "ppr":
            out.pop("hops", None)
        else:
            for p in ("alpha", "tol", "max_iter"):
                out.pop(p, None)
        if self.params["link"] != "fuzzy":
            out.pop("fuzzy_threshold", None)
        if self.extractor is not None:
            out["extractor"] = self.extractor.name
            out["extractor_settings"] = self.extractor.describe()
        if self.extractor_name == "llm" or (self.extractor is not None and self.extractor.name == "llm"):
            out["prompt_version"] = PROMPT_VERSION
            if self.llm is not None:
                out.update(llm_describe(self.llm))
        if self.graph is not None:
            out["graph"] = {"nodes": self.graph.number_of_nodes(), "edges": self.graph.number_of_edges(),
                            **self.graph_info}
        out["base_settings"] = self.base.describe() if self.base is not None else None
        out["queries"] = self.stats["queries"]
        out["fallbacks"] = self.stats["fallbacks"]
        if self.stats["queries"]:
            out["mean_linked_entities"] = round(self.stats["linked_entities"] / self.stats["queries"], 3)
            out["mean_query_entities"] = round(self.stats["query_entities"] / self.stats["queries"], 3)
            out["mean_graph_ms"] = round(1000 * self.stats["graph_seconds"] / self.stats["queries"], 3)
        if self.index_seconds:
            out["index_seconds"] = {k: round(v, 3) for k, v in self.index_seconds.items()}
        return out
