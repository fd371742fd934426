"""A candidate question: its prompt and params, the loop that answers a batch of them (every call through
:func:`lab.models.breaker.guarded_call`, retried when a text gate fails), and the gates run on each."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from lab.core.cache import Cache, EmbeddingCache
from lab.data.types import Corpus
from lab.models.breaker import guarded_call
from lab.models.embedders import load_embedder
from lab.testset.gates import (
    GateReport,
    answer_after_echo,
    answerable,
    check_text_gates,
    corpus_vocabulary,
    stub_evidence,
    unknown_names,
)
from lab.testset.generation_config import GenerationConfig
from lab.testset.passages import Passage
from lab.testset.qa_prompt import JUDGE_PROMPTS, build_prompt, parse_qa, parse_yes_no, qa_schema, question_type
from lab.testset.spans import SupportSpan, not_prose_span, support_span
from lab.text.tokenize import Tokenizer, detect_language


@dataclass
class Candidate:
    index: int
    unit_id: str
    round: int
    language: str
    prompt: str
    passage: str
    span: tuple[int, int] = (0, 0)
    section: str = ""
    qtype: str = "what"
    text: str = ""
    tries: int = 0
    qa: dict | None = None
    repaired: bool = False
    results: dict = field(default_factory=dict)
    measures: dict = field(default_factory=dict)
    dropped_at: str | None = None
    qid: str | None = None
    error: str | None = None
    support: SupportSpan | None = None  # the evidence span (lab.testset.spans), once the gates computed it
    #: (question, answer, gate results, measures) of the last text-gate run: a retry's check and the batch's gates
    #: read the same run, so each text gate runs once per answer
    text_gates: tuple | None = field(default=None, repr=False)

    def text_gate_results(self, models: "GateModels", gates) -> tuple[dict, dict]:
        """The gates that need no model (lab.testset.gates.check_text_gates) on this candidate's parsed answer, run
        once per (question, answer)."""
        assert self.qa is not None
        q, a = self.qa["question"], self.qa["answer"]
        if self.text_gates is None or self.text_gates[:2] != (q, a):
            res, meas = check_text_gates(q, a, set(models.tokenizer(self.passage)), gates, models.tokenizer,
                                         self.language, self.passage)
            self.text_gates = (q, a, res, meas)
        return self.text_gates[2], self.text_gates[3]

    def record(self) -> dict:
        return {"index": self.index, "unit_id": self.unit_id, "passage_span": list(self.span), "section": self.section,
                "round": self.round, "language": self.language, "question_type": self.qtype,
                "tries": self.tries, "raw": self.text[:2000], "error": self.error,
                "question": (self.qa or {}).get("question"),
                "answer": (self.qa or {}).get("answer"), "repaired": self.repaired, "results": self.results,
                "measures": {k: round(v, 4) for k, v in self.measures.items()}, "dropped_at": self.dropped_at,
                "accepted_as": self.qid}


def generation_params(cfg: GenerationConfig, round_: int, attempt: int, language: str = "en",
                qtype: str | None = None) -> dict:
    """Generation params of a candidate's ``attempt``-th try (0 = first) in ``round_``."""
    params: dict[str, Any] = {"max_tokens": cfg.max_tokens}
    if attempt:
        params.update(temperature=cfg.retry_temperature, seed=cfg.seed + 1000 * attempt + round_)
    elif round_:
        params.update(temperature=cfg.round_temperature, seed=cfg.seed + round_)
    else:
        params.update(temperature=0.0, seed=cfg.seed)
    if cfg.json_mode == "schema":
        params["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "question_answer", "strict": True, "schema": qa_schema(language, qtype, cfg.write_first)}}
    return params


def passage_candidates(order: list[Passage], cfg: GenerationConfig) -> Iterator[Candidate]:
    i = 0
    for r in range(cfg.rounds):
        for p in order:
            lang = detect_language(p.text)
            qtype = question_type(i, r, cfg.seed)
            yield Candidate(i, p.unit_id, r, lang, build_prompt(p.text, lang, qtype=qtype), p.text, (p.start, p.end),
                            p.section, qtype)
            i += 1


class GateModels:
    """The embedder and tokenizer the gates use, loaded once."""

    def __init__(self, cache_dir, progress: bool, embedder=None, topic_model: str = "multilingual-e5-small"):
        self.embedder = embedder or load_embedder(topic_model, cache_dir=cache_dir, progress=progress)
        self.vectors = EmbeddingCache(Cache(cache_dir), progress=False)
        self.tokenizer = Tokenizer(language="auto", stem=True, stopwords="nltk", cache_dir=cache_dir)
        self.vocabulary: frozenset[str] | None = None  # the corpus's words, for the known_names gate

    def encode(self, texts: list[str], kind: str) -> np.ndarray:
        return self.vectors.encode(self.embedder, texts, kind=kind)


def safe_map(llm, prompts: list[str], breaker=None, per_prompt: list[dict] | None = None,
              **gen) -> list[tuple[str | None, str | None]]:
    """(text, None) or (None, error) per prompt, in order, on up to ``llm.concurrency`` threads: an LLMError or a
    backend failure (llama.cpp refusing output that breaks the grammar) costs that candidate, not the run. With a
    :class:`lab.models.breaker.FailureBreaker`, LLMErrors (the endpoint failed, retries spent) are counted; once it
    trips, prompts not yet sent are skipped and :class:`lab.models.breaker.EndpointDown` is raised.
    ``per_prompt``: generation params of each prompt (then ``gen`` is ignored), so prompts with different params
    (question types, rounds) are in flight together and a local GGUF decodes them in one batch."""
    params = per_prompt if per_prompt is not None else [gen] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"per_prompt: {len(params)} params for {len(prompts)} prompts")

    def typed(e: BaseException) -> str:
        return f"{type(e).__name__}: {e}"

    def one(item):
        prompt, prompt_gen = item
        try:
            text, error = guarded_call(breaker, lambda: llm.complete(prompt, **prompt_gen).text, describe=typed)
        except RuntimeError as e:  # a backend failure (llama.cpp refusing its output) costs this candidate only
            return None, typed(e)[:300]
        return (text, None) if error is None else (None, error if isinstance(error, str) else typed(error)[:300])

    workers = max(1, min(int(getattr(llm, "concurrency", 1)), len(prompts)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="testset-llm") as pool:
        out = list(pool.map(one, zip(prompts, params, strict=True)))
    if breaker is not None:
        breaker.check()
    return out


def generate_batch(llm, batch: list[Candidate], cfg: GenerationConfig, report: GateReport, breaker=None,
                    retry_if: Callable[[Candidate], bool] | None = None) -> None:
    """Fill ``text``/``qa`` of each candidate: generate, parse, retry unparseable or failed ones. Each try sends
    every candidate still to do at once (each with its own params: round, type, language), so ``concurrency``
    slots stay busy; candidates grouped by params left a batch of 8 mixed types one to three calls in flight.
    ``retry_if(candidate)``: a parsed answer it returns True for (``retry_on="text_gates"``: a text gate failed) is
    generated again too; the new answer replaces it only when it parses."""
    todo = batch
    for attempt in range(cfg.retries + 1):
        if not todo:
            break
        outs = safe_map(llm, [c.prompt for c in todo], breaker,
                         per_prompt=[generation_params(cfg, c.round, attempt, c.language, c.qtype) for c in todo])
        for c, (text, error) in zip(todo, outs, strict=True):
            c.tries = attempt + 1
            if error:
                report.extra["llm_errors"] = report.extra.get("llm_errors", 0) + 1
            qa, repaired = parse_qa(text) if text is not None else (None, False)
            if qa is not None:
                qa["answer"] = answer_after_echo(qa["question"], qa["answer"])
            if qa is None and c.qa is not None:  # a retry after a failed gate that did not parse: keep the first
                continue
            c.text, c.error, c.qa, c.repaired = (text if text is not None else ""), error, qa, repaired
        if attempt:
            report.retries += len(todo)
        redo = [c for c in todo if c.qa is not None and retry_if is not None and retry_if(c)]
        if redo and attempt < cfg.retries:
            report.extra["gate_retries"] = report.extra.get("gate_retries", 0) + len(redo)
        todo = [c for c in todo if c.qa is None] + redo
        todo.sort(key=lambda c: c.index)


def fails_text_gates(c: Candidate, models: GateModels, cfg: GenerationConfig) -> bool:
    """Whether a parsed candidate fails a gate that needs no model (cheap: under a millisecond)."""
    res, meas = c.text_gate_results(models, cfg.gates)
    return not all(res.values()) or bool(meas["non_answer"])


def judge_answerable(llm, pairs: list[tuple[str, str, str]], cfg: GenerationConfig, breaker=None) -> list[bool | None]:
    """LLM judge over (passage, question, language) triples: can the passage answer the question?"""
    prompts = [JUDGE_PROMPTS["zh" if lang == "zh" else "en"].format(passage=p, question=q) for p, q, lang in pairs]
    outs = safe_map(llm, prompts, breaker, max_tokens=4, temperature=0.0, seed=cfg.seed)
    return [parse_yes_no(text) if text is not None else None for text, _ in outs]


def check_batch(batch: list[Candidate], models: GateModels, llm, cfg: GenerationConfig, breaker=None,
                 corpus: Corpus | None = None) -> None:
    """Gate results of each candidate except not_duplicate (which needs the accepted set, in order); with
    ``corpus``, each candidate's evidence span (``support``) and the prose_evidence gate."""
    g = cfg.gates
    valid = [c for c in batch if c.qa is not None]
    for c in batch:
        c.results = {"valid_json": c.qa is not None}
    if not valid:
        return
    for c in valid:
        res, meas = c.text_gate_results(models, g)
        c.results.update(res)
        c.measures.update(meas)
        if corpus is not None:
            text = corpus[c.unit_id].text
            c.support = support_span(text, c.span[0], c.span[1], c.qa["answer"], models.tokenizer,
                                     g.min_answer_support)
            c.results["prose_evidence"] = not_prose_span(text[c.support.start:c.support.end]) is None
            c.results["evidence_not_stub"] = stub_evidence(text[c.support.start:c.support.end]) is None
    if corpus is not None:  # names the corpus never mentions (its vocabulary read once per generation)
        models.vocabulary = models.vocabulary or corpus_vocabulary(f"{d.title} {d.text}" for d in corpus)
        for c in valid:
            c.results["known_names"] = not unknown_names(c.qa["question"], models.vocabulary)
    q = models.encode([c.qa["question"] for c in valid], "query")
    p = models.encode([c.passage for c in valid], "passage")
    for c, sim in zip(valid, (q * p).sum(axis=1), strict=True):
        c.measures["similarity"] = float(sim)
        c.results["on_topic"] = float(sim) >= g.min_similarity
    if g.answerability == "llm":
        ask = [c for c in valid if all(c.results.get(k) for k in ("is_question", "same_language", "length",
                                                                   "no_repetition", "no_markup", "known_identifiers",
                                                                   "low_overlap"))]
        for c, verdict in zip(ask, judge_answerable(llm, [(c.passage, c.qa["question"], c.language) for c in ask], cfg,
                                          breaker), strict=True):
            c.results["answerable"] = answerable(bool(verdict), c.measures.get("non_answer"))
            c.measures["judge_unclear"] = float(verdict is None)
    for c, v in zip(valid, q, strict=True):
        c.measures["_vec"] = v  # popped by the caller before anything is written
