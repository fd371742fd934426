"""Listwise reranking by an LLM over a first stage's top N with a sliding window (RankGPT; Sun et al. 2023,
"Is ChatGPT Good at Search? Investigating Large Language Models as Re-Ranking Agents", EMNLP).

``llm_rerank`` = a first stage built through the registry (``first_stage``, ``first_stage_params``, as ``rerank``)
+ the LLM ordering its top ``top_n``; the rest of the first stage follows in its order (:func:`lab.retrievers.
rerank.merge`, the same head/tail rule as ``rerank``).

Sliding window (RankGPT): windows of ``window`` passages walk from the bottom of the top N to the top in steps of
``step``: the LLM orders positions ``[N - window, N)``, then ``[N - window - step, N - step)``, ..., down to a window
starting at 0, so a relevant passage found low can climb up to ``window - step`` places per window, and the top of
the list is ordered last. One LLM call per window: ``ceil((N - window) / step) + 1`` calls per query.

Prompt (RankGPT's, shortened): the passages numbered ``[1]..[w]`` (each cut to ``max_passage_chars``), then the
query and "rank ... in descending order of relevance, format [2] > [1] > ...". Parsing: every ``[i]`` (or bare
number) in the answer in order, out-of-range and repeated ids dropped; ids the answer left out keep their
first-stage order after the ones it named (RankGPT's rule). A window whose answer names no valid id is a parse
failure: that window keeps the first-stage order. ``describe()["diagnostics"]`` counts windows, parse failures and
partial answers (some ids missing).

Cost and latency follow the LLM layer's convention (lab.retrievers.base): ``usage()`` sums the LLM's counters, so
run_experiment reports ``llm_query_*``; a query's latency is its first-stage latency + the generation seconds of its
windows (``Completion.gen_seconds``, also on a cache hit) + the parsing and merging.
"""
from __future__ import annotations

import re
import time

import numpy as np

from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Queries, Run
from lab.models.llm import LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.llmutil import llm_describe, llm_for
from lab.retrievers.params import COUNT
from lab.retrievers.rerank import merge
from lab.retrievers.rewrite import generation_seconds

PROMPT_VERSION = "rankgpt-v1"
SYSTEM = "You are RankGPT, an intelligent assistant that ranks passages by their relevance to a search query."
_NUM_RE = re.compile(r"\[(\d{1,3})\]|\b(\d{1,3})\b")


def window_starts(n: int, window: int, step: int) -> list[int]:
    """Start offsets of the sliding windows over ``n`` passages, bottom to top (RankGPT), the last one at 0."""
    if n <= window:
        return [0]
    starts, end = [], n
    while True:
        start = max(0, end - window)
        starts.append(start)
        if start == 0:
            return starts
        end -= step


def build_prompt(query: str, passages: list[str], max_chars: int) -> str:
    lines = [f"I will provide you with {len(passages)} passages, each indicated by a number identifier []. "
             f"Rank the passages based on their relevance to the search query: {query}", ""]
    for i, p in enumerate(passages, 1):
        text = " ".join(p.split())[:max_chars]
        lines.append(f"[{i}] {text}")
    lines += ["", f"Search Query: {query}",
              f"Rank the {len(passages)} passages above based on their relevance to the search query, in descending "
              "order. The output format should be [] > [], e.g., [2] > [1]. Only respond with the ranking, do not "
              "explain."]
    return "\n".join(lines)


def parse_ranking(text: str, n: int) -> tuple[list[int] | None, bool]:
    """(permutation of range(n), partial) from an answer, or (None, False) when it names no valid id (a parse
    failure). Named ids first in the answer's order; the rest in their original order."""
    seen: list[int] = []
    for m in _NUM_RE.finditer(text or ""):
        i = int(m.group(1) or m.group(2)) - 1
        if 0 <= i < n and i not in seen:
            seen.append(i)
    if not seen:
        return None, False
    partial = len(seen) < n
    return seen + [i for i in range(n) if i not in seen], partial


