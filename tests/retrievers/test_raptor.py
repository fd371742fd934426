"""lab.retrievers.raptor: clustering, fitting cluster texts to the context, tree building (levels shrink, every node
in exactly one cluster per level, the root-size rule), mapping collapsed-tree scores to leaves (exact ranks), and
the strategy end to end with a handful of real SmolLM2 calls."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.retrievers.base import Context, build
from lab.retrievers.raptor import (
    PROMPT_VERSION,
    TIE_EPS,
    Node,
    Tree,
    ancestor_table,
    build_tree,
    cluster,
    fallback_text,
    fit_members,
    gmm_labels,
    leaf_scores,
    renumber,
    summary_id,
)


def blobs(sizes=(12, 9, 15), dim=16, seed=0) -> np.ndarray:
    """Well-separated Gaussian blobs (one per size), rows in blob order."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), dim)) * 10
    return np.vstack([c + rng.normal(scale=0.3, size=(n, dim))
                      for c, n in zip(centres, sizes, strict=False)]).astype(np.float32)


# ------------------------------------------------------------------------------------------------ clustering
def test_gmm_bic_finds_the_blobs():
    x = blobs(dim=4)
    labels, bics = gmm_labels(x, max_clusters=10, reduce_dim=10, seed=0)
    assert labels.max() + 1 == 3 and int(np.argmin(bics)) + 1 == 3
    assert len(bics) < 10  # the search stopped early once BIC rose
    # hard assignment that follows the blobs exactly
    assert [len(set(labels[s:e])) for s, e in ((0, 12), (12, 21), (21, 36))] == [1, 1, 1]


def test_kmeans_size_rule_and_every_node_in_one_cluster():
    x = blobs((20, 20, 20))
    labels = cluster(x, "kmeans", cluster_size=8, seed=0)
    assert labels.shape == (60,) and labels.max() + 1 == math.ceil(60 / 8)
    assert labels[0] == 0 and sorted(set(labels.tolist())) == list(range(8))  # renumbered by first appearance


def test_gmm_reclusters_large_clusters_locally():
    x = blobs((30, 25, 5))
    labels = cluster(x, "gmm", cluster_size=8, seed=0)
    sizes = np.bincount(labels)
    assert labels.max() + 1 > 3  # the two big blobs were split further
    assert sizes.sum() == 60
    # no cluster mixes blobs: splitting happens inside a global cluster
    for c in range(labels.max() + 1):
        members = np.flatnonzero(labels == c)
        assert len({0 if i < 30 else 1 if i < 55 else 2 for i in members}) == 1


def test_clustering_is_seeded_and_always_shrinks():
    x = blobs((10, 10, 10), seed=3)
    assert (cluster(x, "gmm", seed=1) == cluster(x, "gmm", seed=1)).all()
    for n in (2, 3, 4):
        for method in ("gmm", "kmeans"):
            labels = cluster(x[:n], method, cluster_size=2, seed=0)
            assert labels.max() + 1 < n
    with pytest.raises(ConfigError, match="clustering must be one of"):
        cluster(x, "umap")


def test_renumber():
    assert renumber([5, 5, 2, 7, 2]).tolist() == [0, 0, 1, 2, 1]


# ------------------------------------------------------------------------------------------------ texts
def test_fit_members_water_filling():
    texts = ["a" * 50, "b " * 300, "c " * 300]
    out = fit_members(texts, 650)
    assert out[0] == texts[0]  # short: kept whole
    assert sum(map(len, out)) <= 650 and all(texts[i].startswith(out[i]) for i in range(3))
    assert len(out[1]) >= 290 and len(out[2]) >= 290  # the 600 left shared between the long ones
    assert fit_members(["x", "y"], 10) == ["x", "y"]


def test_fallback_text_and_summary_ids():
    assert fallback_text(["one  two\nthree", "four " * 100], chars=20) == "one two three four four four four"
    assert summary_id(1, 3, {"a"}) == "raptor:L1:3"
    assert summary_id(1, 3, {"raptor:L1:3"}) == "~raptor:L1:3"


# ------------------------------------------------------------------------------------------------ tree
def first_sentences(clusters, level):
    """An extractive summariser (deterministic): the first 8 words of each member, joined."""
    return [" ".join(" ".join(t.split()[:8]) for t in texts) for texts in clusters]


@pytest.fixture(scope="module")
def ordqa_leaves(tmp_path_factory):
    """The first 24 ord-qa chunks embedded by the packaged MiniLM (through the embedding cache)."""
    from lab.data.beir import load_dataset
    from lab.retrievers.dense import passage_text

    ds = load_dataset("data/ord-qa", progress=False)
    ids = ds.corpus.ids[:24]
    texts = [passage_text(ds.corpus[i].title, ds.corpus[i].text) for i in ids]
    dense = build("dense", {}, Context(cache_dir=tmp_path_factory.mktemp("emb"), progress=False))
    def embed(t):
        return dense.embeddings.encode(dense.embedder, t, kind="passage")

    return ids, texts, embed(texts), embed


