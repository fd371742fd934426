"""Answers generated from retrieved contexts: the generation half of RAG, to be judged by
:mod:`lab.analysis.answer_metrics`.

Conventions
- Contexts are the top-``k`` hits of a run in rank order (:meth:`lab.data.types.Run.ranked`, trec_eval ties),
  read from the corpus the run was made on (chunks when the experiment chunked). A hit missing from the corpus is
  an error naming it, never skipped.
- The context must fit the model: ``context_chars`` characters in all, shared between the chunks by water-filling
  (:func:`fit_contexts`: short chunks keep their full text, long ones are cut to an equal share, at a word
  boundary, marked with ``" ..."``). :func:`context_char_budget` turns the LLM's context window (``n_ctx``, for a
  local GGUF) into that budget with a conservative :data:`CHARS_PER_TOKEN`; judges see the same truncated chunks
  as the generator, so faithfulness is measured against what the answer was written from.
- The prompt is a module constant (:data:`ANSWER_PROMPT`) versioned by :data:`PROMPT_VERSION`; change one and
  bump the other (results and the LLM cache are keyed by the text, results name the version). Every prompt of
  a query starts with the same ``Context:`` block as the judge's support prompt, so a llama.cpp backend reuses
  the evaluated context (its prompt cache) across the answer and the claim judgements of that query.
- The prompt asks for :data:`NONCOMMITTAL` when the context has no answer; :func:`is_noncommittal` recognises it
  (RAGAS gives a noncommittal answer an answer relevancy of 0).
- An answer cut by ``max_tokens`` loses its unfinished last sentence (:func:`drop_unfinished_sentence`), so no
  half claim is judged.
- A failed generation (an :class:`lab.models.llm.LLMError`) is kept as ``answer=None`` with its error, never an
  empty string: the metrics count it as a failure.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from lab.core.errors import DataError
from lab.data.types import Corpus, Queries, Run
from lab.models.llm import LLMError

PROMPT_VERSION = "answer-v1"
NONCOMMITTAL = "I don't know."
ANSWER_PROMPT = (
    "Context:\n{context}\n\n"
    "Answer the question using only the context above, in a few sentences. If the context does not contain the "
    "answer, reply: " + NONCOMMITTAL + "\n\n"
    "Question: {question}\n"
    "Answer:"
)
#: characters per token assumed when fitting contexts into a context window: low (conservative) for technical
#: text with markup and code, which tokenises worse than prose.
CHARS_PER_TOKEN = 3.0
#: tokens kept free for the prompt's own words, the question and the chat template.
PROMPT_RESERVE_TOKENS = 192
#: default context size in tokens when the LLM does not say (an HTTP endpoint); also the upper bound used for a
#: local model, whose prompt evaluation dominates the cost (~60 tokens/s on one thread).
DEFAULT_CONTEXT_TOKENS = 1024
CONTEXT_SEPARATOR = "\n\n"
TRUNCATION_MARK = " ..."

_NONCOMMITTAL_RE = re.compile(
    r"^\W*(i\s+(do\s+not|don'?t|cannot|can'?t)\s+know|"
    r"(the\s+)?context\s+does\s+not\s+(contain|say|provide|mention)|"
    r"i\s+(cannot|can'?t)\s+answer)", re.IGNORECASE)


@dataclass
class AnswerSample:
    """One query's inputs and answer. ``contexts``: the chunk texts given to the generator (truncated), in rank
    order, ``context_ids`` their ids. ``answer`` None when generation failed (``answer_error`` says why);
    ``reference`` None when the dataset has no reference answer."""

    query_id: str
    question: str
    contexts: list[str]
    context_ids: list[str]
    reference: str | None = None
    answer: str | None = None
    answer_error: str | None = None
    answer_cost: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------------ pure parts
def context_char_budget(llm=None, max_tokens: int = 128, context_tokens: int | None = None) -> int:
    """Characters of context that fit: ``min(context_tokens, n_ctx - max_tokens - PROMPT_RESERVE_TOKENS)`` tokens
    times :data:`CHARS_PER_TOKEN`. ``n_ctx`` is the LLM's attribute when it has one (a local GGUF), else
    unbounded; ``context_tokens`` defaults to :data:`DEFAULT_CONTEXT_TOKENS`. At least 256 characters."""
    tokens = DEFAULT_CONTEXT_TOKENS if context_tokens is None else int(context_tokens)
    n_ctx = getattr(llm, "n_ctx", None)
    if n_ctx:
        tokens = min(tokens, int(n_ctx) - int(max_tokens) - PROMPT_RESERVE_TOKENS)
    return max(256, int(tokens * CHARS_PER_TOKEN))


def truncate_text(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters at the last whitespace (when one lies in the second half
    of the cut), with :data:`TRUNCATION_MARK` appended inside the limit; unchanged when it fits."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(TRUNCATION_MARK))
    cut = text[:keep]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= keep // 2:
        cut = cut[:space]
    return cut.rstrip() + TRUNCATION_MARK


def fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Water-filling: characters granted to each text so that the total is at most ``budget``; a text shorter than
    an equal share of what remains keeps its full length, the rest share the remainder equally (integer shares,
    in input order). Example: lengths [100, 1000, 1000], budget 700 -> [100, 300, 300]."""
    shares = [0] * len(lengths)
    remaining = max(0, int(budget))
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    for n, i in enumerate(order):
        share = remaining // (len(order) - n)
        shares[i] = min(int(lengths[i]), share)
        remaining -= shares[i]
    return shares


