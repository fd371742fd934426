"""lab.retrievers.qna: parsers of the small model's output, cutting text to the context, pseudo-documents and their
mapping back to chunks (exact ranks), and the strategy end to end with real SmolLM2 calls (a handful, short)."""
from __future__ import annotations

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document
from lab.retrievers.base import Context, build
from lab.retrievers.qna import (
    PROMPT_VERSION,
    fit_text,
    is_context_overflow,
    map_fitted,
    max_by_chunk,
    parse_questions,
    parse_summary,
    pseudo_documents,
    text_budget,
)


# ------------------------------------------------------------------------------------------------ parsers
def test_parse_questions_numbered_list():
    text = "1. What is the build process?\n2) How do I run the flow?\n3: Which platforms are supported?"
    assert parse_questions(text, 3) == ["What is the build process?", "How do I run the flow?",
                                        "Which platforms are supported?"]


def test_parse_questions_real_smollm2_shapes():
    # answers SmolLM2-135M gave on ord-qa chunks: headings, "Question:" echoes, duplicates, rambling answers
    text = ("### 1. How to add tapcells to a map\n\nQuestion: How to add tapcells to a map?\n\nAnswer:\n\n"
            "### 2. How to add tapcells with a map type\n\n### 3")
    assert parse_questions(text, 3) == ["How to add tapcells to a map", "How to add tapcells with a map type"]
    text = ("1. What is the minimum number of CPU cores?\n2. How does `gcd` compare?\n\nQuestion:\n\n"
            "What is the minimum number of CPU cores?\n\nQuestion:\n\nWhat is the RAM needed?")
    assert parse_questions(text, 3) == ["What is the minimum number of CPU cores?", "How does `gcd` compare?",
                                        "What is the RAM needed?"]


def test_parse_questions_preamble_filler_and_prose_are_dropped():
    assert parse_questions("Here are three questions that can be answered by the text:") == []
    assert parse_questions("What's your next question?") == []
    assert parse_questions("1. 1.1.1.1:\n\nThe flow generates a GDS file.\n\n2. 2.1.1.1:") == []
    assert parse_questions("Sure. What is X really? And why is Y so? Q3: Which Z is used?") == [
        "What is X really?", "And why is Y so?", "Which Z is used?"]


def test_parse_questions_limits_and_edge_cases():
    text = "- What is A here?\n- what is a here ?\n* **What is B here?**\n- Why?\n- What is C here?"
    assert parse_questions(text) == ["What is A here?", "What is B here?", "What is C here?"]  # dup, too short
    assert parse_questions(text, 2) == ["What is A here?", "What is B here?"]
    assert parse_questions("") == [] and parse_questions(None) == []
    assert parse_questions("```tcl\nset x ?\n```") == []
    assert parse_questions("What " + "very " * 80 + "long?") == []  # over max_chars


def test_parse_summary():
    assert parse_summary("Here is a summary of the text:\n\nThe tool places pins. It has options.") == \
        "The tool places pins. It has options."
    # headings dropped, repeated sentences (the small model loops) kept once
    assert parse_summary("## Build\nThe `make` command is used. The `make` command is used. It builds GDS.") == \
        "The `make` command is used. It builds GDS."
    assert parse_summary("Summary: **Short** but fine text here.") == "Short but fine text here."
    assert parse_summary("```\n# Build command\n# Build command\n```") is None  # 4 words: too short
    # prose inside an unclosed code fence (a real SmolLM2 answer): the second pass keeps it
    fenced = ("```tcl  # This is an example command that checks if a site has legal placement.\n"
              " -verbose: Enable verbose logging for this task")
    assert parse_summary(fenced) == ("This is an example command that checks if a site has legal placement. "
                                     "-verbose: Enable verbose logging for this task")
    # prose outside the fence wins over the code inside it
    assert parse_summary("```\nmake build all now please\n```\nThe flow builds the design.") == \
        "The flow builds the design."
    assert parse_summary("") is None and parse_summary("Too short.") is None


# ------------------------------------------------------------------------------------------------ context fitting
def test_fit_text_and_budget():
    text = "word " * 1000
    cut = fit_text(text, 100, chars_per_token=3.0)
    assert len(cut) <= 300 and text.startswith(cut) and cut.endswith("word")
    assert fit_text("short text", 100) == "short text"
    assert fit_text("x" * 1000, 10, chars_per_token=2.0) == "x" * 20  # no space: a hard cut
    assert text_budget(2048, 96) == 2048 - 96 - 64
    with pytest.raises(ConfigError, match="raise n_ctx"):
        text_budget(256, 200)


