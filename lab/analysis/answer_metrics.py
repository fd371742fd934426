"""RAGAS-style answer metrics with an LLM as judge: faithfulness, answer relevancy, context precision, context recall.

Definitions (per query; RAGAS, Es et al. 2023, and its documentation)
- faithfulness = supported claims / claims of the answer, each claim judged "supported by the context" (the
  truncated contexts the answer was generated from).
- answer_relevancy = mean cosine similarity between the question and ``n_questions`` questions the LLM writes
  from the answer (embedded with all-MiniLM-L6-v2 by default). A noncommittal answer ("I don't know") scores 0,
  as in RAGAS.
- context_precision = sum_k precision@k * v_k / (number of useful chunks), v_k = 1 when the chunk at rank k is
  judged useful for the reference answer; 0 when no chunk is useful (RAGAS) or nothing was retrieved.
- context_recall = reference-answer claims attributable to the context / reference claims (same judgement as
  faithfulness, with the reference's claims).

Claims are sentences (:func:`split_claims`, deterministic): the offline judge (SmolLM2-135M) cannot split an
answer into statements reliably, so claim extraction is not left to it; at most ``max_claims`` claims per text
are judged (the first ones; the table records how many there were).

Judgements are one yes/no question per LLM call (:data:`SUPPORT_PROMPT`, :data:`USEFUL_PROMPT`), short enough for
a 135M model, parsed leniently (:func:`parse_verdict`). A llama.cpp judge whose free-text answer cannot be read
is asked the same prompt again under a Yes/No GBNF grammar (its choice between the two words; counted per query
as ``n_fallback_verdicts``): on ord-qa SmolLM2 began ~18% of its support verdicts with something else ("The
`repair_design` ..."). With ``grammar=True`` every verdict is constrained; on the fixture that was not better
than free text (11/16 vs 13/16 on the first 16 cases), so it is off by default. xllamacpp can also return
token log-probabilities (``logprobs``/``top_logprobs``), but :mod:`lab.models.llm` keeps only the text, so a
soft yes-vs-no score is not used. Prompts are module constants versioned by :data:`JUDGE_PROMPT_VERSION`.

NaN policy: a metric a query cannot be scored on is NaN in the per-query table and left out of the mean, with
its status: ``failed: ...`` (the answer could not be generated, a verdict was unparseable, the LLM call failed,
the answer has no claims, no question could be generated) or ``skipped: ...`` (no reference answer; a
noncommittal answer has no claims to check for faithfulness). A query with any failed verdict for a metric is
NaN for that metric, never scored as if the verdict were yes or no. ``n_failed_<metric>`` and
``n_skipped_<metric>`` are reported beside each mean.

Cost: every LLM call is accounted (calls, cache hits, tokens paid, seconds, and ``gen_seconds``: what the calls
took when they were generated, i.e. the cold cost even on a cached rerun), split into the answer and judge phases.
"""
from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.core.flat import config_hash, flatten, string_values
from lab.core.paths import public_paths_in
from lab.core.progress import progress as bar
from lab.experiment.answers import (
    PROMPT_VERSION,
    AnswerSample,
    build_samples,
    completion_cost,
    context_char_budget,
    format_context,
    generate_answer,
    is_noncommittal,
    reference_answers,
)
from lab.experiment.run import load, run_experiment
from lab.metrics import bootstrap_ci
from lab.metrics.stats import CI_RESAMPLES
from lab.models.breaker import EndpointDown, FailureBreaker, guarded_call
from lab.models.embedders import load_embedder
from lab.models.llm import load_llm
from lab.retrievers.base import Context
from lab.text.chunking import chunk_corpus, chunks_to_corpus
from lab.tracking.lifecycle import tracked_run
from lab.tracking.store import environment_tags, log_metrics, log_params, set_tags

JUDGE_PROMPT_VERSION = "judge-v1"
METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")

SUPPORT_PROMPT = ("Context:\n{context}\n\nStatement: {statement}\n\n"
                  "Is the statement supported by the context? Answer yes or no.")
USEFUL_PROMPT = ("Question: {question}\nAnswer: {reference}\n\nPassage:\n{passage}\n\n"
                 "Is the passage useful for the answer? Answer yes or no.")