def fit_contexts(texts: Sequence[str], max_chars: int) -> list[str]:
    """The texts truncated (:func:`truncate_text`) to their :func:`fair_shares` of ``max_chars`` minus the
    separators, rank order kept. When a text would be cut to under 40 characters, the lowest-ranked text is
    dropped and the shares recomputed."""
    texts = list(texts)
    while texts:
        budget = max_chars - len(CONTEXT_SEPARATOR) * (len(texts) - 1)
        shares = fair_shares([len(t) for t in texts], budget)
        if all(s >= min(40, len(t)) for t, s in zip(texts, shares, strict=True)) or len(texts) == 1:
            return [truncate_text(t, s) for t, s in zip(texts, shares, strict=True)]
        texts = texts[:-1]
    return []


def format_context(contexts: Sequence[str]) -> str:
    """The context block of every prompt: the chunks joined by a blank line."""
    return CONTEXT_SEPARATOR.join(c.strip() for c in contexts)


def answer_prompt(question: str, contexts: Sequence[str]) -> str:
    """The generation prompt (:data:`ANSWER_PROMPT`) for one question."""
    return ANSWER_PROMPT.format(context=format_context(contexts), question=question.strip())


def clean_answer(text: str) -> str:
    """A generated answer without a leading "Answer:" label and surrounding whitespace."""
    return re.sub(r"^\s*answer\s*:\s*", "", text or "", flags=re.IGNORECASE).strip()


def drop_unfinished_sentence(text: str) -> str:
    """A generation cut by max_tokens without its last, unfinished sentence: the text up to the last ``.``,
    ``!``, ``?`` or closing code fence that is followed by whitespace or the end; unchanged when there is none."""
    ends = [m.end() for m in re.finditer(r"(?:[.!?]|```)(?=\s|$)", text)]
    return text[:ends[-1]].rstrip() if ends else text


def is_noncommittal(answer: str | None) -> bool:
    """Whether the answer declines to answer (starts with :data:`NONCOMMITTAL` or a close paraphrase)."""
    return bool(answer) and bool(_NONCOMMITTAL_RE.match(answer.strip()))


def retrieved_contexts(run: Run, corpus: Corpus, query_ids: Sequence[str], k: int) -> dict[str, list[tuple[str, str]]]:
    """``{query id: [(doc id, text), ...]}``: the top ``k`` hits of each query in rank order with their text
    (title and text joined when the document has a title). A query without hits gets an empty list."""
    out = {}
    for qid in query_ids:
        hits = []
        for doc_id, _ in run.ranked(qid, k):
            if doc_id not in corpus:
                raise DataError(getattr(corpus, "name", "corpus") or "corpus",
                                f"the run retrieved {doc_id!r} for query {qid!r} but the corpus has no such id",
                                field="doc_id", hint="pass the corpus the run was made on (chunks when chunked)")
            doc = corpus[doc_id]
            hits.append((doc_id, f"{doc.title}\n{doc.text}" if doc.title else doc.text))
        out[qid] = hits
    return out