# ------------------------------------------------------------------------------------------------ mapping
def _corpus() -> Corpus:
    docs = [Document("a", "Routing congestion is reported per layer after global routing."),
            Document("b", "Tapcells are inserted at a fixed distance in every row.", "Tapcell"),
            Document("c", "The GUI shows timing paths and heat maps.")]
    return Corpus({d.id: d for d in docs})


def test_pseudo_documents_ids_order_and_fallback():
    qs = {"a": ["How is congestion reported?", "When is congestion reported?"], "c": []}
    sums = {"a": "Congestion per layer.", "b": None}
    pseudo, owner, fallback = pseudo_documents(_corpus(), qs, sums, include_original=True)
    assert pseudo.ids == ["a::text", "a::q1", "a::q2", "a::summary", "b::text", "c::text"]
    assert pseudo["b::text"].title == "Tapcell" and pseudo["a::q2"].text == "When is congestion reported?"
    assert owner == {"a::text": "a", "a::q1": "a", "a::q2": "a", "a::summary": "a", "b::text": "b", "c::text": "c"}
    assert fallback == 0
    pseudo, owner, fallback = pseudo_documents(_corpus(), qs, sums, include_original=False)
    assert pseudo.ids == ["a::q1", "a::q2", "a::summary", "b::text", "c::text"] and fallback == 2


def test_max_by_chunk_exact_ranks():
    owner = {"a::text": "a", "a::q1": "a", "b::text": "b", "b::q1": "b", "c::q1": "c", "d::text": "d"}
    hits = [("b::q1", 0.9), ("a::text", 0.7), ("c::q1", 0.7), ("a::q1", 0.95), ("b::text", 0.1), ("d::text", 0.2)]
    # a: max(0.7, 0.95); b: max(0.9, 0.1); c 0.7; d 0.2
    assert max_by_chunk(hits, owner, 10) == [("a", 0.95), ("b", 0.9), ("c", 0.7), ("d", 0.2)]
    assert max_by_chunk(hits, owner, 2) == [("a", 0.95), ("b", 0.9)]
    # equal scores: chunk id descending (Run.ranked's rule)
    assert max_by_chunk([("a::q1", 0.5), ("c::q1", 0.5), ("b::q1", 0.5)], owner, 3) == [
        ("c", 0.5), ("b", 0.5), ("a", 0.5)]


def test_question_pseudo_documents_lift_their_chunk_with_a_real_base():
    """A query worded like a generated question finds that question's chunk first, even though the chunk's own
    text shares none of its words; without the questions (original text only) the chunk is not found at all."""
    qs = {"c": ["How can I see the worst slack in the viewer window?"]}
    pseudo, owner, _ = pseudo_documents(_corpus(), qs, {}, include_original=True)
    base = build("bm25", {}, Context(progress=False))
    base.index(pseudo)
    query = "worst slack viewer window"
    assert max_by_chunk(base.search_one(query, 10), owner, 3)[0][0] == "c"
    plain = build("bm25", {}, Context(progress=False))
    plain.index(_corpus())
    assert [d for d, _ in plain.search_one(query, 3)] == []


def test_bad_params(tmp_path):
    ctx = Context(cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="generate='answers' is not valid; generate takes one of"):
        build("qna", {"generate": "answers"}, ctx)
    with pytest.raises(ConfigError, match="n_questions"):
        build("qna", {"n_questions": 0}, ctx)
    with pytest.raises(ConfigError, match="nest"):
        build("qna", {"base": "qna"}, ctx)



from builders import ordqa_subset  # noqa: E402


