"""Query rewriting before retrieval: ``multi_query`` and ``step_back`` (HyDE is in :mod:`lab.retrievers.hyde`).

An LLM rewrites each query; the original and its rewrites are each retrieved by a base strategy (any registered
strategy, built through :func:`lab.retrievers.base.build`), and the runs are fused per query with
:func:`lab.retrievers.fusion.rrf`.

- ``multi_query``: the LLM writes ``n`` (default 3) rewrites in one call, as a list. The original query is always
  retrieved too (weight ``original_weight``, default 1; each rewrite weight 1).
- ``step_back`` (Zheng et al. 2023, "Take a Step Back"): the LLM writes one more general question about the
  concept behind the query; original and step-back question are fused with ``weights`` (default [1, 1]).

Params of both: ``llm`` (spec for :func:`lab.retrievers.llmutil.llm_for`; default the packaged SmolLM2),
``base`` (default "hybrid") and ``base_params``, ``depth`` (hits per retrieved text, default 100; searched at
``max(depth, k)``), ``rrf_k`` (60), ``max_tokens``, ``temperature`` (0), ``prompt`` (a template with ``{query}``,
and ``{n}`` for multi_query; default the module's constant, else logged as ``custom-<sha256[:8]>``).

Why ``base="hybrid"``: hybrid (BM25 + dense, RRF) is the strongest single-stage strategy measured here (SciFact
0.715 nDCG@10 against 0.680 BM25 and 0.645 dense; ord-qa 0.589 against 0.583 BM25), and rewrites by a weak LLM
drift in wording: BM25 keeps exact identifiers (command names such as ``set_routing_alpha``) matched while the
dense part covers paraphrases. Its cost per retrieved text (one query encode plus a BM25 lookup, tens of ms) is
small beside an LLM generation (seconds).

Parsing is lenient (see :func:`parse_rewrites`, :func:`parse_step_back`): list markers, labels, quotes and
markdown are stripped; empty items, items without words, duplicates and echoes of the original (see
:func:`is_echo`) are dropped. When nothing usable is left, the original query is retrieved alone and the query
counts as a parse failure in :meth:`diagnostics` (also in ``describe()``). ``self.rewrites[qid]`` keeps the
rewrites used, ``self.raw[qid]`` the LLM's text, ``self.gen_seconds[qid]`` the generation time in its latency.

Latency (``Run.latency``) is what a user would see: the LLM's generation time for that query plus the base
strategy's latency for each retrieved text (searched one after the other) plus fusion. All LLM answers of a batch
are produced first (``llm.map``, progress bar), then the timed searches run; on a cache hit the generation time is
:attr:`lab.models.llm.Completion.gen_seconds`, the time the answer took when it was generated, so a cached rerun
reports the latency of a cold one. ``describe()["latency"]`` says so ("latency includes LLM generation").
"""
from __future__ import annotations

import hashlib
import re
import time
from typing import Sequence

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Queries, Run
from lab.models.llm import LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.fusion import rrf
from lab.retrievers.llmutil import llm_describe, llm_for
from lab.retrievers.params import COUNT, at_least

MULTI_QUERY_PROMPT = (
    "Write {n} different search queries that would find documents answering the question below. "
    "Use other words than the question. Answer with a numbered list, one query per line, and nothing else.\n\n"
    "Question: {query}")
MULTI_QUERY_PROMPT_VERSION = "multi_query-1"

STEP_BACK_PROMPT = (
    "Rewrite the question below as a more general question about the concept or topic behind it "
    "(a \"step-back\" question), which is easier to answer. Answer with the one question only.\n\n"
    "Question: {query}")
STEP_BACK_PROMPT_VERSION = "step_back-1"

LATENCY_NOTE = ("latency includes LLM generation: per query, the generation seconds of its LLM answers "
                "(Completion.gen_seconds, also on cache hits) + the base retrieval of each text + fusion; backoff "
                "sleeps before LLM retries are excluded and reported apart (llm_query_retry_wait_seconds)")