def check_tree(tree: Tree, leaf_ids, root_size, max_levels):
    sizes = tree.sizes()
    assert sizes[0] == len(leaf_ids) and all(a > b for a, b in itertools.pairwise(sizes))  # levels shrink
    assert sizes[-1] <= root_size or len(sizes) - 1 == max_levels  # root rule
    for level in range(1, len(tree.levels)):
        below = tree.levels[level - 1]
        children = [c for s in tree.levels[level] for c in tree.nodes[s].children]
        assert sorted(children) == sorted(below)  # every node of the level below in exactly one cluster
        for s in tree.levels[level]:
            node = tree.nodes[s]
            assert node.level == level and all(tree.nodes[c].parent == s for c in node.children)
        assert sorted(leaf for s in tree.levels[level] for leaf in tree.nodes[s].leaves) == sorted(leaf_ids)


@pytest.mark.parametrize("method", ["kmeans", "gmm"])
def test_build_tree_structure(ordqa_leaves, method):
    ids, texts, vectors, embed = ordqa_leaves
    tree = build_tree(ids, texts, vectors, embed, first_sentences, clustering=method, cluster_size=4, root_size=3,
                      max_levels=3, seed=0)
    check_tree(tree, ids, 3, 3)
    assert len(tree.levels) >= 2
    again = build_tree(ids, texts, vectors, embed, first_sentences, clustering=method, cluster_size=4, root_size=3,
                       max_levels=3, seed=0)
    assert again.to_dict() == tree.to_dict()  # deterministic


def test_build_tree_level_cap_root_rule_and_unusable_summaries(ordqa_leaves):
    ids, texts, vectors, embed = ordqa_leaves
    tree = build_tree(ids, texts, vectors, embed, first_sentences, clustering="kmeans", cluster_size=3,
                      root_size=1, max_levels=1, seed=0)
    assert len(tree.levels) == 2 and tree.sizes()[1] == math.ceil(24 / 3)  # stopped by max_levels
    tree = build_tree(ids, texts, vectors, embed, first_sentences, clustering="kmeans", root_size=24, seed=0)
    assert tree.sizes() == [24]  # already at most root_size: no summary level
    def none(clusters, level):
        return [None] * len(clusters)

    tree = build_tree(ids[:9], texts[:9], vectors[:9], embed, none, clustering="kmeans", cluster_size=3,
                      root_size=3, seed=0)
    check_tree(tree, ids[:9], 3, 3)
    top = [tree.nodes[s] for s in tree.levels[1]]
    assert all(not n.llm_ok and n.text == fallback_text([tree.nodes[c].text for c in n.children]) for n in top)


def test_tree_save_and_load(tmp_path, ordqa_leaves):
    ids, texts, vectors, embed = ordqa_leaves
    tree = build_tree(ids[:12], texts[:12], vectors[:12], embed, first_sentences, clustering="kmeans",
                      cluster_size=4, root_size=2, seed=0)
    path = tree.save(tmp_path / "t" / "tree.json", meta={"k": 1})
    assert Tree.load(path).to_dict() == tree.to_dict()


# ------------------------------------------------------------------------------------------------ scoring
def small_tree() -> tuple[Tree, dict[str, int]]:
    """Leaves a, b, c, d; level 1: S1 = {a, b}, S2 = {c, d}; level 2: R = {S1, S2}."""
    nodes = {i: Node(i, 0, i, [], [i], p) for i, p in (("a", "S1"), ("b", "S1"), ("c", "S2"), ("d", "S2"))}
    nodes["S1"] = Node("S1", 1, "s1", ["a", "b"], ["a", "b"], "R")
    nodes["S2"] = Node("S2", 1, "s2", ["c", "d"], ["c", "d"], "R")
    nodes["R"] = Node("R", 2, "r", ["S1", "S2"], ["a", "b", "c", "d"], None)
    tree = Tree([["a", "b", "c", "d"], ["S1", "S2"], ["R"]], nodes)
    return tree, {n: i for i, n in enumerate(["a", "b", "c", "d", "S1", "S2", "R"])}


def ranked(tree, pos, node_scores, decay):
    table = ancestor_table(tree, pos)
    leaves = tree.levels[0]
    s = leaf_scores(node_scores[[pos[x] for x in leaves]], node_scores, table, decay)
    return [leaves[i] for i in np.lexsort((-np.arange(4), -s))], s