QUESTION_PROMPT = "Answer: {answer}\n\nWrite the question that this answer responds to.\nQuestion:"
#: GBNF grammar for ``grammar=True`` (llama.cpp): the answer is one of these words.
VERDICT_GRAMMAR = 'root ::= "Yes" | "No" | "yes" | "no"'

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "Fig.", "fig.", "cf.", "resp.")
_DOT = "\u2024"  # one-dot leader: stands in for the dots of abbreviations while splitting
_FENCE_RE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_BULLET_RE = re.compile(r"^\s*(?:[-*+>•]|\d{1,2}[.)]|step\s+\d{1,2}\s*[:.)])\s+", re.IGNORECASE)
_HEADING_RE = re.compile(r"^\s*#{1,6}\s")
_WORD_RE = re.compile(r"\w+")
_QUESTION_WORD_RE = re.compile(r"(?:what|how|which|why|when|where|who|whom|whose|can|could|does|do|did|is|are|was|"
                               r"were|should|would|will|shall|may|might|has|have|in\s+what|for\s+what)\b",
                               re.IGNORECASE)


# ------------------------------------------------------------------------------------------------ pure parts
def split_claims(text: str | None, max_claims: int | None = None, min_words: int = 3) -> list[str]:
    """The claims of a text: its sentences, in order.

    Fenced code blocks (```...```) are folded into the sentence before them as one line (an example command
    belongs to the sentence that introduces it; a block at the start is a claim of its own); an unclosed fence
    marker is dropped. Text is split at line breaks; markdown headings are dropped (titles, not claims);
    bullets and numbering ("1.", "-", "Step 2:") are stripped; then sentences end at ``.``, ``!`` or ``?``
    followed by whitespace (not after e.g., i.e., etc.). Dropped: fragments with fewer than ``min_words`` word
    tokens, and sentences ending in ":" with nothing folded after them (they announce, they do not claim).
    ``max_claims`` keeps the first ones.
    """
    if not text or not text.strip():
        return []
    text = text.replace("\r\n", "\n")
    for abbr in _ABBREVIATIONS:
        text = text.replace(abbr, abbr.replace(".", _DOT))
    claims: list[list] = []  # [text, code folded in]
    pos = 0
    pieces: list[tuple[str, str]] = []  # (kind, text)
    for m in _FENCE_RE.finditer(text):
        pieces.append(("prose", text[pos:m.start()]))
        pieces.append(("code", m.group(1)))
        pos = m.end()
    pieces.append(("prose", text[pos:]))
    for kind, chunk in pieces:
        if kind == "code":
            code = " ".join(line.strip() for line in chunk.splitlines() if line.strip())
            if not code:
                continue
            if claims:
                claims[-1] = [f"{claims[-1][0]} {code}", True]
            else:
                claims.append([code, True])
            continue
        chunk = re.sub(r"```[ \t]*[\w+-]*", " ", chunk)  # an unclosed fence marker
        for line in chunk.split("\n"):
            if _HEADING_RE.match(line):
                continue
            line = _BULLET_RE.sub("", line).replace("**", "").strip()
            if not line:
                continue
            for sentence in _SENTENCE_RE.split(line):
                if sentence.strip():
                    claims.append([sentence.strip(), False])
    out = [c.replace(_DOT, ".") for c, code in claims
           if len(_WORD_RE.findall(c)) >= min_words and (code or not c.endswith(":"))]
    return out[:max_claims] if max_claims else out


def parse_verdict(text: str | None) -> bool | None:
    """A judge's yes/no, read leniently: the first "yes"/"no" word (also "true"/"false"); failing that,
    "not supported"/"unsupported"/"not useful" -> False and "supported"/"useful" -> True; else None (unparseable).
    Case and surrounding punctuation are ignored."""
    t = (text or "").strip().lower()
    m = re.search(r"\b(yes|no|true|false)\b", t)
    if m:
        return m.group(1) in ("yes", "true")
    if re.search(r"\b(not\s+supported|unsupported|not\s+useful|not\s+relevant|irrelevant)\b", t):
        return False
    if re.search(r"\b(supported|useful|relevant)\b", t):
        return True
    return None


def parse_generated_question(text: str | None, min_words: int = 3) -> str | None:
    """The question in a generation: its first non-empty line without a "Question:"/"Q:" label, numbering,
    heading marks or quotes; None (unusable) when it has fewer than ``min_words`` word tokens or is not a
    question (no "?" and no interrogative first word such as what/how/which/can/does/is)."""
    for line in (text or "").splitlines():
        line = re.sub(r"^[\s#>*-]*(?:\d{1,2}[.)]\s*)?(?:(?:question|q)\s*\d*\s*:)?\s*", "", line, flags=re.IGNORECASE)
        line = line.strip().strip('"\'`*').strip()
        if not line:
            continue
        if len(_WORD_RE.findall(line)) < min_words:
            return None
        return line if "?" in line or _QUESTION_WORD_RE.match(line) else None
    return None


