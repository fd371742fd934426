"""lab.analysis.answer_metrics: the pure parts exactly (claims, verdict parsing, precision@k, NaN-safe aggregation),
answer
relevancy with the real MiniLM embedder, the NaN/failure paths through a scripted LLM, MLflow logging, and the real
SmolLM2 judge (a handful of calls here; the whole hand-labelled fixture in a slow test)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lab.analysis.answer_metrics import (
    METRICS,
    SUPPORT_PROMPT,
    Judge,
    aggregate,
    context_precision,
    evaluate_samples,
    fraction_true,
    mean_cosine,
    parse_generated_question,
    parse_verdict,
    score_sample,
    split_claims,
)
from lab.analysis.judge_agreement import judge_agreement, load_fixture
from lab.experiment.answers import NONCOMMITTAL, AnswerSample
from lab.models.llm import Completion, LLMError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "answers"


# ------------------------------------------------------------------------------------------------ claims
def test_split_claims_sentences_bullets_and_abbreviations():
    text = ("Use the `set_dont_use` command. It removes cells, e.g. DLY* cells, from the resizer!\n\n"
            "- Set alpha to 0.5 for a balance.\n2. Run it again?\n### A heading here\nStep 3: Check the report file.")
    assert split_claims(text) == [
        "Use the `set_dont_use` command.",
        "It removes cells, e.g. DLY* cells, from the resizer!",
        "Set alpha to 0.5 for a balance.",
        "Run it again?",
        "Check the report file.",
    ]


def test_split_claims_folds_code_into_its_sentence():
    text = "For example, run this command:\n```tcl\nset_routing_alpha -net net1 0.5\n```\nThen route the design."
    assert split_claims(text) == ["For example, run this command: set_routing_alpha -net net1 0.5",
                                  "Then route the design."]
    # a block at the start is a claim of its own; an unclosed fence marker is dropped
    assert split_claims("```\nplace_pins -hor_layers 2\n```") == ["place_pins -hor_layers 2"]
    assert split_claims("```tcl\nwrite_pg_spice -net VDD\nAnswer:\n```") == ["write_pg_spice -net VDD Answer:"]
    assert split_claims("Example:\n```tcl\nglobal_route -verbose -allow_congestion\n. Alternatively use it.") == [
        "global_route -verbose -allow_congestion", "Alternatively use it."]


def test_split_claims_drops_fragments_and_caps():
    assert split_claims("Yes. Use it now. The steps are as follows:") == ["Use it now."]  # < 3 words, ":" lead-in
    assert split_claims("One two three. Four five six. Seven eight nine.", max_claims=2) == [
        "One two three.", "Four five six."]
    assert split_claims("") == [] and split_claims(None) == [] and split_claims("   \n ") == []


# ------------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, expected", [
    ("Yes", True), ("No.", False), ("yes, the statement", True), ("No, the", False), ("  YES!", True),
    ("True", True), ("false", False), ("The statement is supported", True), ("The statement is not supported", False),
    ("Unsupported.", False), ("The passage is useful", True), ("The", None), ("", None), (None, None),
    ("I think that no one knows", False),  # the first yes/no word decides (lenient, not clever)
])
def test_parse_verdict(text, expected):
    assert parse_verdict(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("Question: What does set_dont_use do?", "What does set_dont_use do?"),
    ("Q: How is the seed set\nA: with -seed", "How is the seed set"),
    ("1. Which command randomizes routing?", "Which command randomizes routing?"),
    ("\n\n\"Can I build in debug mode?\"", "Can I build in debug mode?"),
    ("### The answer is:\n\nThe answer", None),  # not a question
    ("The command sets alpha.", None), ("Why?", None), ("", None), (None, None),
])
def test_parse_generated_question(text, expected):
    assert parse_generated_question(text) == expected


# ------------------------------------------------------------------------------------------------ formulas
def test_fraction_true_is_nan_safe():
    assert fraction_true([True, False, True]) == pytest.approx(2 / 3)
    assert math.isnan(fraction_true([])) and math.isnan(fraction_true([True, None]))


def test_context_precision_matches_hand_computed_values():
    # RAGAS: sum_k precision@k * v_k / number of useful chunks
    assert context_precision([False, True, True]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert context_precision([True, False, False, True]) == pytest.approx((1 / 1 + 2 / 4) / 2)
    assert context_precision([False, False, False, False, True]) == pytest.approx(1 / 5)
    assert context_precision([True, True, True]) == 1.0
    assert context_precision([False, False]) == 0.0 and context_precision([]) == 0.0
    assert math.isnan(context_precision([True, None, True]))


def test_mean_cosine():
    q = np.array([1.0, 0.0])
    assert mean_cosine(q, np.array([[1.0, 0.0], [0.0, 2.0]])) == pytest.approx(0.5)
    assert mean_cosine(q, np.array([[3.0, 3.0]])) == pytest.approx(math.sqrt(0.5))
    assert math.isnan(mean_cosine(q, np.empty((0, 2))))


def test_aggregate_leaves_nan_out_and_counts_failures():
    df = pd.DataFrame({
        "faithfulness": [1.0, math.nan, 0.5, math.nan],
        "status_faithfulness": ["ok", "failed: 1 of 2 verdicts unparseable or errored", "ok",
                                "skipped: noncommittal answer"],
        "answer_relevancy": [math.nan] * 4, "status_answer_relevancy": ["failed: no answer"] * 4,
        "context_precision": [0.0, 1.0, 0.5, 0.25], "status_context_precision": ["ok"] * 4,
        "context_recall": [0.0, 0.0, 1.0, math.nan],
        "status_context_recall": ["ok", "ok", "ok", "skipped: no reference answer"],
    })
    agg = aggregate(df)
    assert agg["faithfulness"] == 0.75 and agg["n_scored_faithfulness"] == 2
    assert agg["n_failed_faithfulness"] == 1 and agg["n_skipped_faithfulness"] == 1
    assert math.isnan(agg["answer_relevancy"]) and agg["n_failed_answer_relevancy"] == 4
    assert agg["context_precision"] == pytest.approx(0.4375) and agg["n_failed_context_precision"] == 0
    assert agg["context_recall"] == pytest.approx(1 / 3) and agg["n_skipped_context_recall"] == 1


# ------------------------------------------------------------------------------------------------ embedder
def test_answer_relevancy_ranks_on_topic_above_off_topic(minilm):
    """The embedding half of answer relevancy, with hand-written generated questions: on-topic wins, every case."""
    _, cases = load_fixture(FIXTURE)
    judge = Judge(llm=None, embedder=minilm)
    for case in cases:
        on = judge.relevancy(case["question"], case["on_topic_questions"])
        off = judge.relevancy(case["question"], case["off_topic_questions"])
        assert on > off + 0.2, (case["id"], on, off)
        assert -1.0 <= off < on <= 1.0


# ------------------------------------------------------------------------------------------------ scripted judge
class ScriptedLLM:
    """A test double for the failure paths: answers by rule from the prompt, so the NaN handling is exact.
    Statements containing "ERROR" raise an LLMError; "GARBLED" yields an unparseable verdict."""

    identity, backend, concurrency = "test:scripted", "test", 1

    def __init__(self, answer="The install directory is /usr/local. It can be changed with a flag."):
        self.answer, self.prompts = answer, []

    def complete(self, prompt, system=None, **gen):
        self.prompts.append(prompt)
        if "Answer the question using only the context" in prompt:
            text = self.answer
        elif "Is the statement supported" in prompt:
            statement = prompt.split("Statement: ", 1)[1]
            if "ERROR" in statement:
                raise LLMError("test", "judge request failed", 500)
            if gen.get("grammar"):
                text = "Yes"  # what a grammar-constrained llama.cpp judge can answer
            else:
                text = "The" if "GARBLED" in statement else ("Yes." if "usr/local" in statement else "No.")
        elif "Is the passage useful" in prompt:
            text = "Yes" if "install" in prompt.split("Passage:", 1)[1] else "No, the"
        elif "Write the question" in prompt:
            text = "Question: What is the default install directory?"
        else:  # pragma: no cover - a prompt this double does not know
            raise AssertionError(prompt)
        return Completion(text, len(prompt) // 4, 3, 0.01, False, self.identity, "stop", 0.02)

    def chat(self, messages, **gen):
        return self.complete(messages[-1]["content"], **gen)

    def map(self, items, concurrency=None, progress=True, desc=None, **gen):
        return [self.complete(it, **gen) if isinstance(it, str) else self.chat(it, **gen) for it in items]

    def usage(self):
        return {"calls": len(self.prompts), "load_seconds": 0.0}

    def describe(self):
        return {"backend": self.backend, "identity": self.identity}


CTX = ["The default install directory is /usr/local.", "Heat maps are drawn by the GUI."]


def _sample(**kw):
    base = {"query_id": "q", "question": "What is the default install directory?", "contexts": CTX,
            "context_ids": ["install_3", "gui_14"], "reference": "The default is /usr/local. Nothing else is needed.",
            "answer": "The install directory is /usr/local. It can be changed with a flag."}
    return AnswerSample(**{**base, **kw})


def test_score_sample_exact_values(minilm):
    llm = ScriptedLLM()
    row, detail = score_sample(Judge(llm, minilm, n_questions=2), _sample())
    assert row["faithfulness"] == 0.5 and row["status_faithfulness"] == "ok"  # 1 of 2 claims supported
    assert row["context_recall"] == 0.5  # "The default is /usr/local." yes, "Nothing else is needed." no
    assert row["context_precision"] == 1.0 and row["n_useful"] == 1  # the useful chunk is ranked first
    assert row["answer_relevancy"] > 0.9 and row["n_questions"] == 2  # the generated question = the question
    assert [c["supported"] for c in detail["answer_claims"]] == [True, False]
    # the answer's claims and the reference's claims are judged against the same context, one prompt each
    support = [p for p in llm.prompts if "Is the statement supported" in p]
    assert len(support) == 4 and all(p.startswith(SUPPORT_PROMPT.split("{context}")[0] + CTX[0]) for p in support)
    assert row["judge_calls"] == 4 + 2 + 2


def test_failed_verdicts_make_the_metric_nan_never_zero_or_one(minilm):
    judge = Judge(ScriptedLLM(), minilm, n_questions=1)
    row, detail = score_sample(judge, _sample(answer="The dir is /usr/local. GARBLED claim goes here."))
    assert math.isnan(row["faithfulness"]) and row["status_faithfulness"].startswith("failed: 1 of 2")
    assert detail["answer_claims"][1]["supported"] is None and detail["answer_claims"][1]["raw"] == "The"
    row, detail = score_sample(judge, _sample(answer="The dir is /usr/local. An ERROR claim goes here."))
    assert math.isnan(row["faithfulness"]) and row["status_faithfulness"].startswith("failed")
    assert "judge request failed" in detail["answer_claims"][1]["raw"]
    assert row["context_recall"] == 0.5  # the other metrics of the query are still scored


def test_unparseable_verdicts_of_a_llama_cpp_judge_are_asked_again_under_the_grammar(minilm):
    llm = ScriptedLLM()
    llm.backend = "gguf"
    row, detail = score_sample(Judge(llm, minilm, n_questions=1),
                               _sample(answer="The dir is /usr/local. A GARBLED claim here."))
    assert row["faithfulness"] == 1.0 and row["status_faithfulness"] == "ok" and row["n_fallback_verdicts"] == 1
    assert detail["answer_claims"][1]["raw"] == "The || grammar: Yes"
    assert row["judge_calls"] == 4 + 1 + 2 + 1  # 4 support, 1 asked again, 2 chunks, 1 question
    # fallback "none" (or an HTTP judge under "auto") leaves the failure a failure
    row, _ = score_sample(Judge(llm, minilm, n_questions=1, fallback="none"),
                          _sample(answer="The dir is /usr/local. A GARBLED claim here."))
    assert math.isnan(row["faithfulness"]) and row["n_fallback_verdicts"] == 0


def test_missing_answer_noncommittal_no_reference_and_no_context(minilm):
    judge = Judge(ScriptedLLM(), minilm, n_questions=1)
    row, _ = score_sample(judge, _sample(answer=None, answer_error="HTTP 500"))
    assert math.isnan(row["faithfulness"]) and math.isnan(row["answer_relevancy"])
    assert row["status_faithfulness"] == row["status_answer_relevancy"] == "failed: no answer (HTTP 500)"
    assert row["context_precision"] == 1.0  # retrieval metrics do not need the answer
    row, _ = score_sample(judge, _sample(answer=NONCOMMITTAL))
    assert math.isnan(row["faithfulness"]) and row["status_faithfulness"] == "skipped: noncommittal answer"
    assert row["answer_relevancy"] == 0.0 and row["noncommittal"]  # RAGAS: a noncommittal answer scores 0
    row, _ = score_sample(judge, _sample(reference=None))
    assert math.isnan(row["context_precision"]) and math.isnan(row["context_recall"])
    assert row["status_context_recall"] == "skipped: no reference answer"
    row, _ = score_sample(judge, _sample(contexts=[], context_ids=[], answer=NONCOMMITTAL))
    assert row["context_precision"] == 0.0 and row["context_recall"] == 0.0  # nothing retrieved
    row, _ = score_sample(judge, _sample(answer="Yes.", reference="Just that."))  # under 3 words: no claims
    assert math.isnan(row["faithfulness"]) and math.isnan(row["context_recall"])
    assert row["status_faithfulness"] == "failed: no claims in the answer"
    assert row["status_context_recall"] == "failed: no claims in the reference answer"


def test_evaluate_samples_means_exclude_failures_and_count_them(minilm):
    llm = ScriptedLLM()
    samples = [_sample(query_id="a", answer=None), _sample(query_id="b", answer="Fine /usr/local answer here."),
               _sample(query_id="c", answer="One GARBLED claim here.")]
    ev = evaluate_samples(samples, Judge(llm, minilm, n_questions=1), progress=False)
    s = ev.summary()
    assert list(ev.per_query.index) == ["a", "b", "c"]
    assert s["faithfulness"] == 1.0 and s["n_scored_faithfulness"] == 1 and s["n_failed_faithfulness"] == 2
    assert s["n_failed_answer_relevancy"] == 1 and s["n_scored_answer_relevancy"] == 2
    assert s["n_queries"] == 3 and s["judge_calls"] == len(llm.prompts) and s["judge_cache_hits"] == 0
    assert set(METRICS) <= set(ev.means)


def test_judge_calls_keep_order_with_concurrency(minilm):
    llm = ScriptedLLM()
    llm.concurrency = 4
    statements = [f"Statement {i} about /usr/local." if i % 2 else f"Statement {i} elsewhere." for i in range(9)]
    vs = Judge(llm, minilm).support("ctx", statements)
    assert vs.values == [bool(i % 2) for i in range(9)] and len(vs.completions) == 9


def test_judge_agreement_counts_failures_as_disagreements(minilm):
    cases = [{"id": "a", "kind": "support", "context": "c", "statement": "It is /usr/local.", "expected": "yes"},
             {"id": "b", "kind": "support", "context": "c", "statement": "A GARBLED one.", "expected": "no"},
             {"id": "c", "kind": "useful", "question": "q", "reference": "r", "context": "install it",
              "expected": "yes"},
             {"id": "d", "kind": "useful", "question": "q", "reference": "r", "context": "heat maps",
              "expected": "yes"}]
    pairs = [{"id": "r", "question": "What is the default install directory?", "on_topic": "x", "off_topic": "y"}]
    res = judge_agreement(Judge(ScriptedLLM(), minilm, n_questions=1), cases, pairs)
    assert list(res["rows"].agree) == [True, False, True, False, False]  # the tie on r is not a ranking
    assert res["agreement"] == 0.5 and res["agreement_support"] == 0.5 and res["n_failed"] == 1
    assert res["relevancy_ranked"] == 0 and res["n_relevancy"] == 1 and res["chance"] == 0.75


@pytest.fixture
def mlflow_root(tmp_path, pytestconfig):
    """conftest's cached blank store when pytest's cache is on, else a fresh one (runs the migrations)."""
    if getattr(pytestconfig, "cache", None) is None:
        return tmp_path / "mlruns"
    from conftest import blank_store

    return blank_store(tmp_path, pytestconfig)


def test_run_answer_metrics_on_ord_qa_and_log_to_mlflow(minilm, tmp_path, mlflow_root):
    """The whole path with a real retriever (BM25 on ord-qa, 2 queries) and the scripted LLM, logged to MLflow."""
    from lab.analysis.answer_metrics import (
        PER_QUERY_ARTIFACT,
        log_answer_metrics,
        run_answer_metrics,
    )
    from lab.retrievers.base import Context
    from lab.tracking.store import artifact_file, client

    root = mlflow_root
    llm = ScriptedLLM()
    rep = run_answer_metrics("data/ord-qa", "bm25", k=3, llm=llm, ctx=Context(cache_dir=tmp_path, progress=False),
                             max_queries=2, embedder=minilm, n_questions=1)
    assert [s.query_id for s in rep.samples] == ["1", "10"] and all(len(s.contexts) == 3 for s in rep.samples)
    assert rep.config["llm"] == rep.config["judge"] == "test:scripted" and rep.config["prompt_version"]
    run_id = log_answer_metrics(rep, experiment="answers-test", tracking_root=root)
    run = client(root).get_run(run_id)
    m = run.data.metrics
    for name in (*METRICS, *(f"n_failed_{x}" for x in METRICS), "answer_calls", "judge_calls", "judge_prompt_tokens",
                 "wall_seconds", "retrieval_ndcg_at_10"):
        assert name in m or (name in METRICS and math.isnan(rep.summary()[name])), name
    assert m["answer_calls"] == 2 and run.data.tags["model.judge"] == "test:scripted"
    assert run.info.status == "FINISHED" and run.data.params["k"] == "3"
    pq = pd.read_parquet(artifact_file(run_id, PER_QUERY_ARTIFACT, tmp_path, root))
    assert list(pq.index) == ["1", "10"] and "status_faithfulness" in pq.columns


# ------------------------------------------------------------------------------------------------ real judge
@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    from lab.models.llm import load_llm

    llm = load_llm("local", cache_dir=tmp_path_factory.mktemp("judgecache"), progress=False)
    yield llm
    llm.close()


def test_real_smollm2_verdicts_are_parsed(smol):
    """Two real verdict calls: SmolLM2 answers the judge prompt in a form the parser reads (yes or no, not None),
    and the calls are accounted. Whether the verdicts are right is measured on the whole fixture (slow test)."""
    judge = Judge(smol, None)
    vs = judge.support("The default install directory is `/usr/local`.",
                       ["The default install directory is /usr/local.",
                        "OpenROAD was first released in 1985 by Intel."])
    assert all(v in (True, False) for v in vs.values), vs.raw
    assert all(c is not None and not c.cached and c.completion_tokens <= judge.verdict_tokens for c in vs.completions)


def test_answering_stops_after_n_consecutive_endpoint_failures_and_keeps_what_was_done(tmp_path, always_500,
                                                                                         capsys, monkeypatch):
    """`lab answers` against an endpoint that always returns 500 stops after 3 failed calls in a row
    (one error line, exit 1); the queries finished before are written and the folder is named."""
    import json

    from lab.cli.main import main

    (tmp_path / "lab").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path))  # results/ goes to tmp_path
    spec = json.dumps({"backend": "openai", "base_url": always_500.url, "model": "m", "max_retries": 1,
                       "backoff_s": 0.01, "max_backoff_s": 0.02})
    data = Path(__file__).resolve().parents[2] / "data" / "ord-qa"
    rc = main(["answers", "--dataset", str(data), "--strategy", "bm25", "--max-queries", "20", "--llm", spec,
               "--no-log", "--no-progress", "--max-consecutive-failures", "3", "--cache-dir", str(tmp_path / "c")])
    lines = capsys.readouterr().err.splitlines()  # (the embedder's own weight-loading bar may come first)
    errors = [line for line in lines if line.startswith("error")]
    assert rc == 1 and len(errors) == 1 and errors[0] == lines[-1], lines
    err = errors[0]
    import re

    m = re.match(r"error: answering and judging stopped after (\d+) consecutive failed LLM calls "
                 r"\(--max-consecutive-failures 3\); last error: .*HTTP 500.*; (\d+) of 20 queries were scored "
                 r"before; they are written to (\S+)$", err)
    assert m and int(m.group(1)) >= 3, err  # calls in flight when it tripped count too
    folder = Path(m.group(3))
    assert folder.is_relative_to(tmp_path / "results" / "answers")
    assert len(pd.read_parquet(folder / "answer_metrics.parquet")) == int(m.group(2)) < 3
    assert always_500.requests <= 2 * (int(m.group(1)) + 4)  # a few calls x 2 attempts, not 20 queries' worth
