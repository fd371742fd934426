"""RAPTOR (Sarthi et al., ICLR 2024): a tree of LLM summaries over the chunks, searched as one collapsed index.

Index time
1. Embed the chunks (the ``dense`` part's embedder, through :class:`lab.core.cache.EmbeddingCache`).
2. Cluster the nodes of the current level (``clustering``):
   - ``"gmm"`` (default, as the paper): Gaussian mixtures on the vectors reduced by PCA to ``reduce_dim``
     dimensions (the paper reduces with UMAP; PCA is deterministic, fast and needs no extra package), the number
     of components picked by BIC among 1..``max_clusters``, hard assignment (each node in exactly one cluster);
     global, then local: a cluster of more than ``max_cluster_size`` nodes (default ``2 * cluster_size``) is
     clustered again on its own, recursively (the paper reclusters clusters too long to summarise), and split by
     k-means into ``ceil(size / cluster_size)`` parts where BIC keeps it whole.
   - ``"kmeans"``: k-means with ``ceil(n / cluster_size)`` clusters (~``cluster_size`` nodes each).
   Both are seeded by ``ctx.seed``. A level must shrink: if clustering returns as many clusters as nodes, the
   level is cut to ``ceil(n / 2)`` k-means clusters.
3. Summarise each cluster with the LLM (:data:`SUMMARY_PROMPT`): the members' texts, each cut so that together
   they fit the context (:func:`fit_members`: the budget is shared equally, and what short members leave is
   given to the long ones; a prompt that still overflows is rebuilt with half the text, counted as ``refits``,
   see :func:`lab.retrievers.qna.map_fitted`). An unusable answer (see :func:`lab.retrievers.qna.parse_summary`)
   is replaced by the members' opening text and counted (``summaries_unusable``).
4. Embed the summaries and recurse on them, until a level has at most ``root_size`` nodes (default 5) or
   ``max_levels`` summary levels (default 3) are built.
The tree (:class:`Tree`: levels, members, summaries) is kept as ``self.tree`` and saved as JSON (``tree_path``,
default ``<cache_dir>/raptor/<key>.json``, key = hash of the chunks, the settings, the LLM and the embedder).

Search ("collapsed tree"): every node of every level sits in one faiss index (the ``dense`` part, built through
:func:`lab.retrievers.base.build`); a query scores all nodes (``depth``: None = all; a flat index computes every
score anyway). Summary hits are mapped to the leaf chunks they cover, for evaluation at chunk level:

    score(leaf) = max( cos(q, leaf),  max over levels l >= 1 of decay**l * cos(q, ancestor_l(leaf)) )
                  + TIE_EPS * cos(q, leaf)

Why this rule: a summary that matches the query stands for its chunks (RAPTOR hands the summary to the reader in
their place), so its chunks should rise, but a summary covers many chunks and is vaguer than any one of them, so
its evidence counts for less (``decay`` < 1, default 0.9, more discount per level up), and a chunk that matches
well on its own keeps its own score. Chunks lifted by the same summary tie; ``TIE_EPS`` (1e-6) times the chunk's
own similarity orders them by their own match instead of by id. ``decay=0`` gives plain dense retrieval over the
chunks (summaries ignored). The alternative "leaves inherit the summary's rank" was rejected: a level-2 hit would
put all of its ~cluster_size**2 chunks ahead of every better-matching chunk below it.

Cost: the LLM is paid at index time only (``usage()`` -> ``llm_index_*``); summaries come from the LLM's response
cache and vectors from the embedding cache on a rerun, so rebuilding the same tree generates and encodes nothing.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from lab.core.atomic import write_text_atomic
from lab.core.cache import content_key
from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries, Run
from lab.models.llm import LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.bm25 import top_k
from lab.retrievers.dense import faiss_threads, passage_text
from lab.retrievers.llmutil import llm_describe, llm_for
from lab.retrievers.params import COUNT, at_least, between, one_of
from lab.retrievers.qna import (
    CHARS_PER_TOKEN,
    DEFAULT_N_CTX,
    LOCAL_SUMMARY_GEN,
    fit_text,
    map_fitted,
    parse_summary,
    text_budget,
)

#: bump when the prompt or the way cluster texts are put together changes (logged in describe()).
PROMPT_VERSION = 1
SUMMARY_PROMPT = ("{text}\n\nWrite a summary of the passages above in a few sentences. Keep the names of commands, "
                  "options and terms they use.")
#: separator between members' texts inside one prompt.
MEMBER_SEP = "\n\n---\n\n"
CLUSTERINGS = ("gmm", "kmeans")
TIE_EPS = 1e-6
#: characters of each member's opening kept in the fallback text of an unusable summary.
FALLBACK_CHARS = 200


# ------------------------------------------------------------------------------------------------ the tree
@dataclass
class Node:
    """One node: a leaf (level 0, a chunk) or a summary (level >= 1) of the nodes in ``children``.
    ``leaves``: the chunk ids under it (a leaf lists itself); ``parent``: the node one level up, if any."""

    id: str
    level: int
    text: str
    children: list[str] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    parent: str | None = None
    llm_ok: bool = True


@dataclass
class Tree:
    """Levels of node ids (``levels[0]`` = the chunks) and the nodes by id."""

    levels: list[list[str]]
    nodes: dict[str, Node]

    def sizes(self) -> list[int]:
        """Nodes per level, leaves first."""
        return [len(level) for level in self.levels]

    def ancestors(self, node_id: str) -> list[str]:
        """The chain of parents of ``node_id``, nearest first."""
        out, parent = [], self.nodes[node_id].parent
        while parent is not None:
            out.append(parent)
            parent = self.nodes[parent].parent
        return out

    def to_dict(self) -> dict:
        return {"levels": self.levels, "nodes": [asdict(self.nodes[i]) for level in self.levels for i in level]}

    @classmethod
    def from_dict(cls, data: dict) -> Tree:
        return cls([list(level) for level in data["levels"]], {n["id"]: Node(**n) for n in data["nodes"]})

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """Write ``{"meta", "levels", "nodes"}`` as JSON (atomically: temp file, then rename)."""
        return write_text_atomic(path, json.dumps({"meta": meta or {}, **self.to_dict()}, ensure_ascii=False,
                                                  indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Tree:
        return cls.from_dict(json.loads(Path(path).read_text()))


# ------------------------------------------------------------------------------------------------ clustering
def kmeans_labels(vectors: np.ndarray, n_clusters: int, seed: int = 0) -> np.ndarray:
    """k-means labels (sklearn, ``n_init=4``, seeded); ``n_clusters`` is clipped to [1, n]."""
    from sklearn.cluster import KMeans

    n = len(vectors)
    k = max(1, min(int(n_clusters), n))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    return KMeans(n_clusters=k, n_init=4, random_state=int(seed)).fit_predict(np.asarray(vectors, np.float64))


def reduce(vectors: np.ndarray, dim: int, seed: int = 0) -> np.ndarray:
    """PCA to at most ``dim`` dimensions (and at most n - 1), seeded; unchanged when already that small."""
    from sklearn.decomposition import PCA

    x = np.asarray(vectors, dtype=np.float64)
    d = max(1, min(int(dim), x.shape[0] - 1, x.shape[1]))
    if d >= x.shape[1]:
        return x
    return PCA(n_components=d, random_state=int(seed)).fit_transform(x)


def gmm_labels(vectors: np.ndarray, max_clusters: int = 50, reduce_dim: int = 10, seed: int = 0,
               patience: int = 5) -> tuple[np.ndarray, list[float]]:
    """Hard labels of the Gaussian mixture whose number of components (1..``max_clusters``, at most n - 1) has
    the lowest BIC, on PCA-reduced vectors; also the BIC of each count tried (index 0 = 1 component). Counts
    are tried in increasing order and the search stops after ``patience`` counts without a lower BIC (BIC is
    U-shaped in the count here; this cut the search ~5x on ord-qa without changing the choice)."""
    from sklearn.mixture import GaussianMixture

    n = len(vectors)
    if n <= 2:
        return np.zeros(n, dtype=np.int64), []

    x = reduce(vectors, reduce_dim, seed)
    bics, best, best_bic, best_k = [], None, math.inf, 0
    for k in range(1, max(1, min(int(max_clusters), n - 1)) + 1):
        with threadpool_limits(1):
            gm = GaussianMixture(n_components=k, covariance_type="full", reg_covar=1e-4,
                                 random_state=int(seed)).fit(x)
        bic = float(gm.bic(x))
        bics.append(bic)
        if bic < best_bic:
            best, best_bic, best_k = gm, bic, k
        elif k - best_k >= patience:
            break
    return best.predict(x).astype(np.int64), bics


def gmm_recursive(vectors: np.ndarray, max_size: int, target: int, max_clusters: int = 50, reduce_dim: int = 10,
                  seed: int = 0) -> np.ndarray:
    """Global-then-local Gaussian-mixture clustering (the paper's scheme, with PCA for UMAP): BIC-chosen clusters
    of all vectors; any cluster of more than ``max_size`` members is clustered again on its own (PCA refitted on
    it, BIC again), recursively; where BIC keeps a too-large cluster whole, k-means splits it into
    ``ceil(size / target)`` parts. Labels renumbered 0..m-1 in order of first appearance."""
    vectors = np.asarray(vectors)
    labels = np.zeros(len(vectors), dtype=np.int64)
    next_label = 0
    todo = [np.arange(len(vectors))]
    while todo:
        idx = todo.pop()
        if len(idx) <= max_size:
            labels[idx] = next_label
            next_label += 1
            continue
        sub, _ = gmm_labels(vectors[idx], max_clusters, reduce_dim, seed)
        if sub.max() == 0:  # BIC keeps it whole: split by size
            sub = kmeans_labels(vectors[idx], math.ceil(len(idx) / target), seed)
            for s in np.unique(sub):
                labels[idx[sub == s]] = next_label
                next_label += 1
            continue
        todo.extend(idx[sub == s] for s in np.unique(sub)[::-1])
    return renumber(labels)


def renumber(labels: Sequence[int]) -> np.ndarray:
    """Labels mapped to 0..m-1 in order of first appearance (so cluster order follows node order)."""
    seen: dict[int, int] = {}
    return np.array([seen.setdefault(int(x), len(seen)) for x in labels], dtype=np.int64)


def cluster(vectors: np.ndarray, method: str = "gmm", cluster_size: int = 8, max_cluster_size: int | None = None,
            max_clusters: int = 50, reduce_dim: int = 10, seed: int = 0) -> np.ndarray:
    """Cluster labels (0..m-1, by first appearance) of one level's vectors; see the module docstring. The
    result always has fewer clusters than nodes when there are at least two nodes."""
    n = len(vectors)
    if method not in CLUSTERINGS:
        raise ConfigError(f"raptor: clustering must be one of {', '.join(CLUSTERINGS)}, not {method!r}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    with threadpool_limits(1):  # small problems: thread start-up and spinning cost more than they save
        return _cluster(np.asarray(vectors), method, cluster_size, max_cluster_size, max_clusters, reduce_dim, seed)


def _cluster(vectors, method, cluster_size, max_cluster_size, max_clusters, reduce_dim, seed) -> np.ndarray:
    n = len(vectors)
    if method == "kmeans":
        labels = kmeans_labels(vectors, math.ceil(n / cluster_size), seed)
    else:
        labels = gmm_recursive(vectors, max_cluster_size or 2 * cluster_size, cluster_size, max_clusters, reduce_dim,
                               seed)
    labels = renumber(labels)
    if n >= 2 and labels.max() + 1 >= n:
        labels = renumber(kmeans_labels(vectors, math.ceil(n / 2), seed))
    return labels


# ------------------------------------------------------------------------------------------------ text
def fit_members(texts: Sequence[str], budget_chars: int) -> list[str]:
    """Each text cut so that together they take at most ``budget_chars`` characters: an equal share each, and
    what short texts leave unused goes to the longer ones (water-filling). Cuts are at a word boundary when
    one lies in the last fifth of the share."""

    lengths = [len(t) for t in texts]
    if sum(lengths) <= budget_chars:
        return list(texts)
    cap, left, remaining = 0, float(budget_chars), sorted(lengths)
    # the largest cap such that sum(min(len, cap)) <= budget
    for i, length in enumerate(remaining):
        share = left / (len(remaining) - i)
        if length <= share:
            left -= length
            continue
        cap = int(share)
        break
    return [fit_text(t, cap, chars_per_token=1.0) if len(t) > cap else t for t in texts]


def fallback_text(texts: Sequence[str], chars: int = FALLBACK_CHARS) -> str:
    """What stands for an unusable summary: the opening ``chars`` characters of each member, joined."""

    return " ".join(fit_text(" ".join(t.split()), chars, chars_per_token=1.0) for t in texts)


# ------------------------------------------------------------------------------------------------ tree building
def summary_id(level: int, index: int, taken: set[str]) -> str:
    """``raptor:L<level>:<index>``, with "~" added until it names no chunk."""
    sid = f"raptor:L{level}:{index}"
    while sid in taken:
        sid = "~" + sid
    return sid


def build_tree(leaf_ids: Sequence[str], leaf_texts: Sequence[str], leaf_vectors: np.ndarray,
               embed: Callable[[list[str]], np.ndarray],
               summarize: Callable[[list[list[str]], int], list[str | None]], *, clustering: str = "gmm",
               cluster_size: int = 8, max_cluster_size: int | None = None, max_clusters: int = 50,
               reduce_dim: int = 10, root_size: int = 5, max_levels: int = 3, seed: int = 0) -> Tree:
    """The RAPTOR tree over the leaves.

    ``embed(texts) -> vectors`` embeds summaries; ``summarize(clusters, level) -> texts`` writes one summary per
    cluster (a list of member texts; None = unusable, replaced by :func:`fallback_text` and marked
    ``llm_ok=False``). Levels are built while the top level has more than ``root_size`` nodes and fewer than
    ``max_levels`` summary levels exist; each level has fewer nodes than the one below.
    """
    if len(leaf_ids) != len(leaf_texts) or len(leaf_ids) != len(leaf_vectors):
        raise ValueError(f"build_tree: {len(leaf_ids)} ids, {len(leaf_texts)} texts, {len(leaf_vectors)} vectors")
    nodes = {i: Node(i, 0, t, [], [i]) for i, t in zip(leaf_ids, leaf_texts, strict=True)}
    levels = [list(leaf_ids)]
    taken = set(leaf_ids)
    current, vectors = list(leaf_ids), np.asarray(leaf_vectors, dtype=np.float32)
    level = 0
    while len(current) > root_size and level < max_levels:
        labels = cluster(vectors, clustering, cluster_size, max_cluster_size, max_clusters, reduce_dim, seed)
        groups = [[current[i] for i in np.flatnonzero(labels == c)] for c in range(int(labels.max()) + 1)]
        if len(groups) >= len(current):  # cannot happen for n >= 2 (cluster() guarantees a shrink); be safe
            break
        level += 1
        member_texts = [[nodes[m].text for m in g] for g in groups]
        summaries = summarize(member_texts, level)
        ids = []
        for j, (g, texts, s) in enumerate(zip(groups, member_texts, summaries, strict=True)):
            sid = summary_id(level, j, taken)
            taken.add(sid)
            node = Node(sid, level, s if s else fallback_text(texts), list(g),
                        [leaf for m in g for leaf in nodes[m].leaves], None, bool(s))
            for m in g:
                nodes[m].parent = sid
            nodes[sid] = node
            ids.append(sid)
        levels.append(ids)
        current = ids
        vectors = np.asarray(embed([nodes[i].text for i in ids]), dtype=np.float32)
    return Tree(levels, nodes)


# ------------------------------------------------------------------------------------------------ scoring
def ancestor_table(tree: Tree, node_pos: dict[str, int]) -> np.ndarray:
    """``table[l - 1, i]`` = position (in ``node_pos``) of leaf i's level-l ancestor, for l = 1..top level;
    -1 where a leaf has no ancestor at that level."""
    leaves = tree.levels[0]
    table = np.full((max(0, len(tree.levels) - 1), len(leaves)), -1, dtype=np.int64)
    for i, leaf in enumerate(leaves):
        for anc in tree.ancestors(leaf):
            table[tree.nodes[anc].level - 1, i] = node_pos[anc]
    return table


def leaf_scores(own: np.ndarray, node_scores: np.ndarray, ancestors: np.ndarray, decay: float) -> np.ndarray:
    """Collapsed-tree scores mapped to the leaves (see the module docstring): ``max(own, decay**l * score of the
    level-l ancestor) + TIE_EPS * own``. ``own``: leaves' scores; ``node_scores``: scores of all nodes by
    position (-inf for nodes not retrieved); ``ancestors``: :func:`ancestor_table`. ``decay=0``: ancestors are
    ignored (plain ranking by the leaves' own scores)."""
    own = np.asarray(own, dtype=np.float64)
    best = own.copy()
    for lvl in range(ancestors.shape[0] if decay > 0 else 0):
        pos = ancestors[lvl]
        has = pos >= 0
        if not has.any():
            continue
        lifted = np.full(len(own), -np.inf)
        lifted[has] = (decay ** (lvl + 1)) * node_scores[pos[has]]
        best = np.maximum(best, lifted)
    return best + TIE_EPS * np.where(np.isfinite(own), own, 0.0)


# ------------------------------------------------------------------------------------------------ strategy
@register("raptor", rules={"clustering": one_of(*CLUSTERINGS), "cluster_size": at_least(2), "max_cluster_size": COUNT,
                           "max_clusters": COUNT, "reduce_dim": COUNT, "root_size": COUNT, "max_levels": COUNT,
                           "decay": between(0, 1), "depth": COUNT, "n_ctx": COUNT, "summary_max_tokens": COUNT,
                           "concurrency": COUNT}, nested={"dense_params": "dense"})
class RaptorRetriever(BaseRetriever):
    """RAPTOR over the chunks; see the module docstring. Params: clustering, cluster_size, max_cluster_size,
    max_clusters, reduce_dim, root_size, max_levels, decay, depth, llm, n_ctx, summary_max_tokens, summary_gen,
    dense_params (the embedder and index: any ``dense`` param), tree_path, concurrency."""

    name = "raptor"

    def __init__(self, ctx: Context | None = None, *, clustering: str = "gmm", cluster_size: int = 8,  # noqa: PLR0913 - the strategy's registered params, keyword-only
                 max_cluster_size: int | None = None, max_clusters: int = 50, reduce_dim: int = 10,
                 root_size: int = 5, max_levels: int = 3, decay: float = 0.9, depth: int | None = None,
                 llm: LLMSpec = None, n_ctx: int | None = None, summary_max_tokens: int = 150,
                 summary_gen: dict | None = None,
                 dense_params: dict | None = None, tree_path: str | None = None, concurrency: int | None = None):
        super().__init__(ctx, clustering=clustering, cluster_size=int(cluster_size), max_cluster_size=max_cluster_size,
                         max_clusters=int(max_clusters), reduce_dim=int(reduce_dim), root_size=int(root_size),
                         max_levels=int(max_levels), decay=float(decay), depth=depth,
                         summary_max_tokens=int(summary_max_tokens))
        self.decay = float(decay)
        self.depth = None if depth is None else int(depth)
        self.dense = build("dense", dict(dense_params or {}), self.ctx)
        self.llm = llm_for(self.ctx, llm)
        self.n_ctx = int(n_ctx if n_ctx is not None else getattr(self.llm, "n_ctx", DEFAULT_N_CTX))
        self.summary_max_tokens = int(summary_max_tokens)
        if summary_gen is None:
            summary_gen = LOCAL_SUMMARY_GEN if getattr(self.llm, "backend", "") == "gguf" else {}
        self.summary_gen = dict(summary_gen)
        self.tree_path_param = tree_path
        self.concurrency = concurrency
        self.tree: Tree | None = None
        self.tree_path: Path | None = None
        self.stats: dict = {}
        self._node_pos: dict[str, int] = {}
        self._leaf_pos = np.zeros(0, dtype=np.int64)
        self._ancestors = np.zeros((0, 0), dtype=np.int64)
        self._leaf_id_rank = np.zeros(0, dtype=np.int64)
        self._refits = 0

    # -------------------------------------------------------------------------------------- index
    def _embed(self, texts: list[str]) -> np.ndarray:
        return self.dense.embeddings.encode(self.dense.embedder, texts, kind="passage")

    def _summarize(self, clusters: list[list[str]], level: int) -> list[str | None]:
        budget = int(text_budget(self.n_ctx, self.summary_max_tokens) * CHARS_PER_TOKEN)

        def make_prompt(i: int, scale: float) -> str:
            texts = clusters[i]
            room = int(budget * scale) - len(MEMBER_SEP) * max(0, len(texts) - 1)
            return SUMMARY_PROMPT.format(text=MEMBER_SEP.join(fit_members(texts, max(len(texts), room))))

        answers, refits = map_fitted(self.llm, make_prompt, len(clusters), concurrency=self.concurrency,
                                     progress=self.ctx.progress,
                                     desc=f"raptor: summaries of {len(clusters)} clusters, level {level}",
                                     max_tokens=self.summary_max_tokens, **self.summary_gen)
        self._refits += refits
        return [parse_summary(a.text) for a in answers]

    def _settings(self) -> dict:
        p = self.params
        return {"prompt_version": PROMPT_VERSION, "llm": self.llm.identity, "n_ctx": self.n_ctx,
                "summary_max_tokens": self.summary_max_tokens, "summary_gen": self.summary_gen,
                "embedder": self.dense.embedder.cache_identity("passage"), "seed": self.ctx.seed,
                **{k: p[k] for k in ("clustering", "cluster_size", "max_cluster_size", "max_clusters", "reduce_dim",
                                     "root_size", "max_levels")}}

    def index(self, corpus: Corpus) -> None:
        """Build the tree (LLM and embeddings through their caches), save it, index every node in one faiss index."""
        ids = corpus.ids
        texts = [passage_text(d.title, d.text) for d in corpus]
        t0 = time.perf_counter()
        vectors = self._embed(texts)
        p = self.params
        self._refits = 0
        self.tree = build_tree(ids, texts, vectors, self._embed, self._summarize, clustering=p["clustering"],
                               cluster_size=p["cluster_size"], max_cluster_size=p["max_cluster_size"],
                               max_clusters=p["max_clusters"], reduce_dim=p["reduce_dim"], root_size=p["root_size"],
                               max_levels=p["max_levels"], seed=self.ctx.seed)
        settings = self._settings()
        digest = content_key("raptor:tree", json.dumps(settings, sort_keys=True),
                             "\0".join(f"{i}\0{t}" for i, t in zip(ids, texts, strict=True)))
        summaries = [self.tree.nodes[i] for level in self.tree.levels[1:] for i in level]
        self.stats = {"levels": self.tree.sizes(), "summaries": len(summaries),
                      "summaries_unusable": sum(not n.llm_ok for n in summaries), "refits": self._refits,
                      "build_seconds": round(time.perf_counter() - t0, 3)}
        self.tree_path = Path(self.tree_path_param) if self.tree_path_param else (
            Path(self.ctx.cache_dir) / "raptor" / f"{digest[:16]}.json")
        self.tree.save(self.tree_path, meta={**settings, "stats": self.stats, "corpus": corpus.name})

        node_ids = [i for level in self.tree.levels for i in level]
        docs = {d.id: d for d in corpus}
        nodes = Corpus({i: docs[i] if i in docs else Document(i, self.tree.nodes[i].text) for i in node_ids},
                       name=f"{corpus.name}:raptor")
        self.dense.index(nodes)
        self._node_pos = {i: j for j, i in enumerate(node_ids)}
        self._leaf_pos = np.array([self._node_pos[i] for i in self.tree.levels[0]], dtype=np.int64)
        self._ancestors = ancestor_table(self.tree, self._node_pos)
        leaves = self.tree.levels[0]
        self._leaf_id_rank = np.empty(len(leaves), dtype=np.int64)
        self._leaf_id_rank[np.argsort(np.array(leaves, dtype=object))] = np.arange(len(leaves))

    # -------------------------------------------------------------------------------------- search
    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        """Top-k chunks: the query scores the collapsed tree (the dense part encodes it now), summaries map to
        their leaves by :func:`leaf_scores`."""
        if self.tree is None:
            raise ConfigError("raptor: search before index(corpus); call index() first")
        n = len(self._node_pos)
        hits = self.dense.search_one(text, n if self.depth is None else min(self.depth, n))
        node_scores = np.full(n, -np.inf)
        for node_id, score in hits:
            node_scores[self._node_pos[node_id]] = score
        scores = leaf_scores(node_scores[self._leaf_pos], node_scores, self._ancestors, self.decay)
        cand = np.flatnonzero(np.isfinite(scores))
        rows, top = top_k(cand, scores[cand], self._leaf_id_rank, int(k))
        leaves = self.tree.levels[0]
        return [(leaves[i], float(s)) for i, s in zip(rows, top, strict=True)]

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Each query alone (timed), faiss and the query encoder on one thread (as ``dense``)."""
        with faiss_threads(1):
            return super().search(queries, k)

    # -------------------------------------------------------------------------------------- reporting
    def usage(self) -> dict[str, float]:
        """The LLM's cumulative counters (index time only: searching calls no LLM)."""
        return llm_usage(self.llm)

    def describe(self) -> dict:
        """Params, prompt version, the LLM's identity, the dense part's describe(), the tree's shape and path."""
        out = super().describe()
        out.update({"prompt_version": PROMPT_VERSION, **llm_describe(self.llm), "n_ctx": self.n_ctx,
                    "summary_gen": dict(self.summary_gen), "chars_per_token": CHARS_PER_TOKEN,
                    "tie_eps": TIE_EPS, "dense": self.dense.describe()})
        if self.tree is not None:
            out.update({"tree": dict(self.stats), "tree_path": str(self.tree_path)})
        return out
