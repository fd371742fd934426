"""LLM listwise rerank (RankGPT sliding window): windows, parsing, failures keeping the first-stage order, and one
real run with the packaged SmolLM2-135M over BM25 on ORD-QA."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.retrievers import Context, build
from lab.retrievers.base import param_problems
from lab.retrievers.llm_rerank import build_prompt, parse_ranking, window_starts

DATA = Path(__file__).resolve().parents[2] / "data"


def test_windows_walk_from_the_bottom_to_the_top():
    assert window_starts(20, 10, 5) == [10, 5, 0]
    assert window_starts(100, 20, 10) == [80, 70, 60, 50, 40, 30, 20, 10, 0]  # RankGPT's default
    assert window_starts(7, 10, 5) == [0] and window_starts(12, 10, 5) == [2, 0]


def test_parse_ranking():
    assert parse_ranking("[2] > [3] > [1]", 3) == ([1, 2, 0], False)
    assert parse_ranking("[3] > [3] > [9]", 3) == ([2, 0, 1], True)  # repeats and out-of-range dropped, rest kept
    assert parse_ranking("2, 1", 3) == ([1, 0, 2], True)
    assert parse_ranking("I cannot rank these.", 3) == (None, False)
    assert parse_ranking("", 3) == (None, False)


def test_prompt_numbers_and_cuts_passages():
    p = build_prompt("what is x?", ["a " * 500, "b"], max_chars=50)
    assert "[1] " in p and "[2] b" in p and "what is x?" in p and "a " * 30 not in p


def test_params_are_checked():
    assert "step=0 is not valid" in param_problems("llm_rerank", {"step": 0})[0]
    problems = param_problems("llm_rerank", {"first_stage_params": {"k2": 1}})
    assert "first_stage_params: unknown param 'k2'" in problems[0]
    with pytest.raises(ConfigError, match="step=6 > window=5"):
        build("llm_rerank", {"window": 5, "step": 6})


@pytest.mark.slow
def test_real_run_on_ordqa_with_the_packaged_model(tmp_path):
    """(slow: 2 min on two loaded cores.) Two ORD-QA queries, BM25's top 5 in one window: the head is a permutation
    of BM25's top 5, the tail keeps
    BM25's order, the LLM cost is reported as query-time cost, and every window is either parsed or counted."""
    from lab.experiment.run import run_experiment

    ctx = Context(cache_dir=tmp_path, progress=False)
    res = run_experiment(DATA / "ord-qa", "llm_rerank", {"top_n": 5, "window": 5, "step": 5}, k=10, ctx=ctx,
                         max_queries=2)
    bm25 = run_experiment(DATA / "ord-qa", "bm25", {}, k=10, ctx=ctx, max_queries=2)
    for q in res.run:
        got, first = [d for d, _ in res.run.ranked(q)], [d for d, _ in bm25.run.ranked(q)]
        assert sorted(got[:5]) == sorted(first[:5]) and got[5:] == first[5:]
    diag = res.info["retriever"]["diagnostics"]
    assert diag["queries"] == 2 and diag["windows"] == 2 and diag["parse_failures"] <= 2
    assert res.cost["llm_query_calls"] == 2 and res.cost.get("llm_index_calls", 0) == 0
    assert all(t > 0 for t in res.run.latency.values())
    assert res.info["retriever"]["llm"].startswith("gguf:SmolLM2-135M-Instruct")