def fraction_true(verdicts: Sequence[bool | None]) -> float:
    """Share of True verdicts; NaN when there are none or any is None (a failed judgement is never counted
    as yes or no)."""
    if not verdicts or any(v is None for v in verdicts):
        return math.nan
    return sum(bool(v) for v in verdicts) / len(verdicts)


def context_precision(useful: Sequence[bool | None]) -> float:
    """RAGAS context precision of chunk verdicts in rank order: sum_k precision@k * v_k / sum_k v_k.
    0.0 when no chunk is useful or nothing was retrieved; NaN when any verdict is None.
    Example: [False, True, True] -> (1/2 + 2/3) / 2 = 0.5833."""
    if any(v is None for v in useful):
        return math.nan
    hits, total = 0, 0.0
    for k, v in enumerate(useful, start=1):
        if v:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def mean_cosine(query_vec: np.ndarray, vecs: np.ndarray) -> float:
    """Mean cosine similarity of one vector with each row of ``vecs`` (rows need not be normalised); NaN when
    ``vecs`` is empty."""
    vecs = np.asarray(vecs, dtype=np.float64).reshape(-1, np.asarray(query_vec).size)
    if not len(vecs):
        return math.nan
    q = np.asarray(query_vec, dtype=np.float64).ravel()
    sims = vecs @ q / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(q) + 1e-12)
    return float(sims.mean())