def test_ancestor_table():
    tree, pos = small_tree()
    assert ancestor_table(tree, pos).tolist() == [[4, 4, 5, 5], [6, 6, 6, 6]]
    assert tree.ancestors("c") == ["S2", "R"]


def test_leaf_scores_exact_ranks():
    tree, pos = small_tree()
    #                  a    b    c    d    S1   S2   R
    scores = np.array([.5, .2, .4, .3, .3, .9, .1])
    order, s = ranked(tree, pos, scores, 0.9)
    # c, d lifted by S2 to 0.81 (ordered by their own score); a keeps its own 0.5; b lifted by S1 to 0.27
    assert order == ["c", "d", "a", "b"]
    assert s == pytest.approx([.5 + TIE_EPS * .5, .27 + TIE_EPS * .2, .81 + TIE_EPS * .4, .81 + TIE_EPS * .3])
    # decay 0: summaries ignored, plain ranking by the leaves' own scores
    assert ranked(tree, pos, scores, 0.0)[0] == ["a", "c", "d", "b"]
    # a strong root lifts everything, decayed twice: 0.81 * 0.95 beats every own score
    scores[6] = 0.95
    assert ranked(tree, pos, scores, 0.9)[0] == ["c", "d", "a", "b"]
    # a leaf not retrieved (-inf) is still placed through a retrieved ancestor
    scores = np.array([-np.inf, .2, .4, .3, .6, -np.inf, -np.inf])
    order, s = ranked(tree, pos, scores, 0.5)
    assert order == ["c", "d", "b", "a"] and s[0] == 0.5 * 0.6


# ------------------------------------------------------------------------------------------------ end to end
def test_bad_params(tmp_path):
    ctx = Context(cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="clustering='umap' is not valid; clustering takes one of 'gmm', 'kmeans'"):
        build("raptor", {"clustering": "umap"}, ctx)
    with pytest.raises(ConfigError, match="decay"):
        build("raptor", {"decay": 1.5}, ctx)
    with pytest.raises(ConfigError, match="cluster_size"):
        build("raptor", {"cluster_size": 1}, ctx)


def test_raptor_end_to_end_with_smollm2_then_all_from_cache(tmp_path):
    from builders import ordqa_subset

    from lab.experiment.run import run_experiment

    ds = ordqa_subset(n_extra=3)  # 9 chunks
    params = {"clustering": "kmeans", "cluster_size": 3, "root_size": 2, "summary_max_tokens": 32}
    first = run_experiment(ds, "raptor", params, ctx=Context(cache_dir=tmp_path, progress=False), max_queries=3)
    info = first.info["retriever"]
    levels = info["tree"]["levels"]
    assert levels == [9, 3, 1]  # ceil(9 / 3) clusters, then 3 > root_size: ceil(3 / 3) = 1 cluster
    n_summaries = sum(levels[1:])
    assert first.cost["llm_index_calls"] == n_summaries == first.cost["llm_index_generated"]
    assert first.cost["llm_index_tokens"] > 0 and first.cost["llm_query_calls"] == 0
    assert info["prompt_version"] == PROMPT_VERSION and info["llm"].startswith("gguf:SmolLM2")
    assert info["dense"]["model"] and info["tree"]["summaries"] == n_summaries
    saved = Tree.load(info["tree_path"])
    check_tree(saved, ds.corpus.ids, 2, 3)
    for qid in first.run:  # hits are chunks, never summary nodes
        assert set(first.run[qid]) <= set(ds.corpus.ids) and len(first.run[qid]) == 9

    again = run_experiment(ds, "raptor", params, ctx=Context(cache_dir=tmp_path, progress=False), max_queries=3)
    assert again.cost["llm_index_calls"] == n_summaries == again.cost["llm_index_cache_hits"]
    assert again.cost["llm_index_generated"] == 0 and again.run.scores == first.run.scores
    assert Tree.load(again.info["retriever"]["tree_path"]).to_dict() == saved.to_dict()

    # decay 0: the summaries (in the index, read from the LLM cache) are ignored: plain dense over the chunks
    ctx = Context(cache_dir=tmp_path, progress=False)
    flat = build("raptor", {**params, "decay": 0.0}, ctx)
    flat.index(ds.corpus)
    assert flat.usage()["generated"] == 0 and flat.tree.sizes() == levels
    dense = build("dense", {}, ctx)
    dense.index(ds.corpus)
    queries = ds.split("test")[0]
    for qid in queries:
        assert [d for d, _ in flat.search_one(queries[qid], 9)] == [d for d, _ in dense.search_one(queries[qid], 9)]
    # with decay 0.9 summaries do take part: some chunk is lifted above its own similarity, none is lowered
    own = flat.search(queries, 100)
    lifts = [first.run[q][d] - own[q][d] for q in own for d in own[q]]
    assert min(lifts) > -1e-9 and max(lifts) > 1e-3