def unescape_newlines(text: str) -> str:
    """Literal ``\\n`` / ``\\t`` sequences turned into line breaks / tabs, only in a text without real line
    breaks (ord-qa's reference answers were stored with escaped newlines); other texts are returned unchanged."""
    if "\n" in text or "\\n" not in text:
        return text
    return text.replace("\\n", "\n").replace("\\t", "\t")


def reference_answers(queries: Queries, field_name: str = "answer") -> dict[str, str]:
    """Reference answers from query metadata (ord-qa: ``metadata.answer``), newlines unescaped
    (:func:`unescape_newlines`); queries without one are left out."""
    out = {}
    for qid in queries:
        value = (queries.metadata.get(qid) or {}).get(field_name)
        if isinstance(value, str) and value.strip():
            out[qid] = unescape_newlines(value).strip()
    return out


def build_samples(queries: Queries, run: Run, corpus: Corpus, k: int, context_chars: int,
                  references: Mapping[str, str] | None = None) -> list[AnswerSample]:
    """One :class:`AnswerSample` per query (in ``queries`` order) with its fitted top-``k`` contexts and its
    reference answer (default: from the query metadata)."""
    refs = reference_answers(queries) if references is None else dict(references)
    ids = list(queries)
    contexts = retrieved_contexts(run, corpus, ids, k)
    out = []
    for qid in ids:
        hits = contexts[qid]
        fitted = fit_contexts([t for _, t in hits], context_chars)
        out.append(AnswerSample(qid, queries[qid], fitted, [d for d, _ in hits][:len(fitted)], refs.get(qid)))
    return out


# ------------------------------------------------------------------------------------------------ generation
def completion_cost(completions) -> dict[str, float]:
    """Cost of some completions (None entries skipped): ``calls``, ``cache_hits``, ``prompt_tokens`` and
    ``completion_tokens`` paid (generated, not cached), ``seconds`` (wall time of the calls) and
    ``gen_seconds`` (what generating them took when they were generated: the cold cost)."""
    out = dict.fromkeys(("calls", "cache_hits", "prompt_tokens", "completion_tokens"), 0)
    out.update(seconds=0.0, gen_seconds=0.0)
    for c in completions:
        if c is None:
            continue
        out["calls"] += 1
        out["cache_hits"] += int(c.cached)
        if not c.cached:
            out["prompt_tokens"] += c.prompt_tokens
            out["completion_tokens"] += c.completion_tokens
        out["seconds"] += c.seconds
        out["gen_seconds"] += c.gen_seconds
    return out


def generate_answer(llm, sample: AnswerSample, max_tokens: int = 128, breaker=None, **gen) -> AnswerSample:
    """Fill ``sample.answer`` (or ``answer_error``) and ``answer_cost`` with one generation from its contexts.
    A query with no context is answered :data:`NONCOMMITTAL` without a call. ``breaker``: a
    :class:`lab.models.breaker.FailureBreaker` counting failed calls (raises EndpointDown once it trips)."""
    if not sample.contexts:
        sample.answer, sample.answer_cost = NONCOMMITTAL, completion_cost([])
        return sample
    if breaker is not None:
        breaker.check()
    try:
        c = llm.complete(answer_prompt(sample.question, sample.contexts), max_tokens=max_tokens, **gen)
    except LLMError as e:
        if e.status == "connection refused":
            raise
        sample.answer, sample.answer_error, sample.answer_cost = None, str(e), completion_cost([])
        if breaker is not None:
            breaker.failure(str(e))
            breaker.check()
        return sample
    if breaker is not None:
        breaker.success()
    sample.answer = clean_answer(c.text)
    if c.finish_reason == "length":
        sample.answer = drop_unfinished_sentence(sample.answer)
    if not sample.answer:
        sample.answer, sample.answer_error = None, "the LLM returned an empty answer"
    sample.answer_cost = completion_cost([c])
    return sample
