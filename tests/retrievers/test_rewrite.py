"""lab.retrievers.rewrite: parsing of LLM rewrites (pure), and multi_query / step_back end to end with the real
SmolLM2 on ord-qa (3 queries, small max_tokens): LLM cost at query time, cache hits on a rerun with the latency
still holding the generation time, and the RRF composition of original and rewrites."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.data.types import Corpus, Document, Queries
from lab.experiment.run import load, run_experiment
from lab.retrievers import Context, build
from lab.retrievers.fusion import rrf
from lab.retrievers.rewrite import (
    MULTI_QUERY_PROMPT,
    MULTI_QUERY_PROMPT_VERSION,
    STEP_BACK_PROMPT_VERSION,
    clean_item,
    generation_seconds,
    is_echo,
    normalise_query,
    parse_rewrites,
    parse_step_back,
    prompt_template,
    split_items,
)

ORDQA = resolve_repo_path("data/ord-qa")
Q = "How to introduce randomness to global routing for solution exploration?"


# ------------------------------------------------------------------------------------------------ pure parsing
def test_normalise_and_echo():
    assert normalise_query("  How to  introduce Randomness?? ") == "how to introduce randomness"
    assert is_echo("how to introduce randomness to global routing for solution exploration", Q)
    assert is_echo(f'"{Q}"', Q)
    # one word changed in a long question: a near-verbatim copy
    long_q = ("How can one optimize the routing of a specific net in the design? Especially, we want to decrease the "
              "maximum path depth from the net driver to its loads.")
    assert is_echo(long_q.replace("Especially", "Specifically"), long_q)
    assert not is_echo("random perturbation of edge capacities in global routing", Q)
    assert not is_echo("", Q) and not is_echo("anything", "")


@pytest.mark.parametrize("raw, clean", [
    ("1. foo bar", "foo bar"),
    ("2) foo bar", "foo bar"),
    ("(3) foo bar", "foo bar"),
    ("- foo bar", "foo bar"),
    ("* foo bar", "foo bar"),
    ("• foo bar", "foo bar"),
    ("a. foo bar", "foo bar"),
    ("**1. foo bar**", "foo bar"),
    ("1. **Refine the design**: make it smaller", "Refine the design: make it smaller"),
    ('1. "foo bar"', "foo bar"),
    ("Query 2: foo bar", "foo bar"),
    ("1. Query: foo bar", "foo bar"),
    ("Step-back question: What is routing?", "What is routing?"),
    ("Stepback Question: What is routing?", "What is routing?"),
    ("> foo bar", "foo bar"),
    ("2.5 GHz clocks in routing", "2.5 GHz clocks in routing"),  # a number is not a list marker
    ("1990s routing tools", "1990s routing tools"),
])
def test_clean_item(raw, clean):
    assert clean_item(raw) == clean


def test_split_items_keeps_list_items_only_when_there_is_a_list():
    text = "Here are 3 queries:\n1. alpha one\n2. beta two\n\n3. gamma three\nHope this helps!"
    assert [clean_item(s) for s in split_items(text)] == ["alpha one", "beta two", "gamma three"]
    assert split_items("alpha one\nbeta two") == ["alpha one", "beta two"]  # no markers: every line
    assert split_items("") == [] and split_items("\n \n") == []
    inline = "ways to go faster: 1. optimizing routing of nets 2. improving timing 3. reducing wire length"
    assert [clean_item(s) for s in split_items(inline)] == [
        "optimizing routing of nets", "improving timing", "reducing wire length"]


@pytest.mark.parametrize("text, expected", [
    ("1. random edge capacity perturbation\n2. global router seed option\n3. exploring routing solutions",
     ["random edge capacity perturbation", "global router seed option", "exploring routing solutions"]),
    # bullets, CRLF, a preamble and an epilogue
    ("Sure! Here you go:\r\n- random edge capacity perturbation\r\n- global router seed option\r\nThanks",
     ["random edge capacity perturbation", "global router seed option"]),
    # no markers at all: lines
    ("random edge capacity perturbation\nglobal router seed option",
     ["random edge capacity perturbation", "global router seed option"]),
    # echoes of the original and duplicates go (SmolLM2 does this often)
    (f"1. {Q}\n2. {Q}\n3. {Q.lower()}", []),
    ("1. Optimizing the routing of a net\n2. Optimizing the routing of a net\n3. optimizing the routing of a net!",
     ["Optimizing the routing of a net"]),
    # degenerate numbering without words (seen: "1. 1. 1. 1." and "1. 1.1.1.1")
    ("1. 1. 1. 1. 1. 1. 1. 1.", []),
    ("1. 1.1.1.1.1.1.1.1.1.1.1", []),
    ("", []),
    ("   ", []),
    ("1.\n2.\n3. -", []),
    # more items than asked: the first n
    ("1. aa one\n2. bb two\n3. cc three\n4. dd four", ["aa one", "bb two", "cc three"]),
    # a label-only line is not a query
    ("1. Rewrites:\n2. seed for the global router", ["seed for the global router"]),
    # a list heading ending in ':' is a query without its colon; a prose line ending in ':' is a preamble
    ("1. Optimize global placement settings:\n\nTo optimize it, use heatmaps.", ["Optimize global placement settings"]),
    ("Here are the queries:\nseed for the global router", ["seed for the global router"]),
])
def test_parse_rewrites(text, expected):
    assert parse_rewrites(text, Q, n=3) == expected


def test_parse_rewrites_truncated_answer_drops_its_last_item():
    text = "1. random edge capacity perturbation\n2. global router seed option\n3. exploring rout"
    assert parse_rewrites(text, Q, n=3, truncated=True) == ["random edge capacity perturbation",
                                                            "global router seed option"]
    assert parse_rewrites("1. exploring routing sol", Q, n=3, truncated=True) == ["exploring routing sol"]
    assert len(parse_rewrites(text, Q, n=None)) == 3


@pytest.mark.parametrize("text, expected", [
    ("What is global routing?", "What is global routing?"),
    ("Step-back question: What is global routing?\nIt is the stage ...", "What is global routing?"),
    ("What is global routing? Global routing is the stage that ...", "What is global routing?"),
    ('"What are routing algorithms?"', "What are routing algorithms?"),
    ("\n\n  What is global routing？  ", "What is global routing？"),
    # a statement is accepted (it names the broader topic), first line only
    ("Introducing randomness to routing is a topic in computer science.\nMore text",
     "Introducing randomness to routing is a topic in computer science."),
    # a label line ending in ':' is skipped, a list item is cleaned
    ("The possible reasons for this issue are:\n1. Unclosed data in the odb API", "Unclosed data in the odb API"),
    (Q, None),
    (f"Question: {Q}", None),
    ("", None),
    ("1. 1. 1.", None),
])
def test_parse_step_back(text, expected):
    assert parse_step_back(text, Q) == expected


def test_generation_seconds_sums_original_generation_time():
    from lab.models.llm import Completion

    c = [Completion("a", 1, 1, seconds=0.001, cached=True, model="m", gen_seconds=2.5),
         Completion("b", 1, 1, seconds=0.7, cached=False, model="m", gen_seconds=0.7)]
    assert generation_seconds(c) == pytest.approx(3.2)
    assert generation_seconds([]) == 0.0


def test_prompt_template():
    assert prompt_template(None, MULTI_QUERY_PROMPT, MULTI_QUERY_PROMPT_VERSION, ("query", "n")) == (
        MULTI_QUERY_PROMPT, MULTI_QUERY_PROMPT_VERSION)
    tpl, version = prompt_template("Rewrite {n} times: {query}", MULTI_QUERY_PROMPT, "x", ("query", "n"))
    assert tpl == "Rewrite {n} times: {query}" and version.startswith("custom-") and len(version) == 15
    with pytest.raises(ConfigError, match=r"lacks \{n\}"):
        prompt_template("Rewrite: {query}", MULTI_QUERY_PROMPT, "x", ("query", "n"))


def test_bad_params_fail_at_build(tmp_path):
    ctx = Context(cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="n"):
        build("multi_query", {"n": 0, "base": "bm25"}, ctx)
    with pytest.raises(ConfigError, match="weights"):
        build("step_back", {"weights": [1, 1, 1], "base": "bm25"}, ctx)
    with pytest.raises(ConfigError, match="LLM inside a rewrite"):
        build("step_back", {"base": "multi_query"}, ctx)
    with pytest.raises(ConfigError, match="unknown strategy"):
        build("multi_query", {"base": "nope"}, ctx)


# ------------------------------------------------------------------------------------------------ real LLM
@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rewrite-cache")


@pytest.fixture(scope="module")
def ordqa():
    return load(ORDQA, progress=False)


MQ_PARAMS = {"base": "bm25", "max_tokens": 40}
SB_PARAMS = {"base": "bm25", "max_tokens": 24}


@pytest.mark.parametrize("strategy, params", [("multi_query", MQ_PARAMS), ("step_back", SB_PARAMS)])
def test_end_to_end_pays_at_query_time_then_hits_the_cache(strategy, params, cache_dir, ordqa):
    ctx = Context(cache_dir=cache_dir, progress=False)
    first = run_experiment(ordqa, strategy, params, max_queries=3, ctx=ctx)
    s1 = first.summary()
    assert first.info["n_queries"] == 3 and 0.0 <= s1["ndcg@10"] <= 1.0
    assert s1["llm_query_calls"] == 3 and s1["llm_index_calls"] == 0
    assert s1["llm_query_generated"] + s1["llm_query_cache_hits"] == 3
    desc = first.info["retriever"]
    assert desc["strategy"] == strategy and desc["base"]["strategy"] == "bm25"
    assert desc["prompt_version"] == {"multi_query": MULTI_QUERY_PROMPT_VERSION,
                                      "step_back": STEP_BACK_PROMPT_VERSION}[strategy]
    assert desc["llm"].startswith("gguf:SmolLM2") and "latency includes LLM generation" in desc["latency"]
    assert desc["diagnostics"]["queries"] == 3

    second = run_experiment(ordqa, strategy, params, max_queries=3, ctx=ctx)
    s2 = second.summary()
    assert s2["llm_query_generated"] == 0 and s2["llm_query_cache_hits"] == 3 and s2["llm_query_tokens"] == 0
    assert second.run.scores == first.run.scores
    # the latency still holds the original generation time, read back from the cache
    from lab.models.llm import load_llm

    retriever = build(strategy, params, ctx)
    llm = load_llm(None, cache_dir=cache_dir, progress=False)
    queries, _ = ordqa.split("test")
    for qid in second.run.latency:
        c = llm.complete(retriever.prompt(queries[qid]), **retriever.gen)
        assert c.cached and c.gen_seconds > 0
        assert second.run.latency[qid] >= c.gen_seconds and first.run.latency[qid] >= c.gen_seconds
    assert llm.usage()["generated"] == 0


def test_fused_run_holds_hits_of_original_and_rewrite(cache_dir, ordqa):
    """step_back's run is RRF(original, step-back) of the base strategy's own runs, and holds hits that only the
    step-back question found."""
    ctx = Context(cache_dir=cache_dir, progress=False)
    sb = build("step_back", {**SB_PARAMS, "depth": 10}, ctx)
    bm25 = build("bm25", {}, ctx)
    sb.index(ordqa.corpus)
    bm25.index(ordqa.corpus)
    queries = ordqa.split("test")[0].subset(["1", "10", "11"])
    fused = sb.search(queries, k=10)
    assert sb.rewrites.keys() == set(queries) and all(sb.gen_seconds[q] > 0 for q in queries)
    new_hits = 0
    for qid in queries:
        original = bm25.search(Queries({qid: queries[qid]}), 10)
        assert sb.rewrites[qid], f"no step-back question parsed from {sb.raw[qid]!r}"
        rewritten = bm25.search(Queries({qid: sb.rewrites[qid][0]}), 10)
        assert fused.scores[qid] == rrf([original, rewritten], k=60, top=10).scores[qid]
        assert set(fused.scores[qid]) & set(original.scores[qid])
        new_hits += len(set(fused.scores[qid]) - set(original.scores[qid]))
    assert new_hits > 0  # the step-back question brought documents the original did not find


def test_multi_query_keeps_the_original_when_parsing_fails(cache_dir, ordqa):
    """A query whose answer has no usable rewrite is searched as itself (a parse failure, counted)."""
    ctx = Context(cache_dir=cache_dir, progress=False)
    mq = build("multi_query", MQ_PARAMS, ctx)
    mq.index(ordqa.corpus)
    queries = ordqa.split("test")[0].subset(["1", "10", "11"])
    run = mq.search(queries, k=10)
    bm25 = build("bm25", {}, ctx)
    bm25.index(ordqa.corpus)
    d = mq.diagnostics()
    assert d["queries"] == 3 and d["rewrites"] == sum(len(v) for v in mq.rewrites.values())
    assert d["parse_failures"] == sum(not v for v in mq.rewrites.values())
    for qid in queries:
        assert all(not is_echo(r, queries[qid]) for r in mq.rewrites[qid]) and len(mq.rewrites[qid]) <= 3
        if not mq.rewrites[qid]:
            alone = bm25.search(Queries({qid: queries[qid]}), 10)
            assert list(run.scores[qid]) == [d for d, _ in alone.ranked(qid)]


def test_default_base_is_hybrid(cache_dir):
    """The default base (hybrid: bm25 + dense) runs end to end on a tiny corpus."""
    docs = {"a": "Global routing assigns nets to routing regions (gcells).",
            "b": "The set_global_routing_random command perturbs edge capacities with a seed.",
            "c": "Detailed routing draws the final wires and vias.",
            "d": "Cats sleep sixteen hours a day."}
    corpus = Corpus({i: Document(i, t, "") for i, t in docs.items()}, name="tiny")
    sb = build("step_back", {"max_tokens": 16}, Context(cache_dir=cache_dir, progress=False))
    assert sb.base.name == "hybrid"
    sb.index(corpus)
    run = sb.search(Queries({"q": Q}), k=3)
    assert len(run.scores["q"]) == 3 and run.latency["q"] >= sb.gen_seconds["q"] > 0
    assert sb.describe()["base"]["retrievers"] == ["bm25", "dense"]