ECHO_JACCARD = 0.9  # word-set Jaccard at or above which two texts count as the same query
MIN_LETTERS = 3  # an item needs at least this many letters to be a query

_LABEL_RE = re.compile(
    r"^(?:(?:step[\s-]*back|rewritten|alternative|general|generic|broader|search|new|abstract)\s*)?"
    r"(?:question|query|rewrite|version|answer)s?\s*(?:\d{1,2})?\s*[:：]\s*", re.IGNORECASE)
_MARKER_RE = re.compile(r"^\s*(?:[-*•·‣▪–—+>]+|\(?\d{1,2}\s*[.)）:：](?!\d)|\(?[a-zA-Z][.)](?=\s))\s*")
_INLINE_RE = re.compile(r"(?:(?<=\s)|^)\(?\d{1,2}[.)）]\s+")
_EDGE_RE = re.compile(r"^[\s\"'“”‘’`*_]+|[\s\"'“”‘’`*_]+$")
_WORD_RE = re.compile(r"\w+", re.UNICODE)


# ------------------------------------------------------------------------------------------------ pure helpers
def normalise_query(text: str) -> str:
    """Lower case, words only (``\\w+``), single spaces: the form two queries are compared in."""
    return " ".join(_WORD_RE.findall(text.lower()))


def is_echo(candidate: str, original: str, threshold: float = ECHO_JACCARD) -> bool:
    """True when ``candidate`` is ``original`` again: equal once normalised (:func:`normalise_query`), or
    word-set Jaccard >= ``threshold`` (a near-verbatim copy, e.g. one word changed in a long question)."""
    a, b = normalise_query(candidate), normalise_query(original)
    if a == b:
        return True
    sa, sb = set(a.split()), set(b.split())
    if not sa or not sb:
        return False
    return len(sa & sb) / len(sa | sb) >= threshold


def clean_item(text: str) -> str:
    """One line stripped of list markers ("1.", "2)", "-", "*", "•", "(a)"), labels ("Query 2:", "Step-back
    question:"), surrounding quotes, backticks and markdown emphasis, and whitespace; repeated until stable.
    Markdown bold ("**") is removed anywhere in the line."""
    prev = None
    text = text.replace("**", "").strip()
    while text != prev:
        prev = text
        text = _EDGE_RE.sub("", text)
        text = _MARKER_RE.sub("", text, count=1)
        text = _LABEL_RE.sub("", text, count=1)
    return " ".join(text.split())


def has_words(text: str, min_letters: int = MIN_LETTERS) -> bool:
    """At least ``min_letters`` letters (any script): "1. 1. 1." and "-" are not queries."""
    return sum(ch.isalpha() for ch in text) >= min_letters


def is_list_item(line: str) -> bool:
    """The line starts with a list marker (number, bullet, dash, letter)."""
    return bool(_MARKER_RE.match(line)) and bool(line.strip())


def split_items(text: str) -> list[str]:
    """Candidate items of an LLM list, raw: one per line; a line holding several inline numbered items
    ("1. foo 2. bar 3. baz") is split at the numbers. When any line is a list item, only list items are kept
    (the preamble "Here are 3 queries:" and trailing prose go); else every line is a candidate."""
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]
    items: list[tuple[bool, str]] = []
    for line in lines:
        marks = list(_INLINE_RE.finditer(line))
        if len(marks) >= 2:
            starts = [m.start() for m in marks]
            head = line[: starts[0]].strip()
            if head:
                items.append((False, head))
            for a, b in zip(starts, starts[1:] + [len(line)], strict=True):
                items.append((True, line[a:b]))
        else:
            items.append((is_list_item(line), line))
    if any(listed for listed, _ in items):
        return [s for listed, s in items if listed]
    return [s for _, s in items]


