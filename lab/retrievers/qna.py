"""QnA-summary retrieval: at index time an LLM writes questions and/or a summary for every chunk; those texts are
indexed (with the chunk itself) by a base strategy, and a query's hits map back to their chunk.

``build("qna", {...})`` params
- ``generate``: "questions" | "summary" | "both" (default). Questions and summaries are separate LLM calls (one
  each per chunk), so after a "both" run the "questions" and "summary" variants are answered from the LLM cache.
- ``n_questions`` (default 3): questions asked for per chunk (fewer are kept when the model writes fewer).
- ``include_original`` (default true): the chunk text is indexed too, as one more pseudo-document.
- ``base`` (default "dense") and ``base_params``: the strategy that indexes the pseudo-documents (any registered
  strategy built through :func:`lab.retrievers.base.build`: dense, bm25, hybrid, ...).
- ``llm`` (spec for :func:`lab.retrievers.llmutil.llm_for`; default the packaged SmolLM2-135M-Instruct), ``n_ctx``
  (context tokens the prompt must fit in; default the LLM's own ``n_ctx``, else 2048), ``question_max_tokens``
  (default 30 per question), ``summary_max_tokens`` (default 96), ``summary_gen`` (extra generation params of the
  summary call; default ``{"repeat_penalty": 1.2}`` on a local GGUF model, whose 135M default loops otherwise,
  and ``{}`` on an HTTP endpoint), ``depth`` (pseudo-documents fetched per query; default ``k`` times the most
  pseudo-documents any chunk has, which guarantees ``k`` distinct chunks when the base returns that many).

Conventions
- Pseudo-document ids are ``<chunk id>::text``, ``<chunk id>::q<j>`` (j from 1) and ``<chunk id>::summary``; the
  mapping back is a dict built at index time (ids are never parsed).
- A chunk's score is the maximum of its pseudo-documents' base scores ("max-sim" over its representations).
- Long chunks are cut to fit the context: ``n_ctx - max_tokens - PROMPT_OVERHEAD_TOKENS`` tokens, estimated at
  ``CHARS_PER_TOKEN`` characters per token (3.0: measured 3.0-4.2 on ord-qa's markdown with SmolLM2's tokenizer;
  the lower end, so the estimate errs on the short side), cut at a word boundary. Cut chunks are counted
  (``truncated``); a prompt that overflows all the same is rebuilt with half the text (``refits``).
- The model's output is parsed leniently (:func:`parse_questions`, :func:`parse_summary`); a chunk whose output
  yields nothing usable is counted (``describe()["generation"]``) and keeps its other pseudo-documents; a chunk
  left with none (``include_original=false`` and every generation unusable) is indexed with its own text,
  counted as ``fallback_original``.
- Cost: the LLM is paid at index time (``usage()``, reported as ``llm_index_*``); searching calls no LLM.
  Answers go through the LLM's response cache and the base's embedding cache, so a rerun (or a sweep point with
  the same prompts) generates and encodes nothing.
- Latency of a query = the base's latency for it (searched alone) + the mapping back to chunks.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from lab.core.errors import ConfigError
from lab.core.progress import progress as bar
from lab.data.types import Corpus, Document, Queries, Run
from lab.models.estimate import map_estimated
from lab.models.llm import LLMError, LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.dense import passage_text
from lab.retrievers.llmutil import INDEX_ESTIMATE_CALLS, llm_describe, llm_for
from lab.retrievers.params import COUNT, one_of

#: bump when a prompt or the parsing of its output changes (logged in describe()).
PROMPT_VERSION = 1
QUESTIONS_PROMPT = ("{text}\n\nWrite {n} questions that the text above answers. Reply with a numbered list of "
                    "{n} questions, each ending with a question mark.")
SUMMARY_PROMPT = "{text}\n\nSummarize the text above in two sentences."
GENERATE = ("questions", "summary", "both")

#: characters per token assumed when cutting text to fit the context (see the module docstring).
CHARS_PER_TOKEN = 3.0
#: tokens reserved for the chat template and the instruction around the text.
PROMPT_OVERHEAD_TOKENS = 64
DEFAULT_N_CTX = 2048
LOCAL_SUMMARY_GEN = {"repeat_penalty": 1.2}
SEP = "::"


# ------------------------------------------------------------------------------------------------ pure helpers
def text_budget(n_ctx: int, max_new_tokens: int, overhead: int = PROMPT_OVERHEAD_TOKENS) -> int:
    """Tokens left for the text in a prompt: ``n_ctx - max_new_tokens - overhead`` (ConfigError if < 32)."""
    left = int(n_ctx) - int(max_new_tokens) - int(overhead)
    if left < 32:
        raise ConfigError(f"n_ctx={n_ctx} leaves {left} tokens for the text after max_tokens={max_new_tokens} and "
                          f"{overhead} tokens of prompt; raise n_ctx or lower max_tokens")
    return left


def fit_text(text: str, max_tokens: int, chars_per_token: float = CHARS_PER_TOKEN) -> str:
    """``text`` cut to about ``max_tokens`` tokens (``max_tokens * chars_per_token`` characters), at the last
    whitespace before the limit when there is one in the last fifth; unchanged when it already fits."""
    limit = max(1, int(max_tokens * chars_per_token))
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= int(limit * 0.8):
        cut = cut[:space]
    return cut.rstrip()


def is_context_overflow(error: BaseException) -> bool:
    """True for an LLM error that says the prompt did not fit the context (local: "raise n_ctx"; HTTP servers:
    "context length")."""

    text = f"{error} {getattr(error, 'hint', '')}".lower()
    return isinstance(error, LLMError) and ("n_ctx" in text or "context" in text)


def map_fitted(llm, make_prompt: Callable[[int, float], str], n: int, *, concurrency: int | None = None,
               progress: bool = True, desc: str = "", retries: int = 3, **gen) -> tuple[list, int]:
    """Answers to ``make_prompt(i, 1.0)`` for i in range(n) through ``llm.map`` (its first calls timed for the
    estimate of the build, :func:`lab.models.estimate.map_estimated`); returns (completions, refits).

    The character estimate of :func:`fit_text` can still overflow the context on token-dense text (code, tables,
    other scripts). Then the prompts are asked one by one (those answered already come from the LLM cache) and a
    prompt that overflows is rebuilt with ``make_prompt(i, scale)``, scale halved each time, up to ``retries``
    times; ``refits`` counts the prompts rebuilt. Any other error is raised.
    """
    prompts = [make_prompt(i, 1.0) for i in range(n)]
    try:
        return map_estimated(llm, prompts, f"index: {desc or 'LLM calls'}", min_calls=INDEX_ESTIMATE_CALLS,
                             concurrency=concurrency, progress=progress, desc=desc, **gen), 0
    except Exception as e:
        if not is_context_overflow(e):
            raise

    out, refits = [], 0
    for i in bar(range(n), desc=f"{desc} (refitting to the context)", total=n, enabled=progress):
        scale, prompt = 1.0, prompts[i]
        for attempt in range(retries + 1):
            try:
                out.append(llm.complete(prompt, **gen))
                break
            except Exception as e:
                if not is_context_overflow(e) or attempt == retries:
                    raise
                scale /= 2
                prompt = make_prompt(i, scale)
                refits += attempt == 0
    return out, refits


_MARKER = re.compile(r"^\s*(?:#{1,6}\s*|[-*+\u2022>]\s+|\(?\d{1,2}[.):]\s*(?!\d)|(?:q(?:uestion)?)\s*\d*\s*[:.)-]\s*)",
                     re.IGNORECASE)
_QUESTION_START = re.compile(r"^(?:what|how|why|which|who|whom|whose|when|where|is|are|can|could|does|do|did|"
                             r"should|will|would|in which|in what|for what)\b", re.IGNORECASE)
_NOT_QUESTION = re.compile(r"^(?:here (?:are|is)|sure|answer|note)\b|\byour (?:next |first |own )?questions?\b|"
                           r"\bany (?:other |more |further )?questions\b|\bcan i (?:help|assist)\b", re.IGNORECASE)


def _strip_markers(line: str) -> str:
    """Leading list/heading markers ("1.", "### 2)", "- ", "Q3:", "Question 2:") and bold marks removed."""
    line = line.replace("**", "").replace("__", "").strip()
    prev = None
    while prev != line:
        prev, line = line, _MARKER.sub("", line, count=1).strip()
    return line


def _prose_lines(text: str | None) -> list[str]:
    """The lines of ``text`` outside fenced code blocks (```), fences removed."""
    out, fenced = [], False
    for line in (text or "").splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def parse_questions(text: str, n: int | None = None, min_words: int = 3, max_chars: int = 300) -> list[str]:
    """Questions found in an LLM answer, in order, without duplicates (case-insensitive), at most ``n``.

    Lenient: fenced code is skipped, list and heading markers are dropped; every span ending in "?" is a question
    (several per line are split; text before the last sentence break is dropped, so "Sure. What is X?" gives
    "What is X?"); a line without "?" counts only when it starts like a question (what/how/why/... ) and does not
    end with ":". Spans under ``min_words`` words or over ``max_chars`` characters, preambles ("Here are ...") and
    chat filler addressed to the user ("What's your next question?") are dropped; duplicates are recognised
    ignoring case, spacing and a trailing "?".
    """
    out: list[str] = []
    seen: set[str] = set()
    for raw in _prose_lines(text):
        line = _strip_markers(raw)
        if not line:
            continue
        spans = re.findall(r"[^?]*\?", line)
        if not spans:
            spans = [line] if _QUESTION_START.match(line) and not line.endswith(":") else []
        for span in spans:
            span = re.split(r"(?<=[.!:])\s+", span.strip())[-1]
            span = _strip_markers(span).strip(" \"'")
            if (len(span.split()) < min_words or len(span) > max_chars or _NOT_QUESTION.search(span)
                    or not re.search(r"[A-Za-z\u00c0-\uffff]", span)):
                continue
            key = re.sub(r"\s+", " ", span.lower()).rstrip(" ?")
            if key in seen:
                continue
            seen.add(key)
            out.append(span)
            if n is not None and len(out) >= n:
                return out
    return out


_PREAMBLE = re.compile(r"^(?:sure[,!.]?\s*)?(?:here(?:'s| is) (?:a |the |my )?(?:short |brief |concise )?summary"
                       r"[^:\n]*:|(?:short |brief )?summary\s*:)\s*", re.IGNORECASE)


def parse_summary(text: str, min_words: int = 5) -> str | None:
    """A summary from an LLM answer, or None when nothing usable is left.

    Fenced code and heading lines ("## Build") are dropped, list markers and bold marks removed, lines joined by
    spaces, a leading "Here is a summary ...:" / "Summary:" removed, and sentences that repeat an earlier one
    (case-insensitive) dropped (the small model loops). When that leaves fewer than ``min_words`` words, a second
    pass keeps everything but the fence markers (SmolLM2-135M often writes its whole answer inside an unclosed
    code fence, as "# ..." comments); still fewer than ``min_words`` words: None.
    """
    summary = _summary_from([ln for ln in _prose_lines(text) if not ln.strip().startswith("#")], min_words)
    if summary is None:
        unfenced = [re.sub(r"^\s*```[\w+-]*\s*", "", ln) for ln in (text or "").splitlines()]
        summary = _summary_from(unfenced, min_words)
    return summary


def _summary_from(raw_lines: Iterable[str], min_words: int) -> str | None:
    lines = [line for line in map(_strip_markers, raw_lines) if line]
    joined = _PREAMBLE.sub("", " ".join(lines)).strip()
    sentences, seen = [], set()
    for sent in re.split(r"(?<=[.!?])\s+", joined):
        key = re.sub(r"\s+", " ", sent.lower()).strip()
        if key and key not in seen:
            seen.add(key)
            sentences.append(sent.strip())
    summary = " ".join(sentences)
    return summary if len(re.findall(r"\w+", summary)) >= min_words else None


def pseudo_documents(corpus: Corpus, questions: Mapping[str, Sequence[str]], summaries: Mapping[str, str | None],
                     include_original: bool = True) -> tuple[Corpus, dict[str, str], int]:
    """The pseudo-documents of every chunk and the map pseudo id -> chunk id.

    Per chunk, in order: ``<id>::text`` (the chunk's own title and text, when ``include_original``), one
    ``<id>::q<j>`` per question, ``<id>::summary`` (when there is one). A chunk left with none gets its own text
    anyway; the third value counts those chunks.
    """
    docs: dict[str, Document] = {}
    owner: dict[str, str] = {}
    fallback = 0

    def add(pid: str, doc: Document, chunk_id: str) -> None:
        if pid in docs:
            raise ConfigError(f"qna: pseudo-document id {pid!r} is made twice; chunk ids must be unique")
        docs[pid] = doc
        owner[pid] = chunk_id

    for d in corpus:
        made = 0
        if include_original:
            add(f"{d.id}{SEP}text", Document(f"{d.id}{SEP}text", d.text, d.title), d.id)
            made += 1
        for j, q in enumerate(questions.get(d.id, ()), 1):
            add(f"{d.id}{SEP}q{j}", Document(f"{d.id}{SEP}q{j}", q), d.id)
            made += 1
        summary = summaries.get(d.id)
        if summary:
            add(f"{d.id}{SEP}summary", Document(f"{d.id}{SEP}summary", summary), d.id)
            made += 1
        if not made:
            add(f"{d.id}{SEP}text", Document(f"{d.id}{SEP}text", d.text, d.title), d.id)
            fallback += 1
    return Corpus(docs, name=f"{corpus.name}:qna" if corpus.name else "qna"), owner, fallback


def max_by_chunk(hits: Iterable[tuple[str, float]], owner: Mapping[str, str], k: int) -> list[tuple[str, float]]:
    """Pseudo-document hits -> chunk hits: each chunk scores the max over its pseudo-documents; the best ``k``,
    score descending, ties by chunk id descending (the :meth:`lab.data.types.Run.ranked` rule)."""
    best: dict[str, float] = {}
    for pid, score in hits:
        chunk = owner[pid]
        if chunk not in best or score > best[chunk]:
            best[chunk] = float(score)
    return sorted(best.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[: int(k)]


# ------------------------------------------------------------------------------------------------ strategy
@register("qna", rules={"generate": one_of(*GENERATE), "n_questions": COUNT, "n_ctx": COUNT,
                        "question_max_tokens": COUNT, "summary_max_tokens": COUNT, "depth": COUNT,
                        "concurrency": COUNT},
          nested={"base_params": "base"})
class QnARetriever(BaseRetriever):
    """QnA-summary retrieval; see the module docstring for params and conventions."""

    name = "qna"

    def __init__(self, ctx: Context | None = None, *, generate: str = "both", n_questions: int = 3,
                 include_original: bool = True, base: str = "dense", base_params: dict | None = None,
                 llm: LLMSpec = None, n_ctx: int | None = None, question_max_tokens: int | None = None,
                 summary_max_tokens: int = 96,
                 summary_gen: dict | None = None, depth: int | None = None, concurrency: int | None = None):
        if base == "qna":
            raise ConfigError("qna: base='qna' would nest the strategy in itself; name a plain strategy (dense, bm25)")
        super().__init__(ctx, generate=generate, n_questions=int(n_questions), include_original=bool(include_original),
                         base=base, question_max_tokens=question_max_tokens, summary_max_tokens=int(summary_max_tokens),
                         depth=depth)
        self.generate = generate
        self.n_questions = int(n_questions)
        self.include_original = bool(include_original)
        self.base_name = base
        self.base = build(base, dict(base_params or {}), self.ctx)
        self.llm = llm_for(self.ctx, llm)
        self.n_ctx = int(n_ctx if n_ctx is not None else getattr(self.llm, "n_ctx", DEFAULT_N_CTX))
        self.question_max_tokens = int(question_max_tokens or 30 * self.n_questions)
        self.summary_max_tokens = int(summary_max_tokens)
        if summary_gen is None:
            summary_gen = LOCAL_SUMMARY_GEN if getattr(self.llm, "backend", "") == "gguf" else {}
        self.summary_gen = dict(summary_gen)
        self.depth = None if depth is None else int(depth)
        self.concurrency = concurrency
        self.questions: dict[str, list[str]] = {}
        self.summaries: dict[str, str | None] = {}
        self.stats: dict[str, int] = {}
        self._owner: dict[str, str] = {}
        self._per_chunk = 1

    # -------------------------------------------------------------------------------------- index
    def _generate(self, corpus: Corpus, template: str, max_new: int, what: str, gen: dict, **fmt
                  ) -> tuple[list, int, int]:
        """Answers for every chunk (texts cut to the context); also the number of chunks cut and of prompts
        rebuilt shorter after a context overflow (:func:`map_fitted`)."""
        budget = text_budget(self.n_ctx, max_new)
        full = [passage_text(d.title, d.text) for d in corpus]

        def make_prompt(i: int, scale: float) -> str:
            return template.format(text=fit_text(full[i], max(1, int(budget * scale))), **fmt)

        cut = sum(fit_text(t, budget) != t for t in full)
        answers, refits = map_fitted(self.llm, make_prompt, len(full), concurrency=self.concurrency,
                                     progress=self.ctx.progress, desc=f"qna: {what} for {len(full)} chunks",
                                     max_tokens=max_new, **gen)
        return answers, cut, refits

    def index(self, corpus: Corpus) -> None:
        """Generate (or read back) questions and summaries, parse them, index the pseudo-documents."""
        ids = corpus.ids
        stats = {"chunks": len(ids), "truncated": 0, "refits": 0, "questions_unusable": 0, "questions_kept": 0,
                 "summaries_unusable": 0}
        self.questions, self.summaries = {}, {}
        if self.generate in ("questions", "both"):
            answers, stats["truncated"], refits = self._generate(corpus, QUESTIONS_PROMPT, self.question_max_tokens,
                                                                 "questions", {}, n=self.n_questions)
            stats["refits"] += refits
            for cid, c in zip(ids, answers, strict=True):
                qs = parse_questions(c.text, self.n_questions)
                self.questions[cid] = qs
                stats["questions_kept"] += len(qs)
                stats["questions_unusable"] += not qs
        if self.generate in ("summary", "both"):
            answers, cut, refits = self._generate(corpus, SUMMARY_PROMPT, self.summary_max_tokens, "summaries",
                                                  self.summary_gen)
            stats["truncated"] = max(stats["truncated"], cut)
            stats["refits"] += refits
            for cid, c in zip(ids, answers, strict=True):
                s = parse_summary(c.text)
                self.summaries[cid] = s
                stats["summaries_unusable"] += s is None
        pseudo, self._owner, stats["fallback_original"] = pseudo_documents(corpus, self.questions, self.summaries,
                                                                            self.include_original)
        counts: dict[str, int] = {}
        for chunk in self._owner.values():
            counts[chunk] = counts.get(chunk, 0) + 1
        self._per_chunk = max(counts.values(), default=1)
        stats["pseudo_documents"] = len(pseudo)
        self.stats = stats
        self.base.index(pseudo)

    # -------------------------------------------------------------------------------------- search
    def _depth(self, k: int) -> int:
        total = len(self._owner)
        return min(total, self.depth if self.depth is not None else int(k) * self._per_chunk)

    def _require_index(self) -> None:
        if not self._owner:
            raise ConfigError("qna: search before index(corpus); call index() first")

    def search(self, queries: Queries, k: int = 100) -> Run:
        """The base searches each query alone (timed by it) for pseudo-documents; each query's hits then map
        back to chunks (timed here and added to its latency)."""
        self._require_index()
        run = self.base.search(queries, self._depth(k))
        scores, latency = {}, {}
        for qid in queries:
            t0 = time.perf_counter()
            scores[qid] = dict(max_by_chunk(run.scores.get(qid, {}).items(), self._owner, k))
            latency[qid] = run.latency.get(qid, 0.0) + time.perf_counter() - t0
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        self._require_index()
        return max_by_chunk(self.base.search_one(text, self._depth(k)), self._owner, k)

    # -------------------------------------------------------------------------------------- reporting
    def usage(self) -> dict[str, float]:
        """The LLM's cumulative counters (all index-time: searching calls no LLM)."""
        return llm_usage(self.llm)

    def describe(self) -> dict:
        """Params, prompt version, the LLM's identity, the base's describe() and the generation counts."""
        out = super().describe()
        out.update({"prompt_version": PROMPT_VERSION, **llm_describe(self.llm), "n_ctx": self.n_ctx,
                    "question_max_tokens": self.question_max_tokens, "summary_gen": dict(self.summary_gen),
                    "chars_per_token": CHARS_PER_TOKEN,
                    "base": self.base.describe()})
        if self.stats:
            out["generation"] = dict(self.stats)
        return out
