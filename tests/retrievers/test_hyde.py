"""lab.retrievers.hyde: hypothetical passages from the real SmolLM2 (a handful of calls, small max_tokens), averaged
with the query's vector and searched in the dense index; end to end on an ord-qa slice (its first 3 test queries,
their cited chunks and 30 more) through run_experiment, with cache hits on a rerun and the latency still holding
the generation time."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.experiment.run import load, run_experiment
from lab.retrievers import Context, build
from lab.retrievers.hyde import HYDE_PROMPT, PROMPT_VERSION, clean_passage, mean_vector

ORDQA = resolve_repo_path("data/ord-qa")
QIDS = ["1", "10", "11"]  # the first 3 test queries by id, as max_queries=3 picks them


@pytest.fixture(scope="module")
def ordqa_slice(tmp_path_factory):
    """ord-qa in BEIR layout, sliced: the first 3 test queries, their qrels, their cited chunks and the first 30."""
    out = tmp_path_factory.mktemp("data") / "ord-qa-slice"
    (out / "qrels").mkdir(parents=True)
    rows = [ln.split("\t") for ln in (ORDQA / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    rows = [r for r in rows if r[0] in QIDS]
    cited = {r[1] for r in rows}
    docs = [json.loads(ln) for ln in (ORDQA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    keep = [d for i, d in enumerate(docs) if i < 30 or d["_id"] in cited]
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in keep), encoding="utf-8")
    queries = [json.loads(ln) for ln in (ORDQA / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries if q["_id"] in QIDS),
                                       encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    return load(out, progress=False)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(cache_dir=tmp_path_factory.mktemp("hyde-cache"), progress=False)


PARAMS = {"max_tokens": 24}


# ------------------------------------------------------------------------------------------------ pure
@pytest.mark.parametrize("text, expected", [
    ("Global routing assigns nets to gcells.", "Global routing assigns nets to gcells."),
    ("  Passage: Global routing assigns nets.  ", "Global routing assigns nets."),
    ("**Answer:** Global routing assigns nets.", "Global routing assigns nets."),
    ("", None), ("   \n ", None), ("Passage:", None), ("1. 2.", None),
])
def test_clean_passage(text, expected):
    assert clean_passage(text) == expected


def test_mean_vector_is_normalised_equal_weight_mean():
    v = mean_vector(np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert v.dtype == np.float32 and np.allclose(v, [2 ** -0.5, 2 ** -0.5])
    assert np.allclose(mean_vector(np.array([[3.0, 4.0]])), [0.6, 0.8])
    assert np.allclose(mean_vector(np.array([[1.0, 0.0], [-1.0, 0.0]])), [0.0, 0.0])  # zero stays zero


def test_bad_params_fail_at_build(ctx, minilm):
    with pytest.raises(ConfigError, match="n=0 is not valid; n takes an integer >= 1"):
        build("hyde", {"n": 0, "embedder": minilm}, ctx)
    with pytest.raises(ConfigError, match="identical passages"):
        build("hyde", {"n": 2, "temperature": 0, "embedder": minilm}, ctx)
    with pytest.raises(ConfigError, match=r"lacks \{query\}"):
        build("hyde", {"prompt": "Write a passage.", "embedder": minilm}, ctx)
    h = build("hyde", {"n": 2, "embedder": minilm}, ctx)
    assert h.gen["temperature"] == 0.7 and h.seeds() == [0, 1]


# ------------------------------------------------------------------------------------------------ real LLM
def test_end_to_end_pays_at_query_time_then_hits_the_cache(ordqa_slice, ctx):
    first = run_experiment(ordqa_slice, "hyde", PARAMS, max_queries=3, ctx=ctx)
    s1 = first.summary()
    assert first.info["n_queries"] == 3 and 0.0 <= s1["ndcg@10"] <= 1.0
    assert s1["llm_query_calls"] == 3 and s1["llm_index_calls"] == 0
    assert s1["llm_query_generated"] + s1["llm_query_cache_hits"] == 3
    desc = first.info["retriever"]
    assert desc["prompt_version"] == PROMPT_VERSION and desc["llm"].startswith("gguf:SmolLM2")
    assert desc["dense"]["strategy"] == "dense" and desc["max_tokens"] == 24 and desc["include_query"] is True
    assert "latency includes LLM generation" in desc["latency"] and desc["diagnostics"]["queries"] == 3

    second = run_experiment(ordqa_slice, "hyde", PARAMS, max_queries=3, ctx=ctx)
    s2 = second.summary()
    assert s2["llm_query_generated"] == 0 and s2["llm_query_cache_hits"] == 3 and s2["llm_query_tokens"] == 0
    assert second.run.scores.keys() == first.run.scores.keys()
    for qid in QIDS:
        assert list(second.run.scores[qid]) == list(first.run.scores[qid])
    from lab.models.llm import load_llm

    llm = load_llm(None, cache_dir=ctx.cache_dir, progress=False)
    queries, _ = ordqa_slice.split("test")
    for qid in QIDS:
        c = llm.complete(HYDE_PROMPT.format(query=queries[qid]), max_tokens=24)
        assert c.cached and c.gen_seconds > 0
        assert second.run.latency[qid] >= c.gen_seconds and first.run.latency[qid] >= c.gen_seconds
    assert llm.usage()["generated"] == 0


def test_search_vector_is_mean_of_query_and_passage(ordqa_slice, ctx, minilm):
    """The hits are the dense index searched by normalise(mean(query vector, passage vector)): not the plain
    dense run, and not the passage alone."""
    hyde = build("hyde", {**PARAMS, "embedder": minilm}, ctx)
    hyde.index(ordqa_slice.corpus)
    queries = ordqa_slice.split("test")[0].subset(QIDS[:2])
    run = hyde.search(queries, k=10)
    for qid in queries:
        (passage,) = hyde.rewrites[qid]
        assert passage == clean_passage(hyde.raw[qid][0])
        v = minilm.encode_queries([queries[qid]])[0] + minilm.encode_passages([passage])[0]
        expect = hyde.dense.search_vectors(v / np.linalg.norm(v), 10)[0]
        assert [d for d, _ in expect] == list(run.scores[qid])
        assert np.allclose([s for _, s in expect], list(run.scores[qid].values()), atol=1e-5)
        plain = hyde.dense.search_one(queries[qid], 10)
        assert [s for _, s in plain] != pytest.approx(list(run.scores[qid].values()))
        assert run.latency[qid] >= hyde.gen_seconds[qid] > 0
    # without the query: the passage's vector alone; with no usable passage: the query's own vector
    q = queries[QIDS[0]]
    only = build("hyde", {**PARAMS, "include_query": False, "embedder": minilm}, ctx)
    only.index(ordqa_slice.corpus)
    assert np.allclose(only.query_vector(q, ["a passage"]), minilm.encode_passages(["a passage"])[0], atol=1e-6)
    assert np.allclose(only.query_vector(q, []), minilm.encode_queries([q])[0], atol=1e-6)


def test_n_passages_use_different_seeds(ordqa_slice, ctx, minilm):
    hyde = build("hyde", {"n": 2, "max_tokens": 12, "embedder": minilm}, ctx)
    hyde.index(ordqa_slice.corpus)
    q = ordqa_slice.queries[QIDS[0]]
    before = hyde.usage()["calls"]
    hits = hyde.search_one(q, 5)
    assert len(hits) == 5 and hyde.usage()["calls"] - before == 2
    raw = hyde.raw["q"]
    assert len(raw) == 2 and raw[0] != raw[1]  # seeds 0 and 1 at temperature 0.7
    assert hyde.describe()["seeds"] == [0, 1] and hyde.diagnostics()["passages"] == len(hyde.rewrites["q"])