def parse_rewrites(text: str, original: str, n: int | None = None, truncated: bool = False) -> list[str]:
    """Usable rewrites in an LLM's list answer, in order, at most ``n`` (None: all).

    Items come from :func:`split_items`, cleaned by :func:`clean_item`. A list item ending in ":" (a heading such
    as "1. Optimize global placement settings:") loses the colon and is kept when it has two words or more; a line
    that is not a list item and ends in ":" is a preamble and goes. Also dropped: items without words
    (:func:`has_words`), echoes of ``original`` and duplicates of an earlier item (:func:`is_echo`).
    ``truncated`` (the answer hit max_tokens) drops the last item, which may be cut mid-sentence, unless it is the
    only one. An empty list means a parse failure (the caller falls back to the original query and counts it).
    """
    raw = split_items(text or "")
    if truncated and len(raw) > 1:
        raw = raw[:-1]
    out: list[str] = []
    for item in raw:
        q = clean_item(item)
        if q.endswith((":", "：")):
            if not is_list_item(item) or len(q.split()) < 2:
                continue
            q = q[:-1].rstrip()
        if not has_words(q):
            continue
        if is_echo(q, original) or any(is_echo(q, prev) for prev in out):
            continue
        out.append(q)
        if n is not None and len(out) >= n:
            break
    return out


def parse_step_back(text: str, original: str) -> str | None:
    """The step-back question in an LLM's answer, or None (a parse failure).

    The first line with words that is not a label ending in ":" (after :func:`clean_item`), cut after its first
    "?" when it has one (a small model often goes on to answer). A statement is accepted as it is (it still names
    the broader topic, and it is retrieved as text). None when nothing with words is left or it echoes
    ``original`` (:func:`is_echo`).
    """
    for line in (text or "").replace("\r", "\n").split("\n"):
        q = clean_item(line)
        if not has_words(q) or q.endswith((":", "：")):
            continue
        cut = min((i for i in (q.find("?"), q.find("？")) if i >= 0), default=-1)
        if cut >= 0:
            q = q[: cut + 1]
        if not has_words(q) or is_echo(q, original):
            return None
        return q
    return None


def generation_seconds(completions) -> float:
    """Seconds a user waits for these answers generated one after the other: the sum of ``gen_seconds`` (the
    original generation time, also on a cache hit); a completion without the field counts its ``seconds``."""
    return float(sum(getattr(c, "gen_seconds", 0.0) or getattr(c, "seconds", 0.0) for c in completions))


def prompt_template(prompt: str | None, default: str, default_version: str, fields: Sequence[str]) -> tuple[str, str]:
    """(template, version): the default with its version, or a custom template (which must contain every
    ``{field}``) versioned ``custom-<first 8 hex of its sha256>``."""
    if prompt is None:
        return default, default_version
    if not isinstance(prompt, str):
        raise ConfigError(f"prompt must be a template string, not {type(prompt).__name__}")
    missing = [f for f in fields if "{" + f + "}" not in prompt]
    if missing:
        raise ConfigError(f"prompt template {prompt[:60]!r}... lacks {', '.join('{' + f + '}' for f in missing)}; "
                          f"the default is {default[:60]!r}...")
    return prompt, "custom-" + hashlib.sha256(prompt.encode()).hexdigest()[:8]


