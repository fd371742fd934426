"""lab.experiment.answers: fitting retrieved contexts into the prompt, the answer prompt, reference answers, and one
real
SmolLM2 generation (a handful of tokens)."""
from __future__ import annotations

import pytest

from lab.core.errors import DataError
from lab.data.types import Corpus, Document, Queries, Run
from lab.experiment.answers import (
    ANSWER_PROMPT,
    CHARS_PER_TOKEN,
    CONTEXT_SEPARATOR,
    NONCOMMITTAL,
    PROMPT_VERSION,
    TRUNCATION_MARK,
    AnswerSample,
    answer_prompt,
    build_samples,
    clean_answer,
    completion_cost,
    context_char_budget,
    drop_unfinished_sentence,
    fair_shares,
    fit_contexts,
    generate_answer,
    is_noncommittal,
    reference_answers,
    retrieved_contexts,
    truncate_text,
    unescape_newlines,
)
from lab.models.llm import Completion, LLMError


# ------------------------------------------------------------------------------------------------ fitting
def test_fair_shares_water_filling():
    assert fair_shares([100, 1000, 1000], 700) == [100, 300, 300]
    assert fair_shares([1000, 100, 1000], 700) == [300, 100, 300]  # input order kept
    assert fair_shares([10, 20], 1000) == [10, 20]  # everything fits
    assert fair_shares([50, 60, 70], 90) == [30, 30, 30]
    assert fair_shares([], 100) == []
    assert sum(fair_shares([7, 900, 33, 5000], 1001)) <= 1001


def test_truncate_text_cuts_at_a_word_and_marks_it():
    text = "alpha beta gamma delta epsilon"
    assert truncate_text(text, 100) == text
    cut = truncate_text(text, 20)
    assert cut == "alpha beta" + TRUNCATION_MARK and len(cut) <= 20
    assert len(truncate_text("x" * 50, 10)) <= 10 and truncate_text("x" * 50, 10).endswith(TRUNCATION_MARK)


def test_fit_contexts_respects_the_budget_and_the_rank_order():
    texts = ["short one", "word " * 400, "other " * 300]
    fitted = fit_contexts(texts, 600)
    assert len(fitted) == 3 and fitted[0] == "short one"
    assert fitted[1].startswith("word") and fitted[2].startswith("other")
    assert len(CONTEXT_SEPARATOR.join(fitted)) <= 600
    # shares under 40 characters: the lowest-ranked texts are dropped, not squeezed to nothing
    many = fit_contexts(["y " * 100] * 10, 200)
    assert 1 <= len(many) < 10 and all(len(t) >= 40 for t in many)
    assert fit_contexts([], 500) == []


def test_context_char_budget_from_the_context_window():
    class Local:
        n_ctx = 2048

    class Small:
        n_ctx = 512

    assert context_char_budget(Local(), max_tokens=128) == int(1024 * CHARS_PER_TOKEN)
    assert context_char_budget(Local(), max_tokens=128, context_tokens=512) == int(512 * CHARS_PER_TOKEN)
    assert context_char_budget(Small(), max_tokens=128) == int((512 - 128 - 192) * CHARS_PER_TOKEN)
    assert context_char_budget(object(), context_tokens=4000) == int(4000 * CHARS_PER_TOKEN)  # HTTP: no n_ctx


# ------------------------------------------------------------------------------------------------ prompt, answers
def test_answer_prompt_starts_with_the_shared_context_block():
    from lab.analysis.answer_metrics import SUPPORT_PROMPT

    p = answer_prompt(" What is X? ", ["chunk one", "chunk two"])
    assert p.startswith("Context:\nchunk one\n\nchunk two\n\n") and "Question: What is X?\nAnswer:" in p
    assert NONCOMMITTAL in p and PROMPT_VERSION
    # the judge's support prompt begins with the same block, so llama.cpp reuses the evaluated context
    assert ANSWER_PROMPT.split("{context}")[0] == SUPPORT_PROMPT.split("{context}")[0] == "Context:\n"


