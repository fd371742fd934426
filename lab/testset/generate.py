"""Generated questions: an LLM writes a question for passages sampled from a corpus, quality gates filter them,
and the set is written in BEIR layout with the evidence span of every question.

The prompt asks in the passage's language ("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题"
for Chinese passages, an English translation for the rest; :data:`PROMPTS`, :data:`PROMPT_VERSION`) for one question
that needs the passage, without its key words, of a given type: lab.text.tokenize.detect_language on the passage
picks the language, and a gate checks the question's.

Conventions
- Source: a folder with only ``corpus.jsonl`` is enough (lab.testset.io.load_units). Queries the folder holds
  are never shown to the LLM; a generated question too close to one of them is dropped (not_duplicate gate).
- Passages (lab.testset.passages): windows of at most ``max_passage_chars`` characters over the whole text of
  every unit, section by section when it has headings, not its first characters. The LLM sees exactly the
  window's text, and the set records it (``metadata.passage`` of each query; the review sheet shows it).
- Sampling (:func:`sample_order`): windows with fewer than ``min_passage_words`` words (Han characters count one
  each) are skipped, and with ``prose_only`` (default) windows that are mostly code, headings, ids or boilerplate
  (lab.testset.passages.not_prose: cheap checks, before any LLM call; counted by reason in the gate report).
  The rest are grouped into strata ("doc": the unit's document; "section": the document's
  ``metadata.source`` / ``section`` when present, else its first markdown heading, else the document),
  shuffled within each stratum and visited round-robin over the strata in a shuffled order, all from
  ``random.Random(seed)``: a prefix of the order covers the strata evenly, and any part of a document can be
  drawn.
- Candidates: the order is walked ``rounds`` times (round 0 greedy at temperature 0; round r > 0 samples at
  ``round_temperature`` with seed ``seed + r``, for a second question on the same unit), until ``n`` questions
  pass or ``max_attempts`` candidates were checked. Output the model cannot parse, even after the one lenient
  repair, and (``retry_on="text_gates"``, the default) an answer that fails a gate needing no model (question
  shape, language, length, repetition, markup, unknown identifiers, overlap, lexical answerability: under a
  millisecond), is generated again (``retries`` times, at ``retry_temperature``, seed ``seed + 1000 * try +
  round``); a retry that does not parse leaves the earlier answer. On a local model a retry of the same prompt
  reuses its evaluated prompt, so it costs only the answer's tokens. The result is the first ``n`` passing
  candidates in candidate order, whatever the batch size.
  Candidates go in batches of ``batch_size``, but at most twice the questions still missing (a 1-question set
  does not write 8 candidates first) and at least the LLM's ``concurrency``; each try sends a batch's candidates
  at once, each with its own params (round, type, language), so every llama.cpp slot is busy.
- Question types (:data:`QUESTION_MIX`, :func:`question_type`): what, how, why, when, which (compare or
  choose) and troubleshooting, in a target mix of 5 / 5 / 3 / 2 / 3 / 2 of every 20 candidates, dealt from a
  cycle shuffled by the seed. Each candidate's prompt asks for its type (:data:`TYPE_INSTRUCTIONS`), the English
  schema holds the question to the type's first word, and the type is recorded (``question_type`` of each
  candidate and query); the gate report counts asked and accepted types (``extra.question_types``).
- JSON: ``json_mode="schema"`` (default) sends the OpenAI ``response_format`` json_schema of :func:`qa_schema`
  (a local GGUF gets it as the llama.cpp grammar made from it, lab.models.llm.LocalLLM; OpenAI, vLLM and recent
  Ollama honour it); ``"prompt"`` relies on the
  prompt alone. Either way the text is parsed strictly first (:func:`parse_qa`). A generation the backend
  fails (an LLMError, or llama.cpp refusing its own output) counts as unparseable (``llm_errors``).
- Relevance: the source unit gets grade ``grade`` (qrels at unit level: the document, without chunking). The
  evidence span (the window, narrowed to the sentences that support the answer when found; lab.testset.spans)
  goes to ``evidence.jsonl``, so span relevance scores any chunking of the same documents. An optional second
  pass (``extra_relevant``) asks the LLM to judge BM25's top ``extra_candidates`` other units for each question;
  a "yes" adds it with ``extra_grade``.
- Difficulty (:func:`difficulty`): each accepted question gets a tier from the BM25 rank of its source unit
  (the question searched against every unit) and the share of its content terms found in its evidence span:
  hard when the unit is not in BM25's top 10, easy when it is in the top 3 and the share is 0.5 or more, medium
  otherwise; ``difficulty``, ``bm25_rank`` and ``evidence_overlap`` go into the query's metadata, so
  ``lab compare --by tier`` reports metrics per tier.
- Output: a BEIR folder (see lab.testset.io) whose corpus is every unit, with ``evidence.jsonl``,
  ``candidates.jsonl`` (every candidate, its passage span, raw text, gate results and measures),
  ``gate_report.json`` and ``provenance.json`` (source dataset fingerprint,
  units, passages, LLM identity and settings, prompt version and texts' sha256, gate model, params, seed, gate
  report, source units, LLM usage, MLflow run id). Every file is written atomically (temporary file, rename).
- A folder that holds a set (any of :data:`SET_FILES`) is refused before any work (ConfigError) unless ``force``
  (those files, and only those, are removed once the model is loaded) or ``resume``. ``generation.json``
  (:data:`REQUEST_FILE`, written first) holds what defines the set: the source and units fingerprints, the LLM
  identity, the prompt version and every param that can change which questions pass (all but ``n``,
  ``max_attempts``, ``batch_size``, ``max_consecutive_failures``). ``resume`` continues only a set whose request
  matches (else ConfigError naming the field): the walk starts again from the first candidate and every LLM answer
  already made comes back from the cache, so an interrupted run, or one asked for more questions, ends with the
  set an uninterrupted run would have written (its first questions unchanged).
- Reproducible: the same source, seed, params, LLM and prompt give the same set. The walk, the seeds of every
  call and the gates are deterministic, and every answer is cached under (LLM identity, prompt, generation
  params). Without the cache (another ``cache_dir``) the answers are generated again, which repeats them only
  where the backend is deterministic: a local GGUF at ``concurrency`` 1 (the default) is; ``concurrency`` > 1
  decodes several slots in one llama.cpp batch, whose arithmetic depends on what else is in the batch, so a
  greedy answer can change; an HTTP endpoint that ignores ``seed``, another llama.cpp build or another
  ``topic_model`` (its cosines decide on_topic and not_duplicate) can change the set too.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.core.progress import progress as bar
from lab.data.fingerprint import fingerprint
from lab.data.types import Corpus, Document, Queries
from lab.models.breaker import EndpointDown, FailureBreaker
from lab.models.embedders import DEFAULT_MODEL, load_embedder
from lab.models.llm import LLMError, load_llm
from lab.retrievers.base import Context, build
from lab.testset.gates import (
    GATES,
    GateConfig,
    GateReport,
    answer_after_echo,
    check_text_gates,
    corpus_vocabulary,
    stub_evidence,
    summarize,
    term_coverage,
    text_length,
    unknown_names,
)
from lab.testset.io import (
    load_units,
    now_utc,
    unit_text,
    write_beir_set,
    write_jsonl,
    write_provenance,
    write_text_atomic,
)
from lab.testset.passages import NOT_PROSE, Passage, not_prose, passage_windows
from lab.testset.spans import SupportSpan, evidence_record, not_prose_span, support_span
from lab.testset.track import log_testset_run
from lab.text.tokenize import Tokenizer, detect_language

PROMPT_VERSION = "passage-question-answer-typed-v3"  # v3: the answer may not hold a question mark (qa_schema)
PROMPTS = {
    "zh": ("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题。\n"
           "要求：\n"
           "1. 问题必须依赖该段落中的具体信息，不是泛泛提问\n"
           "2. 问题不能直接包含段落中的关键词（增加检索难度）\n"
           "3. {instruction}\n"
           "4. 输出格式：{{\"question\": \"...\", \"answer\": \"...\"}}\n\n"
           "文档段落：\n{passage}"),
    "en": ("Given the following document passage, write one question that a user might ask and that needs exactly "
           "the information in this passage to be answered.\n"
           "Requirements:\n"
           "1. The question must depend on specific information in the passage; it must not be a generic question.\n"
           "2. The question must not directly contain the key words of the passage (to make retrieval harder).\n"
           "3. {instruction}\n"
           "4. Output format: {{\"question\": \"...\", \"answer\": \"...\"}}\n\n"
           "Passage:\n{passage}"),
}
#: Question types and the target mix: how many of every 20 candidates ask each type (25% what, 25% how, 15% why,
#: 10% when, 15% which/compare, 10% troubleshooting), so a set is not 16 of 20 "What is the purpose of".
QUESTION_MIX = {"what": 5, "how": 5, "why": 3, "when": 2, "which": 3, "troubleshooting": 2}
TYPE_INSTRUCTIONS = {
    "en": {"what": 'Ask a "What" question about a specific fact, definition or value the passage states.',
           "how": 'Ask a "How" question about how to do something, or how something works, as the passage '
                  'describes it.',
           "why": 'Ask a "Why" question about a reason, cause or purpose the passage explains.',
           "when": 'Ask a "When" question about the condition, situation or order in which something happens or '
                   'should be used.',
           "which": 'Ask a "Which" question that compares or chooses between options, settings or alternatives '
                    'the passage names.',
           "troubleshooting": "Ask a troubleshooting question: a user meets a problem or an error, and the passage "
                              "holds its cause or its fix."},
    "zh": {"what": "提一个“什么”类问题：询问段落中的具体事实、定义或数值。",
           "how": "提一个“如何/怎样”类问题：询问如何做某事，或某事如何工作。",
           "why": "提一个“为什么”类问题：询问段落解释的原因或目的。",
           "when": "提一个“何时/在什么情况下”类问题：询问某事发生或应当使用的条件、时机或顺序。",
           "which": "提一个“哪个/哪种”类问题：在段落提到的选项、设置或方案之间比较或选择。",
           "troubleshooting": "提一个排障问题：用户遇到了问题或错误，段落给出原因或解决办法。"},
}
#: The first word an English question of each type starts with (the schema's pattern holds it to that).
_TYPE_STARTS = {"what": "What", "how": "How", "why": "Why", "when": "When", "which": "Which",
                "troubleshooting": "How|Why|What"}


def question_type(index: int, round_: int, seed: int = 0) -> str:
    """The type candidate ``index`` (of round ``round_``) asks: the :data:`QUESTION_MIX` cycle of 20, shuffled
    by ``seed``, read at ``index + round_`` (a passage visited again in a later round gets another type)."""
    cycle = [t for t, k in QUESTION_MIX.items() for _ in range(k)]
    random.Random(seed).shuffle(cycle)
    return cycle[(index + round_) % len(cycle)]


JUDGE_VERSION = "judge-v1"
#: What defines a generation, written first into its folder (see module conventions).
REQUEST_FILE = "generation.json"
#: What a generation writes into its folder; ``force`` removes these, and nothing else, before writing.
SET_FILES = ("corpus.jsonl", "queries.jsonl", "qrels", "evidence.jsonl", "candidates.jsonl", "gate_report.json",
             "provenance.json", REQUEST_FILE)
#: Params that do not change which questions pass: a resumed run may change them.
_NOT_DEFINING = ("n", "max_attempts", "batch_size", "max_consecutive_failures")
JUDGE_PROMPTS = {
    "en": ("Passage:\n{passage}\n\nQuestion: {question}\n\nCan the question be answered using only the passage? "
           "Reply with one word: yes or no."),
    "zh": "文档段落：\n{passage}\n\n问题：{question}\n\n仅根据该段落能回答这个问题吗？只回答一个字：是 或 否。",
}
_QUESTION_PATTERNS = {
    "en": r"^(What|How|Which|Why|When|Where|Who|Can|Does|Do|Is|Are|Should) [^?\n]{10,150}[?]$",
    "zh": r"^[^?？\n]{4,80}[?？]$",
}


_ANSWER_PATTERN = r"^[^?？]{1,120}$"


def qa_schema(language: str = "en", qtype: str | None = None, write_first: str = "question") -> dict:
    """The JSON schema sent with ``json_mode="schema"``: {answer, question}, the question shaped as a question
    (English: starts with an interrogative, ends with "?"; Chinese: ends with "？"), the answer at most 120
    characters (a small model otherwise loops until max_tokens; 120 rather than 200 cut the tokens per answer and
    kept the yield, docs/results.md) with no question mark: SmolLM2-135M's commonest
    accepted failure on the SQLite docs was an answer that was itself a question, copied as the question (33 of
    100; :func:`lab.testset.gates.non_answer` drops those that get through). The question comes first by default
    (``write_first``, :data:`WRITE_FIRST`); ``write_first="answer"`` puts the answer first. Key order does not
    matter to :func:`parse_qa`. ``qtype`` (English): the question starts with that type's word
    (:data:`_TYPE_STARTS`)."""
    pattern = _QUESTION_PATTERNS["zh" if language == "zh" else "en"]
    if qtype in _TYPE_STARTS and language != "zh":
        pattern = f"^({_TYPE_STARTS[qtype]}) " + pattern.split(") ", 1)[1]
    fields = {"answer": {"type": "string", "minLength": 1, "maxLength": 120, "pattern": _ANSWER_PATTERN},
              "question": {"type": "string", "pattern": pattern}}
    order = ["answer", "question"] if write_first == "answer" else ["question", "answer"]
    return {"type": "object", "properties": {k: fields[k] for k in order}, "required": order,
            "additionalProperties": False}


STRATIFY = ("doc", "section", "none")
JSON_MODES = ("schema", "prompt")
#: What a retry is for: "parse", an answer that did not parse; "text_gates", also one that failed a gate needing no
#: model (lab.testset.gates.check_text_gates): under a grammar every answer parses, so a degenerate one would
#: otherwise get no second sample.
RETRY_ON = ("parse", "text_gates")
#: Which field the JSON schema has the model write first (llama.cpp's grammar keeps the schema's key order).
#: "question" (default): an instruction-tuned model told to write {"question", "answer"} puts its question into a
#: first "answer" field (Qwen2.5-Coder-0.5B on the SQLite docs, answer first: 6 of 8 answers were its question, 0
#: passed; question first: 100 questions in 15 min 24 s), and SmolLM2-135M writes 100 SQLite questions in 13 min
#: question first against 36 min answer first. Answer first, SmolLM2's answers were supported by the passage more
#: often (ord-qa) and its hand grades a little better (2 / 9 / 19 against 0 / 6 / 24 good / weak / bad of 30:
#: both mostly bad; docs/results.md, "The offline question writer, part 3").
WRITE_FIRST = ("answer", "question")


@dataclass(frozen=True)
class GenerationConfig:
    """Params of a generation run (all logged). ``max_attempts`` None: ``10 * n``."""

    n: int = 100
    seed: int = 0
    stratify: str = "section"
    grade: int = 1
    max_attempts: int | None = None
    rounds: int = 3
    retries: int = 3
    retry_on: str = "text_gates"  # see RETRY_ON
    round_temperature: float = 0.7
    retry_temperature: float = 0.7
    max_tokens: int = 200
    max_passage_chars: int = 1000
    min_passage_words: int = 25
    prose_only: bool = True  # windows that are mostly code, headings, ids or boilerplate are never sent
    json_mode: str = "schema"
    write_first: str = "question"  # see WRITE_FIRST
    batch_size: int = 8
    extra_relevant: bool = False
    extra_candidates: int = 5
    extra_grade: int = 1
    gates: GateConfig = field(default_factory=GateConfig)
    max_consecutive_failures: int = 3  # LLM calls failed in a row (after their retries) that stop the run

    def __post_init__(self):
        if self.n < 1:
            raise ConfigError(f"n={self.n}: ask for at least one question")
        if self.stratify not in STRATIFY:
            raise ConfigError(f"stratify={self.stratify!r}: use one of {STRATIFY}")
        if self.retry_on not in RETRY_ON:
            raise ConfigError(f"retry_on={self.retry_on!r}: use one of {RETRY_ON}")
        if self.write_first not in WRITE_FIRST:
            raise ConfigError(f"write_first={self.write_first!r}: use one of {WRITE_FIRST}")
        if self.json_mode not in JSON_MODES:
            raise ConfigError(f"json_mode={self.json_mode!r}: use one of {JSON_MODES}")
        if not 0 <= self.grade <= 3 or not 0 <= self.extra_grade <= 3:
            raise ConfigError(f"grades must lie in 0..3, got grade={self.grade}, extra_grade={self.extra_grade}")
        if self.rounds < 1 or self.retries < 0 or self.batch_size < 1:
            raise ConfigError("rounds and batch_size must be >= 1, retries >= 0")
        if isinstance(self.max_consecutive_failures, bool) or not isinstance(self.max_consecutive_failures, int) \
                or self.max_consecutive_failures < 1:
            raise ConfigError(f"max_consecutive_failures={self.max_consecutive_failures!r}: expected an integer >= 1")
        if self.max_passage_chars < 200:
            raise ConfigError(f"max_passage_chars={self.max_passage_chars}: passages need at least 200 characters "
                              "(default 1000)")
        if self.min_passage_words < 0:
            raise ConfigError(f"min_passage_words={self.min_passage_words}: must be >= 0 (default 25)")

    @property
    def attempts_cap(self) -> int:
        return int(self.max_attempts) if self.max_attempts else 10 * self.n

    def describe(self) -> dict:
        d = asdict(self)
        d["max_attempts"] = self.attempts_cap
        return d


# ------------------------------------------------------------------------------------------------ prompt, parsing
def build_prompt(passage: str, language: str = "en", max_chars: int | None = None, qtype: str = "what") -> str:
    """The prompt around ``passage`` (cut to ``max_chars`` at a line or word boundary when longer), asking for a
    question of type ``qtype`` (:data:`QUESTION_MIX`)."""
    lang = "zh" if language == "zh" else "en"
    return PROMPTS[lang].format(passage=shown_passage(passage, max_chars), instruction=TYPE_INSTRUCTIONS[lang][qtype])


def shown_passage(passage: str, max_chars: int | None) -> str:
    """``passage`` cut to at most ``max_chars`` characters, at the last line break or space in the last fifth."""
    passage = passage.strip()
    if not max_chars or len(passage) <= max_chars:
        return passage
    cut = passage[:max_chars]
    brk = max(cut.rfind("\n"), cut.rfind(" "))
    return cut[:brk] if brk >= int(max_chars * 0.8) else cut


def prompt_sha() -> dict:
    """sha256 (16 hex) of each prompt text and of the schema: a prompt edit without a version bump shows."""
    h = lambda s: hashlib.sha256(s.encode("utf-8")).hexdigest()[:16]  # noqa: E731
    return {**{f"qa_{k}": h(v) for k, v in PROMPTS.items()}, **{f"judge_{k}": h(v) for k, v in JUDGE_PROMPTS.items()},
            **{f"types_{k}": h(json.dumps(v, sort_keys=True)) for k, v in TYPE_INSTRUCTIONS.items()},
            **{f"schema_{k}": h(json.dumps([qa_schema(k, t) for t in QUESTION_MIX], sort_keys=True))
               for k in ("en", "zh")}}


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_KV = re.compile(r'["\']?(question|answer)["\']?\s*[:：]\s*"((?:[^"\\]|\\.)*)"?', re.IGNORECASE | re.DOTALL)
_PLAIN = re.compile(r"(?:^|\n)\s*\**(?:Q|Question|问题)\**\s*[:：]\s*(?P<q>.+?)\s*(?:\n\s*)+"
                    r"\**(?:A|Answer|答案|回答)\**\s*[:：]\s*(?P<a>.+?)\s*(?:\n\s*\n|$)", re.IGNORECASE | re.DOTALL)


def _qa_from(obj: Any) -> dict | None:
    if isinstance(obj, dict):
        q, a = obj.get("question"), obj.get("answer")
        if isinstance(q, str) and isinstance(a, str) and q.strip():
            return {"question": q.strip(), "answer": a.strip()}
    return None


def parse_qa(text: str) -> tuple[dict | None, bool]:
    """({"question", "answer"} or None, repaired).

    Strict: the whole text (surrounding whitespace aside) is one JSON object with string fields question
    (non-empty) and answer. Otherwise one lenient repair: code fences dropped, the outermost {...} taken, curly
    quotes straightened, trailing commas removed, then JSON; failing that, "question": "..." / "answer": "..."
    pairs read by pattern (an unterminated string is taken to the end); failing that, "Question: ...\\nAnswer:
    ..." lines. ``repaired`` is True when only the repair parsed it."""
    try:
        got = _qa_from(json.loads(text.strip()))
        if got:
            return got, False
    except (json.JSONDecodeError, ValueError):
        pass
    t = _FENCE.sub("", text.strip())
    t = t.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    a, b = t.find("{"), t.rfind("}")
    if a >= 0 and b > a:
        body = re.sub(r",\s*([}\]])", r"\1", t[a:b + 1])
        try:
            got = _qa_from(json.loads(body))
            if got:
                return got, True
        except (json.JSONDecodeError, ValueError):
            pass
    pairs = {}
    for m in _KV.finditer(t):
        pairs.setdefault(m.group(1).lower(), m.group(2))
    if "question" in pairs and "answer" in pairs:
        try:
            got = _qa_from({k: json.loads(f'"{v}"') for k, v in pairs.items()})
        except json.JSONDecodeError:
            got = _qa_from(pairs)
        if got:
            return got, True
    m = _PLAIN.search(t)
    if m:
        return _qa_from({"question": m.group("q"), "answer": m.group("a")}), True
    return None, False