# ------------------------------------------------------------------------------------------------ strategies
class RewriteRetriever(BaseRetriever):
    """Shared machinery of ``multi_query`` and ``step_back`` (see the module docstring). Subclasses set ``name``,
    the prompt and :meth:`parse` (LLM text -> rewrites) and :meth:`weights_for`."""

    name = "rewrite"
    default_max_tokens = 64

    def __init__(self, ctx: Context | None = None, *, llm: LLMSpec = None, base: str = "hybrid",
                 base_params: dict | None = None, depth: int = 100, rrf_k: int = 60, max_tokens: int | None = None,
                 temperature: float = 0.0,
                 template: tuple[str, str], **params):
        if base in ("multi_query", "step_back", "hyde"):
            raise ConfigError(f"{self.name}: base={base!r} would call an LLM inside a rewrite; name a retrieval "
                              "strategy (bm25, dense, hybrid, rerank, ...)")
        if not isinstance(depth, int) or depth < 1:
            raise ConfigError(f"{self.name}: depth must be a positive integer, got {depth!r}")
        max_tokens = int(max_tokens if max_tokens is not None else self.default_max_tokens)
        if max_tokens < 1 or float(temperature) < 0:
            raise ConfigError(f"{self.name}: max_tokens must be >= 1 and temperature >= 0, got {max_tokens}, "
                              f"{temperature}")
        super().__init__(ctx, llm=llm, base=base, depth=depth, rrf_k=rrf_k, max_tokens=max_tokens,
                         temperature=float(temperature), **params)
        self.template, self.prompt_version = template
        self.base_name = base
        self.base = build(base, dict(base_params or {}), self.ctx)
        self.llm = llm_for(self.ctx, llm)
        self.depth, self.rrf_k = depth, int(rrf_k)
        self.gen = {"max_tokens": max_tokens, "temperature": float(temperature)}
        self.rewrites: dict[str, list[str]] = {}
        self.raw: dict[str, str] = {}
        self.gen_seconds: dict[str, float] = {}  # qid -> generation seconds counted in its latency
        self._diag = {"queries": 0, "parse_failures": 0, "truncated": 0, "rewrites": 0}

    # ---------------------------------------------------------------- subclass hooks
    def prompt(self, query: str) -> str:
        return self.template.format(query=query)

    def parse(self, text: str, query: str, truncated: bool) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def weights_for(self, n_rewrites: int) -> list[float]:
        """RRF weights: the original's first, then one per rewrite."""
        return [1.0] * (1 + n_rewrites)

    # ---------------------------------------------------------------- Retriever
    def index(self, corpus: Corpus) -> None:
        self.base.index(corpus)

    def rewrite(self, queries: Queries) -> dict[str, list]:
        """LLM answers for all queries (one ``llm.map``, progress bar), parsed into ``self.rewrites``; returns
        qid -> [Completion] (for the generation time)."""
        qids = list(queries)
        comps = self.llm.map([self.prompt(queries[q]) for q in qids], desc=f"{self.name} rewrites", **self.gen)
        for qid, c in zip(qids, comps, strict=True):
            truncated = c.finish_reason == "length"
            found = self.parse(c.text, queries[qid], truncated)
            self.rewrites[qid], self.raw[qid] = found, c.text
            self._diag["queries"] += 1
            self._diag["truncated"] += int(truncated)
            self._diag["rewrites"] += len(found)
            self._diag["parse_failures"] += int(not found)
        return {qid: [c] for qid, c in zip(qids, comps, strict=True)}

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Rewrite all queries (untimed batch), retrieve every text with the base strategy (timed per text by
        it), fuse per query (timed); latency = generation + base latencies + fusion (module docstring)."""
        qids = list(queries)
        comps = self.rewrite(queries)
        texts, keys = {}, {}
        for i, qid in enumerate(qids):
            variants = [queries[qid], *self.rewrites[qid]]
            keys[qid] = [f"{i}:{j}" for j in range(len(variants))]
            texts.update(zip(keys[qid], variants, strict=True))
        t0 = time.perf_counter()
        base_run = self.base.search(Queries(texts), max(self.depth, k))
        per_text = (time.perf_counter() - t0) / max(1, len(texts))  # stand-in for a base that times nothing
        scores, latency = {}, {}
        for qid in qids:
            t1 = time.perf_counter()
            runs = [Run({qid: base_run.scores.get(key, {})}, name=f"{self.base_name}#{j}")
                    for j, key in enumerate(keys[qid])]
            fused = rrf(runs, k=self.rrf_k, weights=self.weights_for(len(runs) - 1), top=k)
            scores[qid] = fused.scores.get(qid, {})
            retrieval = sum(base_run.latency.get(key, per_text) for key in keys[qid])
            self.gen_seconds[qid] = generation_seconds(comps[qid])
            latency[qid] = self.gen_seconds[qid] + retrieval + (time.perf_counter() - t1)
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search(Queries({"q": text}), k).ranked("q")

    # ---------------------------------------------------------------- reporting
    def usage(self) -> dict[str, float]:
        """LLM counters of the rewriting LLM plus the base strategy's own (if it pays for any)."""
        return llm_usage(self.llm, self.base)

    def diagnostics(self) -> dict[str, float]:
        """Cumulative since built: queries rewritten, parse failures (original used alone), answers cut by
        max_tokens, rewrites used, and rewrites per query."""
        d: dict[str, float] = dict(self._diag)
        d["rewrites_per_query"] = round(d["rewrites"] / d["queries"], 3) if d["queries"] else 0.0
        return d

    def describe(self) -> dict:
        out = {"strategy": self.name, "prompt_version": self.prompt_version, **llm_describe(self.llm),
               **self.gen, "depth": self.depth, "rrf_k": self.rrf_k, "latency": LATENCY_NOTE,
               "base": self.base.describe(),
               "diagnostics": self.diagnostics()}
        if self.prompt_version.startswith("custom-"):
            out["prompt"] = self.template
        return out