def aggregate(per_query, metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """Means over the queries that were scored (NaN left out), with ``n_scored_<m>``, ``n_failed_<m>`` and
    ``n_skipped_<m>`` counted from the ``status_<m>`` columns (values "ok", "failed: ...", "skipped: ...").
    A metric no query could be scored on has mean NaN."""
    out: dict[str, float] = {}
    for m in metrics:
        col = per_query[m].astype(float) if m in per_query else None
        status = per_query.get(f"status_{m}")
        scored = col.dropna() if col is not None else []
        out[m] = float(scored.mean()) if len(scored) else math.nan
        out[f"n_scored_{m}"] = float(len(scored))
        out[f"n_failed_{m}"] = float(sum(str(s).startswith("failed") for s in status)) if status is not None else 0.0
        out[f"n_skipped_{m}"] = float(sum(str(s).startswith("skipped") for s in status)) if status is not None else 0.0
    return out


def sum_costs(costs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Field-wise sum of cost dicts (see :func:`lab.experiment.answers.completion_cost`)."""
    out: dict[str, float] = {}
    for c in costs:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


# ------------------------------------------------------------------------------------------------ the judge
@dataclass
class Verdicts:
    """Verdicts of some prompts, in order: ``values`` (True/False, None = failed), ``raw`` (the judge's text or
    the error; "first || grammar: second" when asked again), ``completions`` (every call made, for cost) and
    ``fallback`` (True where the value came from the grammar-constrained second call)."""

    values: list
    raw: list
    completions: list
    fallback: list


@dataclass
class Judge:
    """An LLM asked one yes/no question per call, and an embedder for answer relevancy.

    ``n_questions`` questions are generated per answer; with more than one they are sampled at
    ``question_temperature`` with seeds ``seed, seed+1, ...`` (cached per seed, so reruns are identical).
    ``verdict_tokens``: max_tokens of a verdict (a few: "Yes", "No, the ..."). ``fallback``: see
    :meth:`uses_fallback`.
    """

    llm: Any
    embedder: Any = None
    n_questions: int = 3
    question_temperature: float = 0.7
    question_tokens: int = 48
    verdict_tokens: int = 3
    max_claims: int | None = 8
    grammar: bool = False
    fallback: str = "auto"
    seed: int = 0
    breaker: Any = None  # a lab.models.breaker.FailureBreaker: judging stops when the endpoint keeps failing

    def describe(self) -> dict[str, Any]:
        return {"judge": self.llm.identity, "judge_backend": getattr(self.llm, "backend", "?"),
                "embedder": getattr(self.embedder, "identity", None), "n_questions": self.n_questions,
                "question_temperature": self.question_temperature, "question_tokens": self.question_tokens,
                "verdict_tokens": self.verdict_tokens, "max_claims": self.max_claims, "grammar": self.grammar,
                "fallback": self.fallback if not self.grammar else "none",
                "judge_prompt_version": JUDGE_PROMPT_VERSION, "seed": self.seed}

    # ------------------------------------------------------------------------------------- LLM calls
    def _calls(self, prompts: Sequence[str], **gen) -> list[tuple[Any, str | None]]:
        """(Completion or None, error or None) per prompt, in order; an LLMError fails only its prompt (a refused
        connection fails the run)."""
        breaker = self.breaker

        def one(prompt):
            c, error = guarded_call(breaker, lambda: self.llm.complete(prompt, **gen),
                                    fatal=lambda e: e.status == "connection refused")
            return c, None if error is None else str(error)

        workers = max(1, min(int(getattr(self.llm, "concurrency", 1) or 1), len(prompts)))
        if workers == 1:
            out = [one(p) for p in prompts]
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="judge") as pool:
                out = list(pool.map(one, prompts))
        if breaker is not None:
            breaker.check()  # EndpointDown: the caller keeps the queries finished before this one
        return out

    def verdicts(self, prompts: Sequence[str]) -> Verdicts:
        """Yes/no verdicts of the prompts (None: failed). A free-text answer the parser cannot read is asked again
        with the Yes/No grammar when :meth:`uses_fallback` (a llama.cpp judge): the model's own choice between
        the two words, marked in ``fallback``; an LLM error is not retried here."""
        gen: dict[str, Any] = {"max_tokens": self.verdict_tokens, "temperature": 0.0}
        if self.grammar:
            gen["grammar"] = VERDICT_GRAMMAR
        out = Verdicts([], [], [], [])
        for c, err in self._calls(prompts, **gen):
            out.completions.append(c)
            out.values.append(None if c is None else parse_verdict(c.text))
            out.raw.append(err if c is None else c.text)
            out.fallback.append(False)
        retry = [i for i, (v, c) in enumerate(zip(out.values, out.completions, strict=True)) if v is None
                 and c is not None]
        if retry and self.uses_fallback():
            again = self._calls([prompts[i] for i in retry], max_tokens=2, temperature=0.0, grammar=VERDICT_GRAMMAR)
            for i, (c, err) in zip(retry, again, strict=True):
                out.completions.append(c)
                out.raw[i] = f"{out.raw[i]} || grammar: {err if c is None else c.text}"
                if c is not None:
                    out.values[i], out.fallback[i] = parse_verdict(c.text), True
        return out

    def uses_fallback(self) -> bool:
        """Whether unparseable verdicts are asked again under the Yes/No grammar: ``fallback`` "grammar" always,
        "auto" for a llama.cpp (gguf) judge only (other servers may not accept a GBNF grammar), "none" never;
        never when every verdict is already constrained (``grammar=True``)."""
        if self.grammar or self.fallback == "none":
            return False
        return self.fallback == "grammar" or getattr(self.llm, "backend", "") == "gguf"

    def support(self, context: str, statements: Sequence[str]):
        """Is each statement supported by the context? (:data:`SUPPORT_PROMPT`)"""
        return self.verdicts([SUPPORT_PROMPT.format(context=context, statement=s) for s in statements])

    def useful(self, question: str, reference: str, passages: Sequence[str]):
        """Is each passage useful for the reference answer to the question? (:data:`USEFUL_PROMPT`)"""
        return self.verdicts([USEFUL_PROMPT.format(question=question, reference=reference, passage=p)
                              for p in passages])

    def questions(self, answer: str) -> tuple[list[str | None], list[str | None], list]:
        """``n_questions`` questions written from the answer (None: unusable), raw texts/errors, completions."""
        prompt = QUESTION_PROMPT.format(answer=answer)
        many = self.n_questions > 1
        results = []
        for i in range(self.n_questions):
            gen = {"max_tokens": self.question_tokens, "temperature": self.question_temperature if many else 0.0,
                   "seed": self.seed + i}
            results.extend(self._calls([prompt], **gen))
        qs = [None if c is None else parse_generated_question(c.text) for c, _ in results]
        return qs, [err if c is None else c.text for c, err in results], [c for c, _ in results]

    def relevancy(self, question: str, generated: Sequence[str]) -> float:
        """Mean cosine similarity of the question with the generated questions (the embedder's query side)."""
        vecs = self.embedder.encode_queries([question, *generated])
        return mean_cosine(vecs[0], vecs[1:])


# ------------------------------------------------------------------------------------------------ one query
def score_sample(judge: Judge, sample: AnswerSample) -> tuple[dict, dict]:
    """The four metrics of one answered sample: (row for the per-query table, details for inspection)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {m: math.nan for m in METRICS}
    status: dict[str, str] = {}
    detail: dict[str, Any] = {"query_id": sample.query_id, "question": sample.question, "answer": sample.answer,
                              "answer_error": sample.answer_error, "reference": sample.reference,
                              "context_ids": sample.context_ids}
    comps: list = []
    answer, reference = sample.answer, sample.reference
    noncommittal = is_noncommittal(answer)
    context = format_context(sample.contexts)

    # faithfulness and context recall: one batch of support judgements against the same context
    a_claims = split_claims(answer) if answer is not None and not noncommittal else []
    r_claims = split_claims(reference) if reference else []
    a_judged, r_judged = a_claims[:judge.max_claims or None], r_claims[:judge.max_claims or None]
    n_fallback = 0
    if sample.contexts and (a_judged or r_judged):
        sv = judge.support(context, a_judged + r_judged)
        comps += sv.completions
        verdicts, raw, n_fallback = sv.values, sv.raw, sum(sv.fallback)
    else:
        verdicts, raw = [], []
    a_v, r_v = verdicts[:len(a_judged)], verdicts[len(a_judged):]  # empty without a context: no claim is listed
    detail["answer_claims"] = [{"claim": c, "supported": v, "raw": r}
                               for c, v, r in zip(a_judged, a_v, raw[:len(a_judged)], strict=False)]
    detail["reference_claims"] = [{"claim": c, "attributed": v, "raw": r}
                                  for c, v, r in zip(r_judged, r_v, raw[len(a_judged):], strict=False)]
    if answer is None:
        status["faithfulness"] = f"failed: no answer ({sample.answer_error})"
    elif noncommittal:
        status["faithfulness"] = "skipped: noncommittal answer"
    else:
        _score_claims(row, status, "faithfulness", a_claims, a_v, bool(sample.contexts), "the answer")
    if not reference:
        status["context_recall"] = "skipped: no reference answer"
    else:
        _score_claims(row, status, "context_recall", r_claims, r_v, bool(sample.contexts), "the reference answer")

    # context precision: one usefulness judgement per retrieved chunk
    if not reference:
        status["context_precision"] = "skipped: no reference answer"
        detail["chunks"] = []
    elif not sample.contexts:
        row["context_precision"], status["context_precision"] = 0.0, "ok"
        detail["chunks"] = []
    else:
        uv = judge.useful(sample.question, reference, sample.contexts)
        comps += uv.completions
        useful, raw_u, n_fallback = uv.values, uv.raw, n_fallback + sum(uv.fallback)
        row["context_precision"] = context_precision(useful)
        status["context_precision"] = _verdict_status(useful)
        detail["chunks"] = [{"id": i, "useful": v, "raw": r} for i, v, r in zip(sample.context_ids, useful, raw_u,
                                                                                strict=True)]

    # answer relevancy: questions written from the answer, compared with the question
    detail["generated_questions"] = []
    if answer is None:
        status["answer_relevancy"] = f"failed: no answer ({sample.answer_error})"
    elif noncommittal:
        row["answer_relevancy"], status["answer_relevancy"] = 0.0, "ok"
    else:
        qs, raw_q, cs = judge.questions(answer)
        comps += cs
        detail["generated_questions"] = [{"question": q, "raw": r} for q, r in zip(qs, raw_q, strict=True)]
        valid = [q for q in qs if q]
        if valid:
            row["answer_relevancy"], status["answer_relevancy"] = judge.relevancy(sample.question, valid), "ok"
        else:
            status["answer_relevancy"] = f"failed: no usable question in {len(qs)} generations"

    for m in METRICS:
        row[f"status_{m}"] = status[m]
    judge_cost = completion_cost(comps)
    row.update({
        "n_contexts": len(sample.contexts), "n_claims": len(a_claims), "n_claims_judged": len(a_judged),
        "n_supported": sum(bool(v) for v in a_v), "n_reference_claims": len(r_claims),
        "n_attributed": sum(bool(v) for v in r_v), "n_useful": sum(bool(c["useful"]) for c in detail["chunks"]),
        "n_questions": sum(1 for q in detail["generated_questions"] if q["question"]),
        "noncommittal": bool(noncommittal), "answer": answer if answer is not None else "",
        "answer_seconds": sample.answer_cost.get("seconds", 0.0),
        "answer_gen_seconds": sample.answer_cost.get("gen_seconds", 0.0),
        "n_fallback_verdicts": n_fallback, "judge_calls": judge_cost["calls"], "judge_seconds": judge_cost["seconds"],
        "judge_gen_seconds": judge_cost["gen_seconds"], "score_seconds": time.perf_counter() - t0,
    })
    detail["judge_cost"], detail["answer_cost"] = judge_cost, sample.answer_cost
    return row, detail


def _verdict_status(verdicts: Sequence[bool | None]) -> str:
    bad = sum(v is None for v in verdicts)
    return "ok" if not bad else f"failed: {bad} of {len(verdicts)} verdicts unparseable or errored"


def _score_claims(row: dict, status: dict, metric: str, claims: list[str], verdicts: Sequence[bool | None],
                  has_context: bool, source: str) -> None:
    """Set ``row[metric]`` and ``status[metric]`` for a claim-support metric (faithfulness: the answer's claims
    supported by the context; context recall: the reference's claims attributable to it): no claims in ``source``
    fails (NaN), no context scores 0.0 (nothing can be supported), else the share of supported claims
    (:func:`fraction_true`, NaN when a verdict failed)."""
    if not claims:
        status[metric] = f"failed: no claims in {source}"
    elif not has_context:
        row[metric], status[metric] = 0.0, "ok"
    else:
        row[metric] = fraction_true(verdicts)
        status[metric] = _verdict_status(verdicts)


# ------------------------------------------------------------------------------------------------ results
@dataclass
class AnswerEvaluation:
    """Per-query answer metrics (``per_query``: index query_id; the four metrics, NaN where not scored; their
    ``status_*``; counts; the answer; per-query seconds), ``details`` (claims, verdicts and raw judge outputs per
    query), cost totals and wall time."""

    per_query: Any
    details: list[dict]
    cost: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    stopped: str = ""  # why answering / judging stopped early (an EndpointDown), "" when every query was scored

    @property
    def means(self) -> dict[str, float]:
        agg = aggregate(self.per_query)
        return {m: agg[m] for m in METRICS}

    def summary(self, ci: bool = True, seed: int = 0, n_resamples: int = CI_RESAMPLES) -> dict[str, float]:
        """Flat numbers for MLflow: the four means (``_ci_low``/``_ci_high``: percentile bootstrap over the
        scored queries), n_scored/n_failed/n_skipped per metric, n_queries, cost and wall seconds."""
        out = aggregate(self.per_query)
        if ci:
            for m in METRICS:
                scored = self.per_query[m].astype(float).dropna()
                if len(scored) >= 2:
                    row = bootstrap_ci(scored.to_numpy(), n_resamples=n_resamples, seed=seed).iloc[0]
                    out[f"{m}_ci_low"], out[f"{m}_ci_high"] = float(row.ci_low), float(row.ci_high)
        out["n_queries"] = float(len(self.per_query))
        if "n_fallback_verdicts" in self.per_query:
            out["n_fallback_verdicts"] = float(self.per_query["n_fallback_verdicts"].sum())
        out.update({k: float(v) for k, v in self.cost.items()})
        out["wall_seconds"] = float(self.wall_seconds)
        return out


def evaluate_samples(samples: Sequence[AnswerSample], judge: Judge, llm=None, answer_tokens: int = 128,
                     progress: bool = True) -> AnswerEvaluation:
    """Answer every sample (when ``llm`` is given and the sample has no answer yet) and score it, query by query
    (so a llama.cpp backend reuses each query's evaluated context across its calls). When the judge's breaker
    trips (the endpoint failed too many calls in a row), the queries scored so far are kept and ``stopped`` says
    why; the query in progress is dropped."""
    t0 = time.perf_counter()
    rows, details, stopped = [], [], ""
    for sample in bar(list(samples), desc="answer metrics", total=len(samples), enabled=progress):
        try:
            if llm is not None and sample.answer is None and sample.answer_error is None:
                generate_answer(llm, sample, max_tokens=answer_tokens, breaker=judge.breaker)
            row, detail = score_sample(judge, sample)
        except EndpointDown as exc:
            stopped = f"{exc}; {len(rows)} of {len(samples)} queries were scored before"
            break
        rows.append({"query_id": sample.query_id, **row})
        details.append(detail)
    samples = [s for s in samples if s.query_id in {r["query_id"] for r in rows}] if stopped else samples
    per_query = pd.DataFrame(rows).set_index("query_id") if rows else pd.DataFrame(
        columns=[*METRICS, *(f"status_{m}" for m in METRICS)])
    answer_cost = sum_costs([s.answer_cost for s in samples])
    judge_cost = sum_costs([d["judge_cost"] for d in details])
    cost = {**{f"answer_{k}": v for k, v in answer_cost.items()}, **{f"judge_{k}": v for k, v in judge_cost.items()}}
    return AnswerEvaluation(per_query, details, cost, time.perf_counter() - t0, stopped)


@dataclass
class AnswerReport:
    """One answer-metrics run: its config, the retrieval :class:`lab.experiment.run.Result` the contexts came from,
    the samples (contexts and answers) and the :class:`AnswerEvaluation`."""

    config: dict
    result: Any
    samples: list[AnswerSample]
    evaluation: AnswerEvaluation
    info: dict = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        out = self.evaluation.summary(seed=int(self.config.get("seed", 0)))
        out["scoring_seconds"] = out.pop("wall_seconds")  # answering + judging, without retrieval
        out.update({k: float(v) for k, v in self.info.get("cost", {}).items()})
        out["wall_seconds"] = float(self.info.get("wall_seconds", out.get("wall_seconds", 0.0)))
        return out


def run_answer_metrics(dataset, strategy: str, params: dict | None = None, *, split: str = "test", k: int = 5,  # noqa: PLR0913 - the public signature, one keyword per `lab answers` option
                       chunking: dict | None = None, llm=None, judge=None, ctx=None, max_queries: int | None = None,
                       answer_tokens: int = 128, context_tokens: int | None = None, n_questions: int = 3,
                       max_claims: int | None = 8, embedder: str | Any = DEFAULT_EMBEDDER, grammar: bool = False,
                       fallback: str = "auto", reference_field: str = "answer",
                       max_consecutive_failures: int = 3) -> AnswerReport:
    """Retrieve with ``strategy`` (:func:`lab.experiment.run.run_experiment`, ``max(k, 10)`` hits so the retrieval
    metrics at 10 are defined), answer each query from its top-``k`` contexts with ``llm`` and judge the answers
    with ``judge`` (specs for :func:`lab.models.llm.load_llm`; None = the packaged SmolLM2; the same spec shares
    one model). Reference answers come from query metadata ``reference_field``. ``fallback``: see
    :meth:`Judge.uses_fallback`. ``max_consecutive_failures``: LLM calls failed in a row (answering and judging
    together) that stop the run; the queries finished before are kept (``evaluation.stopped`` says why)."""
    t0 = time.perf_counter()
    breaker = FailureBreaker(max_consecutive_failures, "answering and judging")
    ctx = ctx or Context()
    ds = load(dataset, progress=ctx.progress)
    result = run_experiment(ds, strategy, params, split=split, k=max(k, 10), chunking=chunking, ctx=ctx,
                            max_queries=max_queries)
    queries, _ = ds.split(split)
    ids = sorted(queries)[:max_queries] if max_queries else list(queries)
    queries = queries.subset([q for q in ids if q in result.run or q in result.evaluation.per_query.index])
    units = _units(ds, chunking, ctx.progress)

    answer_llm = load_llm(llm, cache_dir=ctx.cache_dir, progress=False, seed=ctx.seed)
    same = judge is None or judge == llm
    judge_llm = answer_llm if same else load_llm(judge, cache_dir=ctx.cache_dir, progress=False, seed=ctx.seed)
    emb = embedder if not isinstance(embedder, str) else load_embedder(embedder, cache_dir=ctx.cache_dir,
                                                                         progress=False)
    refs = reference_answers(queries, reference_field)
    context_chars = context_char_budget(answer_llm, answer_tokens, context_tokens)
    samples = build_samples(queries, result.run, units, k, context_chars, references=refs)
    j = Judge(judge_llm, emb, n_questions=n_questions, max_claims=max_claims, grammar=grammar, fallback=fallback,
              seed=ctx.seed, breaker=breaker)
    u0 = {id(x): x.usage() for x in {id(answer_llm): answer_llm, id(judge_llm): judge_llm}.values()}
    evaluation = evaluate_samples(samples, j, answer_llm, answer_tokens=answer_tokens, progress=ctx.progress)
    if evaluation.stopped:  # keep the queries scored before the endpoint went down
        samples = [s for s in samples if s.query_id in set(evaluation.per_query.index)]
    load_s = sum(x.usage().get("load_seconds", 0.0) - u0[id(x)].get("load_seconds", 0.0)
                 for x in {id(answer_llm): answer_llm, id(judge_llm): judge_llm}.values())
    config = {"dataset": ds.name, "strategy": strategy, "split": split, "k": k, "params": dict(params or {}),
              "chunking": dict(chunking or {"chunker": "none"}), "max_queries": max_queries,
              "answer_tokens": answer_tokens, "context_tokens": context_tokens, "context_chars": context_chars,
              "n_questions": n_questions, "max_claims": max_claims, "grammar": grammar,
              "fallback": "grammar" if j.uses_fallback() else "none",
              "reference_field": reference_field, "seed": ctx.seed, "prompt_version": PROMPT_VERSION,
              "judge_prompt_version": JUDGE_PROMPT_VERSION,
              "llm": answer_llm.identity, "judge": judge_llm.identity,
              "embedder": getattr(emb, "identity", str(embedder))}
    info = {"n_queries": len(samples), "n_with_reference": len(refs), "retrieval": result.summary(),
            "llm": answer_llm.describe(), "judge": j.describe(),
            "cost": {"llm_load_seconds": load_s, "retrieval_index_seconds": result.index_seconds,
                     "retrieval_search_seconds": result.search_seconds},
            "wall_seconds": time.perf_counter() - t0, "stopped": evaluation.stopped}
    return AnswerReport(config, result, samples, evaluation, info)


def _units(ds, chunking: dict | None, progress: bool):
    """The corpus the run's ids refer to: the documents, or their chunks when the experiment chunked."""
    if not chunking or chunking.get("chunker", "recursive") == "none":
        return ds.corpus

    args = {k: v for k, v in chunking.items() if k != "depth_factor"}
    return chunks_to_corpus(chunk_corpus(ds.corpus, progress=progress, **args))


# ------------------------------------------------------------------------------------------------ MLflow
PER_QUERY_ARTIFACT = "answer_metrics.parquet"
DETAILS_ARTIFACT = "answers.jsonl"
SUMMARY_ARTIFACT = "answer_result.json"


def log_answer_metrics(report: AnswerReport, experiment: str = "answer_metrics", tracking_root: str | Path = "mlruns",
                       run_name: str | None = None) -> str:
    """Log a report as one finished MLflow run; returns its id. Metrics: faithfulness, answer_relevancy,
    context_precision, context_recall (means over scored queries) with CI bounds, n_scored_* / n_failed_* /
    n_skipped_*, n_queries, cost (answer_* and judge_* calls, cache_hits, tokens, seconds, gen_seconds,
    llm_load_seconds), scoring_seconds (answering and judging) and wall_seconds (everything, retrieval included),
    and the retrieval means as ``retrieval_<metric>``. Params: the config as given, and the ``retriever.*`` and
    ``judge.*`` descriptions with every absolute path in :func:`lab.core.paths.public_path` form (no machine
    paths; answer_result.json's info likewise). Tags: dataset, strategy, model identities, prompt versions,
    environment. Artifacts: answer_metrics.parquet (per query), answers.jsonl (answers, claims, verdicts, raw
    judge outputs), answer_result.json."""
    cfg = report.config
    with tracked_run(experiment, tracking_root=tracking_root,
                     run_name=run_name or f"answers: {cfg['strategy']} top-{cfg['k']} on {cfg['dataset']}") as run:
        cl, run_id = run.cl, run.run_id
        params = dict(flatten(cfg))  # the user's config as given; descriptions with public paths (public_path)
        named = string_values(cfg)
        params.update({f"retriever.{k}": v for k, v in flatten(public_paths_in((report.result.info or {}).get(
            "retriever") or {}, named)).items()})
        params.update({f"judge.{k}": v for k, v in flatten(public_paths_in(report.info.get("judge") or {},
                                                                           named)).items()})
        log_params(run_id, params, cl=cl)
        metrics = report.summary()
        metrics.update({f"retrieval_{k}": float(v) for k, v in report.result.evaluation.means.items()})
        log_metrics(run_id, metrics, cl=cl)
        set_tags(run_id, {"dataset": cfg["dataset"], "strategy": cfg["strategy"], "kind": "answer_metrics",
                          "model.llm": cfg["llm"], "model.judge": cfg["judge"], "model.embedder": cfg["embedder"],
                          "prompt_version": cfg["prompt_version"], "judge_prompt_version": cfg["judge_prompt_version"],
                          "seed": cfg["seed"], "config_hash": config_hash(cfg), **environment_tags()}, cl=cl)
        with tempfile.TemporaryDirectory(prefix="lab-answers-") as tmp:
            for path in write_artifacts(report, Path(tmp)):
                cl.log_artifact(run_id, str(path))
    return run_id


def write_artifacts(report: AnswerReport, folder: Path) -> list[Path]:
    """answer_metrics.parquet, answers.jsonl and answer_result.json of a report in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    pq = report.evaluation.per_query.copy()
    pq.index = pq.index.astype(str)
    pq.index.name = "query_id"
    pq.to_parquet(folder / PER_QUERY_ARTIFACT)
    with open(folder / DETAILS_ARTIFACT, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({**detail, "contexts": sample.contexts}, ensure_ascii=False, default=str) + "\n"
                     for sample, detail in zip(report.samples, report.evaluation.details, strict=True))
    named = string_values(report.config)
    doc = {"config": report.config, "info": public_paths_in(report.info, named), "summary": report.summary()}
    (folder / SUMMARY_ARTIFACT).write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    return [folder / PER_QUERY_ARTIFACT, folder / DETAILS_ARTIFACT, folder / SUMMARY_ARTIFACT]