def test_qna_end_to_end_with_smollm2_then_all_from_cache(tmp_path):
    from lab.experiment.run import run_experiment

    ds = ordqa_subset()
    params = {"generate": "questions", "n_questions": 2, "question_max_tokens": 32}
    first = run_experiment(ds, "qna", params, ctx=Context(cache_dir=tmp_path, progress=False), max_queries=3)
    n_chunks = len(ds.corpus)
    assert first.cost["llm_index_calls"] == n_chunks and first.cost["llm_index_generated"] == n_chunks
    assert first.cost["llm_index_tokens"] > 0 and first.cost["llm_index_seconds"] > 0
    assert first.cost["llm_query_calls"] == 0
    info = first.info["retriever"]
    assert info["prompt_version"] == PROMPT_VERSION and info["llm"].startswith("gguf:SmolLM2")
    assert info["base"]["strategy"] == "dense" and info["generation"]["chunks"] == n_chunks
    gen = info["generation"]
    assert gen["pseudo_documents"] == n_chunks + gen["questions_kept"]  # originals + kept questions
    assert 0 <= gen["questions_unusable"] <= n_chunks
    # every query's hits are chunks of the corpus (not pseudo-documents), at most one entry per chunk
    for qid in first.run:
        assert set(first.run[qid]) <= set(ds.corpus.ids)
    assert first.summary()["ndcg@10"] > 0

    again = run_experiment(ds, "qna", params, ctx=Context(cache_dir=tmp_path, progress=False), max_queries=3)
    assert again.cost["llm_index_calls"] == n_chunks
    assert again.cost["llm_index_cache_hits"] == n_chunks and again.cost["llm_index_generated"] == 0
    assert again.cost["llm_index_tokens"] == 0 and again.cost["llm_index_seconds"] == 0
    # the cold cost is still reported on the cached rerun: the generation times stored with the answers
    assert again.cost["llm_index_cold_seconds"] == pytest.approx(first.cost["llm_index_cold_seconds"])
    assert first.cost["llm_index_cold_seconds"] == pytest.approx(first.cost["llm_index_seconds"])
    assert again.run.scores == first.run.scores
    assert again.info["retriever"]["generation"] == gen


def test_qna_summary_path_with_smollm2(tmp_path):
    ds = ordqa_subset()
    corpus = Corpus({d: ds.corpus[d] for d in ds.corpus.ids[:2]})
    r = build("qna", {"generate": "summary", "summary_max_tokens": 32, "include_original": False, "base": "bm25"},
              Context(cache_dir=tmp_path, progress=False))
    r.index(corpus)
    assert r.usage()["generated"] == 2 and set(r.summaries) == set(corpus.ids)
    stats = r.describe()["generation"]
    usable = [c for c, s in r.summaries.items() if s]
    assert stats["summaries_unusable"] == 2 - len(usable) and stats["fallback_original"] == 2 - len(usable)
    assert stats["pseudo_documents"] == 2  # one summary or, where it was unusable, the chunk itself
    hits = r.search_one(ds.corpus[corpus.ids[0]].text[:200], 2)
    assert {d for d, _ in hits} <= set(corpus.ids)


def test_map_fitted_refits_a_prompt_that_overflows_the_context(tmp_path):
    """A real context overflow (SmolLM2 with a 256-token context): the prompt is rebuilt with half the text."""
    from lab.models.llm import LLMError, LocalLLM

    llm = LocalLLM(None, n_ctx=256, cache_dir=tmp_path, progress=False)
    built = []

    def make_prompt(i: int, scale: float) -> str:
        built.append(scale)
        return "Say ok. " + "word " * int(400 * scale)

    answers, refits = map_fitted(llm, make_prompt, 1, progress=False, max_tokens=2)
    assert refits == 1 and built == [1.0, 0.5] and len(answers) == 1 and answers[0].completion_tokens >= 1
    assert is_context_overflow(LLMError("x", "too long", hint="shorten the prompt or raise n_ctx (now 256)"))
    assert not is_context_overflow(ValueError("context")) and not is_context_overflow(LLMError("x", "HTTP 401"))


def test_index_build_prints_its_estimate_and_asks_each_chunk_once(tmp_path, monkeypatch, capsys):
    """Questions for three chunks with INDEX_ESTIMATE_CALLS lowered to 1: the estimate of the build is printed on
    stderr before the rest are generated (SHOW_SECONDS 0: shown however short), and each chunk is asked once."""
    from lab.models import estimate as estimate_module
    from lab.retrievers import qna

    monkeypatch.setattr(qna, "INDEX_ESTIMATE_CALLS", 1)
    monkeypatch.setattr(estimate_module, "SHOW_SECONDS", 0.0)
    ds = ordqa_subset()
    corpus = Corpus({d: ds.corpus[d] for d in ds.corpus.ids[:3]})
    r = build("qna", {"generate": "questions", "n_questions": 2, "question_max_tokens": 24, "base": "bm25"},
              Context(cache_dir=tmp_path, progress=False))
    r.index(corpus)
    err = capsys.readouterr().err
    assert "estimate (index: qna: questions for 3 chunks): 3 LLM calls (0 cached), about " in err, err
    assert r.usage()["calls"] == 3 and r.usage()["generated"] == 3 and set(r.questions) == set(corpus.ids)