def test_noncommittal_and_cleaning():
    assert is_noncommittal(NONCOMMITTAL) and is_noncommittal("I do not know the answer.")
    assert is_noncommittal("The context does not contain this information.")
    assert not is_noncommittal("Use set_dont_use.") and not is_noncommittal(None) and not is_noncommittal("")
    assert clean_answer("  Answer: Use X.  ") == "Use X."
    assert drop_unfinished_sentence("One. Two is cut") == "One."
    assert drop_unfinished_sentence("Run:\n```tcl\nfoo\n```\nThen the") == "Run:\n```tcl\nfoo\n```"
    assert drop_unfinished_sentence("no end at all") == "no end at all"
    assert drop_unfinished_sentence("Set 0.5 as alpha") == "Set 0.5 as alpha"  # a decimal point is no end


def test_unescape_newlines_only_when_the_text_has_none():
    assert unescape_newlines("a\\nb\\tc") == "a\nb\tc"
    assert unescape_newlines("a\nprintf('\\n')") == "a\nprintf('\\n')"


def test_retrieved_contexts_rank_order_and_missing_ids():
    corpus = Corpus({"a": Document("a", "text a"), "b": Document("b", "text b", title="B"),
                     "c": Document("c", "text c")})
    run = Run({"q1": {"a": 1.0, "b": 2.0, "c": 1.0}, "q2": {}})
    got = retrieved_contexts(run, corpus, ["q1", "q2", "q3"], k=2)
    assert got == {"q1": [("b", "B\ntext b"), ("c", "text c")], "q2": [], "q3": []}  # tie: doc id descending
    with pytest.raises(DataError, match="'zz'.*corpus the run was made on"):
        retrieved_contexts(Run({"q": {"zz": 1.0}}), corpus, ["q"], k=1)


def test_reference_answers_and_samples_from_ord_qa():
    from lab.experiment.run import load

    ds = load("data/ord-qa", progress=False)
    queries, _ = ds.split("test")
    refs = reference_answers(queries)
    assert len(refs) == 90 and "\\n" not in refs["1"] and "\n```tcl\nset_routing_alpha" in refs["1"]
    run = Run({"1": {"global_routing_6": 3.0, "pin_placement_8": 2.0, "install_0": 1.0}})
    samples = build_samples(queries.subset(["1"]), run, ds.corpus, k=2, context_chars=900)
    s = samples[0]
    assert s.context_ids == ["global_routing_6", "pin_placement_8"] and s.reference == refs["1"]
    assert len(CONTEXT_SEPARATOR.join(s.contexts)) <= 900 and s.contexts[0].startswith("### Set Routing Alpha")
    assert reference_answers(Queries({"x": "q"}, {"x": {"answer": "  "}})) == {}


def test_completion_cost_counts_only_generated_tokens():
    def mk(cached):
        return Completion("t", 10, 5, 0.5, cached, "m", "stop", 2.0)

    cost = completion_cost([mk(False), mk(True), None])
    assert cost == {"calls": 2, "cache_hits": 1, "prompt_tokens": 10, "completion_tokens": 5, "seconds": 1.0,
                    "gen_seconds": 4.0}


class _Failing:
    identity, backend = "test:failing", "test"

    def complete(self, prompt, system=None, **gen):
        raise LLMError("test-endpoint", "prompt too long", "context", hint="shorten it")


def test_failed_generation_is_kept_as_none_with_its_error():
    s = generate_answer(_Failing(), AnswerSample("q", "What?", ["ctx"], ["d"]))
    assert s.answer is None and "prompt too long" in s.answer_error and s.answer_cost["calls"] == 0
    # no context: noncommittal without a call (the failing LLM is never asked)
    s = generate_answer(_Failing(), AnswerSample("q", "What?", [], []))
    assert s.answer == NONCOMMITTAL and s.answer_error is None


def test_real_answer_from_smollm2(tmp_path):
    from lab.models.llm import load_llm

    llm = load_llm("local", cache_dir=tmp_path, progress=False)
    sample = AnswerSample("q", "What is the default install directory of OpenROAD?",
                          ["The default install directory is `/usr/local`."], ["install_3"])
    generate_answer(llm, sample, max_tokens=24)
    assert sample.answer and sample.answer_error is None
    assert sample.answer_cost["calls"] == 1 and sample.answer_cost["completion_tokens"] <= 24
    assert llm.usage()["generated"] == 1
    llm.close()