_SHARED_RULES = {"depth": COUNT, "rrf_k": at_least(0), "max_tokens": COUNT, "temperature": at_least(0)}


@register("multi_query", also=(RewriteRetriever,), exclude=("template",), nested={"base_params": "base"},
          rules={**_SHARED_RULES, "n": COUNT, "original_weight": at_least(0)})
class MultiQueryRetriever(RewriteRetriever):
    """``n`` LLM rewrites in one call + the original, each retrieved by ``base``, fused by RRF (module docstring).
    Params: n (3), original_weight (1.0), max_tokens (default 32 per rewrite), and the shared ones."""

    name = "multi_query"

    def __init__(self, ctx: Context | None = None, *, n: int = 3, original_weight: float = 1.0,
                 max_tokens: int | None = None, prompt: str | None = None, **params):
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"multi_query: n (rewrites per query) must be a positive integer, got {n!r}")
        if float(original_weight) < 0:
            raise ConfigError(f"multi_query: original_weight must be >= 0, got {original_weight}")
        self.n, self.original_weight = n, float(original_weight)
        template = prompt_template(prompt, MULTI_QUERY_PROMPT, MULTI_QUERY_PROMPT_VERSION, ("query", "n"))
        super().__init__(ctx, max_tokens=32 * n if max_tokens is None else max_tokens, template=template, n=n,
                         original_weight=self.original_weight, **params)

    def prompt(self, query: str) -> str:
        return self.template.format(query=query, n=self.n)

    def parse(self, text: str, query: str, truncated: bool) -> list[str]:
        return parse_rewrites(text, query, self.n, truncated)

    def weights_for(self, n_rewrites: int) -> list[float]:
        return [self.original_weight] + [1.0] * n_rewrites

    def describe(self) -> dict:
        return {**super().describe(), "n": self.n, "original_weight": self.original_weight}


@register("step_back", also=(RewriteRetriever,), exclude=("template",), nested={"base_params": "base"},
          rules=_SHARED_RULES)
class StepBackRetriever(RewriteRetriever):
    """One step-back question from the LLM + the original, each retrieved by ``base``, fused by RRF with
    ``weights`` ([original, step-back], default [1, 1]). Params: weights, max_tokens (48), and the shared ones."""

    name = "step_back"
    default_max_tokens = 48

    def __init__(self, ctx: Context | None = None, *, weights: Sequence[float] = (1.0, 1.0),
                 prompt: str | None = None, **params):
        what = f"step_back: weights must be two numbers >= 0 [original, step-back], got {weights!r}"
        try:
            w = [float(x) for x in weights]
        except (TypeError, ValueError):
            raise ConfigError(what) from None
        if len(w) != 2 or any(x < 0 for x in w):
            raise ConfigError(what)
        self.weights = w
        template = prompt_template(prompt, STEP_BACK_PROMPT, STEP_BACK_PROMPT_VERSION, ("query",))
        super().__init__(ctx, template=template, **params)

    def parse(self, text: str, query: str, truncated: bool) -> list[str]:
        q = parse_step_back(text, query)
        return [q] if q else []

    def weights_for(self, n_rewrites: int) -> list[float]:
        return self.weights[: 1 + n_rewrites]

    def describe(self) -> dict:
        return {**super().describe(), "weights": list(self.weights)}