class LLMRerankRetriever(BaseRetriever):
    """A first stage and the LLM ordering its top N listwise with a sliding window; see the module docstring."""

    name = "llm_rerank"

    def __init__(self, ctx: Context | None = None, *, first_stage: str = "bm25", first_stage_params: dict | None = None,
                 llm: LLMSpec = None, top_n: int = 20, window: int = 10, step: int = 5, max_passage_chars: int = 300,
                 max_tokens: int = 80):
        if first_stage in ("rerank", "hybrid_rerank", "llm_rerank"):
            raise ConfigError(f"llm_rerank: first_stage={first_stage!r} would rerank twice; name a first-stage "
                              "strategy such as bm25 or hybrid")
        if int(step) > int(window):
            raise ConfigError(f"llm_rerank: step={step} > window={window} would leave passages unranked; use a step "
                              "at most the window (RankGPT: window 20, step 10)")
        super().__init__(ctx, first_stage=first_stage, top_n=int(top_n), window=int(window), step=int(step),
                         max_passage_chars=int(max_passage_chars), max_tokens=int(max_tokens))
        self.first = build(first_stage, dict(first_stage_params or {}), self.ctx)
        self.first_stage = first_stage
        self.top_n, self.window, self.step = int(top_n), int(window), int(step)
        self.max_chars, self.gen = int(max_passage_chars), {"max_tokens": int(max_tokens), "temperature": 0.0}
        self.llm = llm_for(self.ctx, llm)
        self._docs: dict[str, str] = {}
        self._diag = {"queries": 0, "windows": 0, "parse_failures": 0, "partial": 0}

    def index(self, corpus: Corpus) -> None:
        self.first.index(corpus)
        self._docs = {d.id: (d.title + "\n" + d.text).strip() if d.title else d.text for d in corpus}

    def rerank_one(self, query: str, ids: list[str]) -> tuple[list[str], float, float]:
        """The top ids reordered by the LLM (sliding window), the generation seconds of its answers (also on a
        cache hit) and the wall seconds of the calls themselves."""
        order, seconds, wall = list(ids), 0.0, 0.0
        for start in window_starts(len(order), self.window, self.step):
            chunk = order[start:start + self.window]
            if len(chunk) < 2:
                continue
            prompt = build_prompt(query, [self._docs[d] for d in chunk], self.max_chars)
            comp = self.llm.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                                 **self.gen)
            seconds += generation_seconds([comp])
            wall += float(comp.seconds)
            perm, partial = parse_ranking(comp.text, len(chunk))
            self._diag["windows"] += 1
            if perm is None:
                self._diag["parse_failures"] += 1  # this window keeps the first-stage order
                continue
            self._diag["partial"] += int(partial)
            order[start:start + self.window] = [chunk[i] for i in perm]
        return order, seconds, wall

    def search(self, queries: Queries, k: int = 100) -> Run:
        """First stage for all queries (timed per query by it), then each query's top N reordered alone."""
        first = self.first.search(queries, max(self.top_n, k))
        scores, latency = {}, {}
        for qid in progress(list(queries), desc=f"llm_rerank top {self.top_n}", enabled=self.ctx.progress):
            t0 = time.perf_counter()
            ranked = first.ranked(qid)
            head, tail = ranked[: self.top_n], ranked[self.top_n:]
            order, gen_seconds, call_wall = self.rerank_one(queries[qid], [d for d, _ in head])
            new_head = [(d, 0.0) for d in order]
            # the reordered head scores len..1, so merge() keeps its order and puts the tail below it
            scores[qid] = merge(new_head, np.arange(len(order), 0, -1, dtype=np.float64), tail, k)
            self._diag["queries"] += 1
            # the calls' wall time is replaced by their generation time, so a cached rerun reports what a user waits
            own = max(0.0, time.perf_counter() - t0 - call_wall)
            latency[qid] = first.latency.get(qid, 0.0) + gen_seconds + own
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search(Queries({"q": text}), k).ranked("q")

    def usage(self) -> dict[str, float]:
        return llm_usage(self.llm)

    def diagnostics(self) -> dict[str, int]:
        """Cumulative since built: queries, LLM windows, parse failures (first-stage order kept), partial answers."""
        return dict(self._diag)

    def describe(self) -> dict:
        return {"strategy": self.name, "prompt_version": PROMPT_VERSION, **llm_describe(self.llm),
                "top_n": self.top_n, "window": self.window, "step": self.step, "max_passage_chars": self.max_chars,
                **self.gen, "first_stage": self.first.describe(), "diagnostics": self.diagnostics()}


register("llm_rerank", params_from=LLMRerankRetriever,
         rules={"top_n": COUNT, "window": COUNT, "step": COUNT, "max_passage_chars": COUNT, "max_tokens": COUNT},
         nested={"first_stage_params": "first_stage"})(
    lambda ctx, **params: LLMRerankRetriever(ctx, **params))