def parse_yes_no(text: str) -> bool | None:
    """True / False from a judge's reply (yes/no, 是/否, true/false as the first word); None when unclear."""
    t = text.strip().lower().lstrip("*\"' ")
    if t.startswith(("yes", "是", "true", "可以", "能")):
        return True
    if t.startswith(("no", "否", "false", "不")):
        return False
    return None


# ------------------------------------------------------------------------------------------------ sampling
_HEADING = re.compile(r"^\s*#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def stratum_of(doc: Document, stratify: str) -> str:
    """The stratum of a unit (see module conventions)."""
    meta = doc.metadata or {}
    document = str(meta.get("doc_id", doc.id))
    if stratify == "doc":
        return document
    if stratify == "none":
        return ""
    for key in ("source", "section"):
        if isinstance(meta.get(key), str) and meta[key].strip():
            return meta[key].strip()
    m = _HEADING.search(doc.text)
    return m.group(1) if m else document


def body_words(text: str) -> int:
    return text_length(text, "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en")


def sample_order(corpus: Corpus, seed: int = 0, stratify: str = "section", min_passage_words: int = 0,
                 max_passage_chars: int = 1000, prose_only: bool = False
                 ) -> tuple[list[Passage], int, dict[str, str], dict[str, int]]:
    """(passages in visiting order, windows skipped as too short, passage key -> stratum, windows skipped as not
    prose by reason: lab.testset.passages.not_prose, only with ``prose_only``); see module conventions."""
    rng = random.Random(seed)
    strata: dict[str, list[Passage]] = {}
    skipped = 0
    not_prose_counts = dict.fromkeys(NOT_PROSE, 0) if prose_only else {}
    of: dict[str, str] = {}
    for d in corpus:
        got, dropped = passage_windows(d, max_passage_chars, min_passage_words)
        skipped += dropped
        s = stratum_of(d, stratify)
        for p in got:
            reason = not_prose(p.text) if prose_only else None
            if reason is not None:
                not_prose_counts[reason] += 1
                continue
            of[p.key] = s
            strata.setdefault(s, []).append(p)
    names = sorted(strata)
    rng.shuffle(names)
    for s in names:
        rng.shuffle(strata[s])
    order, depth = [], 0
    while len(order) < len(of):
        for s in names:
            if depth < len(strata[s]):
                order.append(strata[s][depth])
        depth += 1
    return order, skipped, of, not_prose_counts


# ------------------------------------------------------------------------------------------------ generation
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

    def record(self) -> dict:
        return {"index": self.index, "unit_id": self.unit_id, "passage_span": list(self.span), "section": self.section,
                "round": self.round, "language": self.language, "question_type": self.qtype,
                "tries": self.tries, "raw": self.text[:2000], "error": self.error,
                "question": (self.qa or {}).get("question"),
                "answer": (self.qa or {}).get("answer"), "repaired": self.repaired, "results": self.results,
                "measures": {k: round(v, 4) for k, v in self.measures.items()}, "dropped_at": self.dropped_at,
                "accepted_as": self.qid}


@dataclass
class GenerationResult:
    folder: Path
    report: GateReport
    provenance: dict
    run_id: str | None = None


def _gen_params(cfg: GenerationConfig, round_: int, attempt: int, language: str = "en",
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


def _candidates(order: list[Passage], cfg: GenerationConfig) -> Iterator[Candidate]:
    i = 0
    for r in range(cfg.rounds):
        for p in order:
            lang = detect_language(p.text)
            qtype = question_type(i, r, cfg.seed)
            yield Candidate(i, p.unit_id, r, lang, build_prompt(p.text, lang, qtype=qtype), p.text, (p.start, p.end),
                            p.section, qtype)
            i += 1


class _Models:
    """The embedder and tokenizer the gates use, loaded once."""

    def __init__(self, cache_dir, progress: bool, embedder=None, topic_model: str = "multilingual-e5-small"):
        self.embedder = embedder or load_embedder(topic_model, cache_dir=cache_dir, progress=progress)
        self.vectors = EmbeddingCache(Cache(cache_dir), progress=False)
        self.tokenizer = Tokenizer(language="auto", stem=True, stopwords="nltk", cache_dir=cache_dir)
        self.vocabulary: frozenset[str] | None = None  # the corpus's words, for the known_names gate

    def encode(self, texts: list[str], kind: str) -> np.ndarray:
        return self.vectors.encode(self.embedder, texts, kind=kind)


def _safe_map(llm, prompts: list[str], breaker=None, per_prompt: list[dict] | None = None,
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

    def one(item):
        prompt, prompt_gen = item
        if breaker is not None and breaker.tripped:
            breaker.skip()
            return None, "skipped: the endpoint failed too many calls in a row"
        try:
            text = llm.complete(prompt, **prompt_gen).text
        except LLMError as e:
            if breaker is not None:
                breaker.failure(f"{type(e).__name__}: {e}")
            return None, f"{type(e).__name__}: {e}"[:300]
        except RuntimeError as e:
            return None, f"{type(e).__name__}: {e}"[:300]
        if breaker is not None:
            breaker.success()
        return text, None

    workers = max(1, min(int(getattr(llm, "concurrency", 1)), len(prompts)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="testset-llm") as pool:
        out = list(pool.map(one, zip(prompts, params, strict=True)))
    if breaker is not None:
        breaker.check()
    return out


def _generate_batch(llm, batch: list[Candidate], cfg: GenerationConfig, report: GateReport, breaker=None,
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
        outs = _safe_map(llm, [c.prompt for c in todo], breaker,
                         per_prompt=[_gen_params(cfg, c.round, attempt, c.language, c.qtype) for c in todo])
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


def _fails_text_gates(c: Candidate, models: _Models, cfg: GenerationConfig) -> bool:
    """Whether a parsed candidate fails a gate that needs no model (cheap: under a millisecond)."""
    assert c.qa is not None
    terms = set(models.tokenizer(c.passage))
    res, meas = check_text_gates(c.qa["question"], c.qa["answer"], terms, cfg.gates, models.tokenizer, c.language,
                                 c.passage)
    return not all(res.values()) or bool(meas["non_answer"])


def _judge(llm, pairs: list[tuple[str, str, str]], cfg: GenerationConfig, breaker=None) -> list[bool | None]:
    """LLM judge over (passage, question, language) triples: can the passage answer the question?"""
    prompts = [JUDGE_PROMPTS["zh" if lang == "zh" else "en"].format(passage=p, question=q) for p, q, lang in pairs]
    outs = _safe_map(llm, prompts, breaker, max_tokens=4, temperature=0.0, seed=cfg.seed)
    return [parse_yes_no(text) if text is not None else None for text, _ in outs]


def _check_batch(batch: list[Candidate], models: _Models, llm, cfg: GenerationConfig, breaker=None,
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
        terms = set(models.tokenizer(c.passage))
        res, meas = check_text_gates(c.qa["question"], c.qa["answer"], terms, g, models.tokenizer, c.language,
                                     c.passage)
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
        for c, verdict in zip(ask, _judge(llm, [(c.passage, c.qa["question"], c.language) for c in ask], cfg,
                                          breaker), strict=True):
            c.results["answerable"] = bool(verdict) and not c.measures.get("non_answer")
            c.measures["judge_unclear"] = float(verdict is None)
    for c, v in zip(valid, q, strict=True):
        c.measures["_vec"] = v  # popped by the caller before anything is written


# ------------------------------------------------------------------------------------------------ estimate
def estimate_run(n: int, cap: int, sample: int, sample_accepted: int, sample_seconds: float, usage: Mapping,
                 concurrency: int = 1) -> dict:
    """What a whole generation will cost, from its first batch (the timed sample; its answers are cached, so the
    run reuses them): candidates = n / yield, the yield smoothed as (accepted + 1) / (sample + 2) so a sample
    with no pass does not predict infinity, at most ``cap``; LLM calls and tokens per candidate as in the
    sample (tokens per answer generated, not read from the cache); seconds per candidate the sample's wall time,
    or, when the sample came from the cache, what its answers took when they were generated (``cold_seconds``)
    over ``concurrency``. ``tokens`` None: the sample's answers all came from the cache, which counts no tokens."""
    calls = float(usage.get("calls", 0))
    tokens = float(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
    rate = (sample_accepted + 1) / (sample + 2)
    candidates = int(min(cap, math.ceil(n / rate))) if sample else cap
    per = max(sample_seconds, float(usage.get("cold_seconds", 0.0)) / max(concurrency, 1)) / max(sample, 1)
    per_call = calls / max(sample, 1)
    return {"candidates": candidates, "calls": int(round(candidates * per_call)),
            "tokens": int(round(tokens / max(float(usage.get("generated", calls)), 1) * candidates * per_call))
            if tokens else None,
            "seconds": round(candidates * per, 1),
            "sample": sample, "sample_accepted": sample_accepted, "sample_seconds": round(sample_seconds, 2),
            "yield_estimate": round(rate, 4), "sample_cached": int(usage.get("cache_hits", 0))}


def format_estimate(est: Mapping) -> str:
    """One line: the estimate of :func:`estimate_run`."""
    tokens = "tokens unknown (sample cached)" if est["tokens"] is None else f"{est['tokens']:,} tokens"
    return (f"estimate: about {est['candidates']} candidates, {est['calls']} LLM calls, {tokens}, "
            f"{est['seconds'] / 60:.1f} min (from a timed sample of {est['sample']} candidates: "
            f"{est['sample_accepted']} passed, {est['sample_seconds']:.1f} s, {est['sample_cached']} answers cached)")


# ------------------------------------------------------------------------------------------------ output folder
def held_files(folder: str | Path) -> list[str]:
    """The names of :data:`SET_FILES` that ``folder`` holds (empty when it holds no set, or does not exist)."""
    folder = Path(folder)
    return [name for name in SET_FILES if (folder / name).exists()]


def defining_params(cfg: GenerationConfig) -> dict:
    """The params of ``cfg`` that can change which questions pass (see module conventions)."""
    return {k: v for k, v in _plain(asdict(cfg)).items() if k not in _NOT_DEFINING}


def read_request(folder: str | Path) -> dict:
    """``generation.json`` of a set folder; ConfigError when there is none or it is not JSON."""
    path = Path(folder) / REQUEST_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: holds {', '.join(held_files(folder))} but no {REQUEST_FILE}, so there is "
                          "nothing to resume (made by an older lab, or not by lab testset generate); pass --force "
                          "to replace it, or choose another --out")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}, line {e.lineno}: malformed JSON ({e.msg}); pass --force to start over") from None


def _first_difference(path: Path, held: Mapping, asked: Mapping, prefix: str = "") -> None:
    """ConfigError naming the first field where ``held`` (the folder's request) and ``asked`` differ."""
    for key in sorted(set(held) | set(asked)):
        a, b = held.get(key), asked.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            _first_difference(path, a, b, f"{prefix}{key}.")
        elif a != b:
            raise ConfigError(f"{path}, field '{prefix}{key}': the set was made with {a!r}, this run asks for "
                              f"{b!r}; resume with the same settings, or pass --force to start over")


def check_out_folder(out: str | Path, cfg: GenerationConfig, *, force: bool = False,
                     resume: bool = False) -> dict | None:
    """Before any work: refuse a folder that holds a set unless ``force`` or ``resume`` (ConfigError, one line);
    with ``resume``, the folder's request (returned) must have the same defining params as ``cfg``. None when
    there is nothing to resume."""
    if force and resume:
        raise ConfigError("--force and --resume: pass one (--force replaces the set, --resume continues it)")
    held = held_files(out)
    if not held or force:
        return None
    if not resume:
        raise ConfigError(f"{out}: holds a test set ({', '.join(held)}); pass --resume to continue it, --force to "
                          "replace it, or choose another --out")
    request = read_request(out)
    _first_difference(Path(out) / REQUEST_FILE, {"params": request.get("params", {})}, {"params": defining_params(cfg)})
    return request


def generation_request(units_described: Mapping, llm_identity: str, cfg: GenerationConfig) -> dict:
    """What defines a generation (``generation.json``; see module conventions)."""
    return {"source_dataset": units_described["source_dataset"],
            "source_fingerprint": units_described["source_fingerprint"],
            "units_fingerprint": units_described["units_fingerprint"], "chunking": units_described["chunking"],
            "llm": llm_identity, "prompt_version": PROMPT_VERSION, "params": defining_params(cfg)}


def start_folder(out: str | Path, request: dict, resumed: dict | None, force: bool) -> Path:
    """Make ``out`` ready once the model is loaded: a resumed request must match ``request`` field by field;
    ``force`` removes :data:`SET_FILES`; then ``generation.json`` is written."""
    folder = Path(out)
    if resumed is not None:
        _first_difference(folder / REQUEST_FILE, resumed, request)
    if force:
        for name in held_files(folder):
            target = folder / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / REQUEST_FILE, json.dumps(request, indent=1, ensure_ascii=False) + "\n")
    return folder


def _duplicate_gate(c: Candidate, vec, kept_vecs: np.ndarray, guard: np.ndarray, cfg: GenerationConfig,
                    report: GateReport) -> None:
    """The not_duplicate gate of a candidate that passed every other gate: its question's embedding ``vec`` against
    the accepted questions' (``kept_vecs``) and the dataset's existing queries' (``guard``); sets its result and
    measures and counts a drop as an existing query in ``report``. Other candidates are left as they are."""
    if not (c.qa is not None and all(c.results.get(g, True) for g in GATES if g != "not_duplicate")):
        return
    sim = float((kept_vecs @ vec).max()) if len(kept_vecs) else 0.0
    leak = float((guard @ vec).max()) if len(guard) else 0.0
    c.measures["max_similarity_to_accepted"] = sim
    if len(guard):
        c.measures["max_similarity_to_existing_queries"] = leak
    c.results["not_duplicate"] = max(sim, leak) < cfg.gates.duplicate_threshold
    if leak >= cfg.gates.duplicate_threshold:
        report.extra["dropped_as_existing_query"] = report.extra.get("dropped_as_existing_query", 0) + 1


def _summarize_candidates(report: GateReport, checked: list[Candidate], accepted: list[Candidate]) -> None:
    """The question types (target mix, asked, accepted) and the distributions of the gates' measures over the
    checked candidates (the overlap also over the accepted ones), into ``report``."""
    report.extra["question_types"] = {
        "target": {t: k / sum(QUESTION_MIX.values()) for t, k in QUESTION_MIX.items()},
        "asked": {t: sum(1 for c in checked if c.qtype == t) for t in QUESTION_MIX},
        "accepted": {t: sum(1 for c in accepted if c.qtype == t) for t in QUESTION_MIX}}
    for key, name in (("overlap", "overlap"), ("answer_support", "answer_support"), ("similarity", "similarity"),
                      ("repetition", "repetition")):
        report.distributions[name] = summarize(c.measures[key] for c in checked if key in c.measures)
    report.distributions["accepted_overlap"] = summarize(c.measures["overlap"] for c in accepted)


def generate_testset(dataset, out: str | Path, *, llm=None, config: GenerationConfig | None = None,  # noqa: PLR0913 - the public signature, one keyword per `lab testset generate` option
                     chunking=None, cache_dir: str | Path = ".cache", progress: bool = True,
                     tracking_root: str | Path | None = "mlruns", experiment: str = "testset",
                     embedder=None, llm_options: Mapping | None = None, force: bool = False,
                     resume: bool = False, dry_run: bool = False, echo=None) -> GenerationResult:
    """Generate a test set from ``dataset`` (path or Dataset) into ``out``; see the module docstring.

    ``llm``: an LLM object or a spec for lab.models.llm.load_llm (None / "local": the packaged SmolLM2-135M).
    ``llm_options``: extra arguments for load_llm (e.g. ``{"concurrency": 4}``: llama.cpp then decodes four
    candidates in one batch, faster on a CPU; the cache key does not depend on it). ``tracking_root`` None:
    nothing is logged to MLflow. ``force`` / ``resume``: when ``out`` holds a set, replace it / continue it (see
    module conventions; without either, ConfigError before any work). ``echo`` (a callable taking one line):
    the estimate of the whole run (:func:`estimate_run`) once the first batch is done, when it will take more
    than a minute; ``dry_run``: stop there, write nothing, and return a result whose ``folder`` is None and whose
    report holds the estimate (``extra["estimate"]``). Returns the folder, the gate report, the provenance and
    the MLflow run id.
    """
    cfg = config or GenerationConfig()
    resumed = check_out_folder(out, cfg, force=force, resume=resume)
    t0 = time.perf_counter()
    units = load_units(dataset, chunking, progress=progress)
    model = load_llm(llm, cache_dir=cache_dir, progress=progress, seed=cfg.seed, **dict(llm_options or {})) if (
        llm is None or isinstance(llm, (str, Mapping))) else llm
    units_described = units.describe()
    if not dry_run:
        start_folder(out, generation_request(units_described, model.identity, cfg), resumed, force)
    usage0 = model.usage()
    sample = _sample(units, cfg)
    models = _Models(cache_dir, progress, embedder, cfg.gates.topic_model)
    topic = topic_model_note(models.embedder)
    gen = _Generation(cfg, units, model, models, _new_report(cfg, sample, topic), usage0)
    guard = _guard_vectors(gen)
    if not _generate_all(gen, sample.order, guard, progress, echo, dry_run):
        return GenerationResult(None, gen.report, {}, None)
    _summarize_candidates(gen.report, gen.checked, gen.accepted)
    qrels = {c.qid: {c.unit_id: cfg.grade} for c in gen.accepted}
    if cfg.extra_relevant and gen.accepted and gen.stopped is None:
        gen.report.extra.update(_second_pass(model, units.corpus, gen.accepted, qrels, cfg, cache_dir, progress))
    evidence, spans = _evidence(gen)
    tiers = _difficulty(gen, spans, cache_dir)
    queries = _query_records(gen, spans, sample.strata, tiers)
    provenance = {"kind": "generated", "created": now_utc(), "units": units_described, "resumed": resumed is not None,
                  **_run_provenance(gen, sample, topic), "seconds": round(time.perf_counter() - t0, 1)}
    folder = _write_set(out, gen, queries, qrels, provenance, evidence)
    run_id = None
    if tracking_root is not None:
        run_id = provenance["mlflow_run_id"] = _log_generation(gen, folder, provenance, topic, tracking_root,
                                                               experiment)
        write_provenance(folder, provenance)
    if gen.stopped is not None:
        raise EndpointDown(f"{gen.stopped}; what was finished ({len(gen.accepted)} accepted questions of "
                           f"{len(gen.checked)} checked candidates, gate report, provenance) is written to {folder}")
    return GenerationResult(folder, gen.report, provenance, run_id)


@dataclass
class _Sample:
    """The corpus's passages in visiting order and what sampling skipped (:func:`sample_order`)."""

    order: list[Passage]
    skipped: int  # windows too short
    strata: dict[str, str]  # passage key -> stratum
    not_prose: dict[str, int]  # windows skipped as not prose, by reason


@dataclass
class _Generation:
    """One generation's working state: the LLM, the gates' models, the units, the gate report, the LLM usage at
    the start, and the candidates checked and accepted so far (``stopped``: the endpoint went down)."""

    cfg: GenerationConfig
    units: Any
    model: Any
    models: _Models
    report: GateReport
    usage0: dict
    checked: list[Candidate] = field(default_factory=list)
    accepted: list[Candidate] = field(default_factory=list)
    stopped: EndpointDown | None = None

    def usage(self) -> dict:
        """The LLM usage since the start."""
        return {k: v - self.usage0.get(k, 0) for k, v in self.model.usage().items()}


def _sample(units, cfg: GenerationConfig) -> _Sample:
    """:func:`sample_order` on the units; ConfigError when no passage is eligible."""
    sample = _Sample(*sample_order(units.corpus, cfg.seed, cfg.stratify, cfg.min_passage_words,
                                   cfg.max_passage_chars, cfg.prose_only))
    if not sample.order:
        raise ConfigError(f"{units.dataset.path}: no passage of the corpus has {cfg.min_passage_words}+ words "
                          f"of prose ({sum(sample.not_prose.values())} skipped as not prose); "
                          "lower --min-passage-words or check the corpus")
    return sample


def _new_report(cfg: GenerationConfig, sample: _Sample, topic: dict) -> GateReport:
    """The gate report, before any candidate: the gates' settings, sampling figures and the topic model."""
    report = GateReport(config={**cfg.gates.describe()}, answerability_method=(
        "lexical: share of the answer's content terms found in the passage" if cfg.gates.answerability == "lexical"
        else "llm judge (yes/no: can the passage answer the question?) on candidates passing the text gates"))
    report.skipped_units, report.units_eligible = sample.skipped, len(sample.order)
    report.extra["skipped_not_prose"] = sample.not_prose
    report.extra["topic_model"] = topic["identity"]
    report.extra["topic_model_note"] = topic["note"]
    return report


def _guard_vectors(gen: _Generation) -> np.ndarray:
    """Vectors of the dataset's existing queries: a candidate too close to one is a duplicate."""
    existing = list(gen.units.dataset.queries.texts.values())
    guard = (gen.models.encode(existing, "query") if existing
             else np.zeros((0, gen.models.embedder.dim), dtype=np.float32))
    gen.report.extra["existing_queries_guarded"] = len(existing)
    return guard


def _generate_all(gen: _Generation, order: list[Passage], guard: np.ndarray, progress: bool, echo,
                  dry_run: bool) -> bool:
    """Batches of candidates through generation and the gates until ``n`` are accepted, the attempts cap is
    reached or the endpoint goes down (``gen.stopped``: what is finished is kept, the batch dropped); the run's
    estimate after the first batch. Returns False when a dry run stopped there."""
    cfg = gen.cfg
    stream = _candidates(order, cfg)
    kept_vecs = np.zeros((0, gen.models.embedder.dim), dtype=np.float32)
    cap = min(cfg.attempts_cap, len(order) * cfg.rounds)
    pbar = bar(range(cap), desc=f"generate ({gen.units.dataset.name})", total=cap, enabled=progress)
    shown = pbar if getattr(pbar, "update", None) else None
    breaker = FailureBreaker(cfg.max_consecutive_failures, "test set generation")
    done = estimated = False
    slots = int(getattr(gen.model, "concurrency", 1))
    while not done and len(gen.checked) < cap:
        size = next_batch_size(cfg, len(gen.accepted), slots)
        batch = [c for _, c in zip(range(min(size, cap - len(gen.checked))), stream, strict=False)]
        if not batch:
            break
        t_batch = time.perf_counter()
        try:
            _generate_batch(gen.model, batch, cfg, gen.report, breaker, retry_if=(
                (lambda c: _fails_text_gates(c, gen.models, cfg)) if cfg.retry_on == "text_gates" else None))
            gen.report.repaired += sum(1 for c in batch if c.repaired and c.qa is not None)
            _check_batch(batch, gen.models, gen.model, cfg, breaker, gen.units.corpus)
        except EndpointDown as exc:  # the endpoint is down: keep what is finished, drop this batch, stop
            gen.stopped = exc
            gen.report.extra["stopped"] = str(exc)
            break
        kept_vecs, done = _gate_batch(gen, batch, kept_vecs, guard, shown)
        if not estimated:
            estimated = True
            _estimate(gen, cap, time.perf_counter() - t_batch, echo, dry_run)
            if dry_run:
                if shown is not None:
                    shown.close()
                return False
    if shown is not None:
        shown.close()
    return True


def next_batch_size(cfg: GenerationConfig, accepted: int = 0, slots: int = 1) -> int:
    """Candidates in the next batch: ``batch_size``, at most twice the questions still missing, at least ``slots``
    (every llama.cpp slot busy). The set is the same whatever the size; only the work past the n-th pass changes."""
    return max(slots, min(cfg.batch_size, 2 * (cfg.n - accepted)))


def _gate_batch(gen: _Generation, batch: list[Candidate], kept_vecs: np.ndarray, guard: np.ndarray,
                pbar) -> tuple[np.ndarray, bool]:
    """The duplicate gate and the verdict of each checked candidate of ``batch``, in order; an accepted one gets its
    query id. Returns the accepted vectors and whether ``n`` are accepted (the rest of the batch is not counted)."""
    for pos, c in enumerate(batch):
        vec = c.measures.pop("_vec", None)
        _duplicate_gate(c, vec, kept_vecs, guard, gen.cfg, gen.report)
        c.dropped_at = gen.report.add(c.results)
        if c.dropped_at is None:
            c.qid = f"gen-{len(gen.accepted) + 1:04d}"
            gen.accepted.append(c)
            kept_vecs = np.concatenate([kept_vecs, vec[None, :]])
        gen.checked.append(c)
        if pbar is not None:
            pbar.update(1)
            pbar.set_postfix(accepted=len(gen.accepted), refresh=False)
        if len(gen.accepted) >= gen.cfg.n:
            gen.report.extra["generated_unchecked"] = len(batch) - pos - 1
            return kept_vecs, True
    return kept_vecs, False


def _estimate(gen: _Generation, cap: int, batch_seconds: float, echo, dry_run: bool) -> None:
    """The estimate of the whole run from the first batch (:func:`estimate_run`) into the report, printed through
    ``echo`` for a dry run or a run over a minute."""
    gen.report.extra["estimate"] = est = estimate_run(
        gen.cfg.n, cap, len(gen.checked), len(gen.accepted), batch_seconds, gen.usage(),
        int(getattr(gen.model, "concurrency", 1)))
    if echo is not None and (dry_run or est["seconds"] > 60):
        echo(format_estimate(est))


def _evidence(gen: _Generation) -> tuple[list[dict], dict[str, SupportSpan]]:
    """Each accepted question's evidence record and support span."""
    evidence, spans = [], {}
    for c in gen.accepted:
        sp = c.support
        # accepted: it has its query id, and its gates ran with the corpus (_check_batch), which set the span
        assert c.qid is not None and sp is not None
        spans[c.qid] = sp
        evidence.append(evidence_record(c.qid, c.unit_id, sp, c.span, gen.cfg.grade))
    return evidence, spans


def _difficulty(gen: _Generation, spans: dict[str, SupportSpan], cache_dir) -> dict[str, dict]:
    """Each accepted question's difficulty tier (:func:`difficulty_tiers`), with the tiers' and evidence counts in
    the report."""
    tiers = difficulty_tiers(gen.units.corpus, gen.accepted, gen.models.tokenizer, cache_dir, gen.cfg.seed)
    gen.report.extra["difficulty"] = {t: sum(1 for x in tiers.values() if x["difficulty"] == t) for t in DIFFICULTY}
    gen.report.extra["evidence_narrowed"] = sum(1 for sp in spans.values() if sp.method != "passage")
    gen.report.extra["evidence_whole_passage"] = sum(1 for sp in spans.values() if sp.method == "passage")
    return tiers


def _query_records(gen: _Generation, spans: dict[str, SupportSpan], strata: dict[str, str],
                   tiers: dict[str, dict]) -> dict:
    """qid -> (question, metadata) of each accepted question, as queries.jsonl holds them."""
    corpus = gen.units.corpus
    return {c.qid: (c.qa["question"], {
        "answer": c.qa["answer"], "source_unit": c.unit_id,
        "source_doc": str((corpus[c.unit_id].metadata or {}).get("doc_id", c.unit_id)),
        "passage": c.passage, "passage_span": list(c.span), "section": c.section,
        "evidence_span": [spans[c.qid].start, spans[c.qid].end], "evidence_method": spans[c.qid].method,
        "stratum": strata.get(f"{c.unit_id}@{c.span[0]}-{c.span[1]}", ""), "language": c.language,
        "round": c.round, "candidate": c.index, "question_type": c.qtype, **tiers[c.qid],
        "overlap": round(c.measures["overlap"], 4), "answer_support": round(c.measures["answer_support"], 4),
        "similarity": round(c.measures["similarity"], 4), "prompt_version": PROMPT_VERSION}) for c in gen.accepted}


def _run_provenance(gen: _Generation, sample: _Sample, topic: dict) -> dict:
    """The provenance of the run: passages, LLM, prompt, embedder, params, gate report, coverage and usage."""
    cfg, accepted, strata = gen.cfg, gen.accepted, sample.strata
    return {
        "passages": {"eligible": len(sample.order), "skipped_too_short": sample.skipped,
                     "skipped_not_prose": sample.not_prose,
                     "max_chars": cfg.max_passage_chars,
                     "min_words": cfg.min_passage_words,
                     "documents_covered": len({c.unit_id for c in accepted}),
                     "documents_total": len({p.unit_id for p in sample.order})},
        "llm": {"identity": gen.model.identity, **_public(_plain(gen.model.describe()))},
        "prompt": {"version": PROMPT_VERSION, "judge_version": JUDGE_VERSION, "sha256": prompt_sha(),
                   "json_mode": cfg.json_mode, "languages": sorted({c.language for c in accepted})},
        "embedder": topic["identity"], "topic_model": topic,
        "params": cfg.describe(), "seed": cfg.seed, "gate_report": gen.report.to_dict(),
        "source_units": [c.unit_id for c in accepted],
        "strata_covered": len({strata[f"{c.unit_id}@{c.span[0]}-{c.span[1]}"] for c in accepted}),
        "strata_total": len(set(strata.values())),
        "llm_usage": gen.usage(),
    }


def _write_set(out, gen: _Generation, queries: dict, qrels: dict, provenance: dict, evidence: list[dict]) -> Path:
    """The BEIR set with its evidence (or, with no question accepted, the provenance alone, so the drops can be
    read), every checked candidate and the gate report; returns the folder."""
    if gen.accepted:
        folder = write_beir_set(out, gen.units.corpus, queries, qrels, provenance)
        write_jsonl(folder / "evidence.jsonl", evidence)
    else:  # nothing to load: keep the report and the candidates, so the drops can be read
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        write_provenance(folder, provenance)
    write_jsonl(folder / "candidates.jsonl", (c.record() for c in gen.checked))
    write_text_atomic(folder / "gate_report.json", json.dumps(gen.report.to_dict(), indent=1) + "\n")
    return folder


def _log_generation(gen: _Generation, folder: Path, provenance: dict, topic: dict, tracking_root,
                    experiment: str) -> str:
    """The MLflow run of a generation (lab.testset.track.log_testset_run): settings, gate figures, usage, the set."""
    units, model = gen.units, gen.model
    params = {"dataset": units.dataset.name, "llm": model.identity, "prompt_version": PROMPT_VERSION,
              "topic_model": topic["identity"], "chunking": units.chunking, **gen.cfg.describe()}
    metrics = {**gen.report.metrics(), "n_queries": len(gen.accepted),
               **{f"llm_{k}": v for k, v in provenance["llm_usage"].items()}, "seconds": provenance["seconds"]}
    return log_testset_run("generate", f"generate {units.dataset.name} ({len(gen.accepted)} q)", params, metrics,
                           {"dataset": units.dataset.name,
                            "dataset_fingerprint": provenance["units"]["source_fingerprint"],
                            "testset_fingerprint": fingerprint(folder), "model.llm": model.identity,
                            "seed": gen.cfg.seed}, [folder], root=tracking_root, experiment=experiment)


#: Difficulty tiers of a generated question, easiest first (see :func:`difficulty`).
DIFFICULTY = ("easy", "medium", "hard")


def difficulty(bm25_rank: int | None, evidence_overlap: float) -> str:
    """The tier of a question: "hard" when BM25 (the question against every unit) does not rank its source unit
    in the top 10; "easy" when it ranks it in the top 3 and half or more of the question's content terms occur
    in its evidence span; "medium" otherwise."""
    if bm25_rank is None or bm25_rank > 10:
        return "hard"
    return "easy" if bm25_rank <= 3 and evidence_overlap >= 0.5 else "medium"


def difficulty_tiers(corpus: Corpus, accepted: list[Candidate], tokenizer, cache_dir, seed: int) -> dict[str, dict]:
    """qid -> {"difficulty", "bm25_rank" (1-based, None past 100), "evidence_overlap"} of each accepted question."""
    if not accepted:
        return {}
    bm25 = build("bm25", {}, Context(cache_dir=Path(cache_dir), progress=False, seed=seed))
    bm25.index(corpus)
    run = bm25.search_batch(Queries({c.qid: c.qa["question"] for c in accepted}), 100)
    out = {}
    for c in accepted:
        # an accepted candidate has its query id and (gates run with the corpus) its evidence span
        assert c.qid is not None and c.support is not None
        ranked = [did for did, _ in run.ranked(c.qid, 100)]
        rank = ranked.index(c.unit_id) + 1 if c.unit_id in ranked else None
        text = corpus[c.unit_id].text[c.support.start:c.support.end]
        overlap = term_coverage(c.qa["question"], set(tokenizer(text)), tokenizer)
        out[c.qid] = {"difficulty": difficulty(rank, overlap), "bm25_rank": rank,
                      "evidence_overlap": round(overlap, 4)}
    return out


def topic_model_note(embedder) -> dict:
    """Which model the on-topic and duplicate gates used, and whether it is the default dense retriever (whose
    own similarity would then decide which questions exist to test it)."""
    identity = str(getattr(embedder, "identity", getattr(embedder, "name", "?")))
    name = str(getattr(embedder, "name", identity))
    same = DEFAULT_MODEL.split("/")[-1].lower() in (name.lower() + " " + identity.lower())
    note = (f"on-topic and duplicate gates use {name}, the same model as the default dense retriever: questions "
            "that retriever finds easily are favoured; compare dense results on this set with care" if same else
            f"on-topic and duplicate gates use {name}, not the default dense retriever ({DEFAULT_MODEL})")
    return {"identity": identity, "name": name, "same_as_default_dense": same, "note": note}


def _plain(d: Mapping) -> dict:
    return json.loads(json.dumps(d, default=str))


def _public(d: dict) -> dict:
    """``d`` with its ``path`` (a local model file, named by its identity's sha256 too) as its file name only."""
    return {**d, "path": Path(d["path"]).name} if isinstance(d.get("path"), str) else d


def _second_pass(llm, corpus: Corpus, accepted: list[Candidate], qrels: dict, cfg: GenerationConfig, cache_dir,
                 progress: bool) -> dict:
    """Extra relevant units: BM25's top ``extra_candidates`` other units per question, judged by the LLM."""
    bm25 = build("bm25", {}, Context(cache_dir=Path(cache_dir), progress=False, seed=cfg.seed))
    bm25.index(corpus)
    run = bm25.search_batch(Queries({c.qid: c.qa["question"] for c in accepted}), cfg.extra_candidates + 1)
    triples, keys = [], []
    for c in accepted:
        for did, _ in run.ranked(c.qid, cfg.extra_candidates + 1):
            if did != c.unit_id and len([k for k in keys if k[0] == c.qid]) < cfg.extra_candidates:
                keys.append((c.qid, did))
                triples.append((shown_passage(unit_text(corpus[did]), cfg.max_passage_chars), c.qa["question"],
                                c.language))
    verdicts = _judge(llm, triples, cfg) if triples else []
    added = 0
    for (qid, did), v in zip(keys, verdicts, strict=True):
        if v:
            qrels[qid][did] = cfg.extra_grade
            added += 1
    return {"second_pass_judged": len(keys), "second_pass_added": added,
            "second_pass_unclear": sum(1 for v in verdicts if v is None)}
