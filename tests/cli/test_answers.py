"""lab.cli.answers (`lab answers`, `lab answers --check-judge-agreement`): the LLM spec option, the parser's defaults,
and one query answered and judged end to end with the packaged SmolLM2 (slow)."""
from __future__ import annotations

import json

import pytest

from lab.cli.answers import llm_spec
from lab.cli.main import build_parser, main
from lab.core.errors import ConfigError


def test_cli_llm_spec_and_parsers():
    assert llm_spec(None) is None and llm_spec(" local ") == "local"
    assert llm_spec("{backend: openai, model: m, base_url: 'http://127.0.0.1:8000/v1'}") == {
        "backend": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1"}
    with pytest.raises(ConfigError, match="not a JSON/YAML mapping"):
        llm_spec("{backend: [")
    args = build_parser().parse_args(["answers", "--dataset", "data/ord-qa", "--strategy", "bm25", "--set", "k1=1.2",
                                      "--max-queries", "3", "--judge", "openai:gpt-4o-mini"])
    assert (args.k, args.llm, args.judge, args.n_questions, args.experiment) == (
        5, "local", "openai:gpt-4o-mini", 3, "answer_metrics")
    args = build_parser().parse_args(["answers", "--check-judge-agreement", "--json"])
    assert args.check_judge_agreement and args.judge is None and args.llm == "local"
    assert args.fixture.endswith("fixtures/answers")
    with pytest.raises(SystemExit):  # the old top-level command is gone: one judge-check command, under lab testset
        build_parser().parse_args(["judge-check", "--json"])


def test_answers_without_dataset_or_strategy_says_what_is_missing(capsys):
    assert main(["answers", "--strategy", "bm25"]) == 2
    err = capsys.readouterr().err
    assert "--dataset required (or --check-judge-agreement" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_answers_one_query_with_smollm2(tmp_path, capsys):
    rc = main(["answers", "--dataset", "data/ord-qa", "--strategy", "bm25", "--max-queries", "1", "--k", "2",
               "--context-tokens", "256", "--answer-tokens", "32", "--n-questions", "1", "--max-claims", "2",
               "--no-log", "--json", "--cache-dir", str(tmp_path), "--per-query", str(tmp_path / "pq.csv")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["n_queries"] == 1 and out["answer_calls"] == 1 and out["judge_calls"] >= 3
    for m in ("faithfulness", "answer_relevancy", "context_precision", "context_recall"):
        assert out[f"n_scored_{m}"] + out[f"n_failed_{m}"] + out[f"n_skipped_{m}"] == 1
    assert (tmp_path / "pq.csv").exists() and out["_meta"]["mlflow_run_id"] is None
