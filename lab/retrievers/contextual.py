"""Contextual retrieval (Anthropic, "Introducing Contextual Retrieval", 2024): at index time the LLM writes a short
context situating each chunk in its document; the context is prepended to the chunk for the dense part, the BM25
part, or both (``apply``), and the parts are fused as ``hybrid`` fuses them.

How it works
- The document of a unit: with ``run_experiment``'s chunking, the units' metadata (``doc_id``, ``start``, ``end``)
  rebuild each document from its chunks (bodies placed at their offsets); without it, units whose ids end in
  ``_<n>`` (ORD-QA's ``restructure_0``, ``restructure_1``, ...) form one document in id order, and any other unit is
  its own document.
- Prompt: Anthropic's (the document, then the chunk, "give a short succinct context to situate this chunk within
  the overall document for the purposes of improving search retrieval"). A document longer than ``max_doc_chars``
  is cut to the ``max_doc_chars`` characters centred on the chunk (its section, as far as characters tell).
- Fitting the LLM's context: when the LLM says its context size (``n_ctx``: the packaged model's 2,048 tokens), the
  prompt is kept within ``n_ctx`` minus ``max_tokens`` minus a margin, counting :data:`CHARS_PER_TOKEN` characters a
  token (a low estimate for English prose, so code and identifiers still fit): the chunk shown in the prompt is cut
  to half that budget at most (the unit indexed stays whole) and the document excerpt gets the rest. Prompts cut
  this way are counted in ``diagnostics.fitted_to_context``. An endpoint (``openai:MODEL``) says no size: nothing
  is cut beyond ``max_doc_chars``.
- The LLM (``llm``; default the packaged SmolLM2-135M, offline) runs at temperature 0 through the LLM layer's
  persistent cache, so a rerun or another sweep point reads the contexts back. Index-time cost is reported by
  run_experiment as ``llm_index_*`` (:meth:`usage`); a build with many contexts to write prints its estimate first
  (lab.retrievers.llmutil.INDEX_ESTIMATE_CALLS). An empty answer leaves the chunk as it is (counted in
  ``diagnostics.empty_contexts``).
- Fusion: a ``hybrid`` strategy is built through the registry with ``retrievers`` bm25 and dense and the fusion
  params given here (``fusion``, ``norm``, ``rrf_k``, ``weights``, ``depth``; the parts' own params under
  ``bm25_params`` and ``dense_params``); this strategy indexes each of its
  parts with the contextualised or the plain units according to ``apply`` and lets hybrid search and fuse.

What the packaged 135M model can show: the pipeline (prompts, cache, cost, fusion) and whether its short, often
generic contexts move BM25 and dense at all; not the gains Anthropic reports with Claude-written contexts (35% fewer
top-20 failures with embeddings, 49% with contextual BM25 too). For those, give ``llm: openai:MODEL``.
"""
from __future__ import annotations

import re
import time
from typing import Sequence

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries, Run
from lab.models.estimate import map_estimated
from lab.models.llm import LLMSpec
from lab.retrievers.base import BaseRetriever, Context, build, llm_usage, register
from lab.retrievers.fusion import FUSIONS, NORMS
from lab.retrievers.llmutil import INDEX_ESTIMATE_CALLS, llm_describe, llm_for
from lab.retrievers.params import COUNT, at_least, one_of

APPLY = ("dense", "bm25", "both")
PROMPT_VERSION = "anthropic-contextual-v1"
PROMPT = ("<document>\n{document}\n</document>\nHere is the chunk we want to situate within the whole document\n"
          "<chunk>\n{chunk}\n</chunk>\nPlease give a short succinct context to situate this chunk within the overall "
          "document for the purposes of improving search retrieval of the chunk. Answer only with the succinct "
          "context and nothing else.")
_SUFFIX = re.compile(r"^(.*)_(\d+)$")
#: Characters counted per token when fitting a prompt into the LLM's context (English prose averages ~4 with
#: SmolLM2's and GPT-style BPE tokenizers; code, paths and identifiers run lower).
CHARS_PER_TOKEN = 2.5
#: Tokens kept free besides the answer (the chat template's own tokens).
CONTEXT_MARGIN = 64


def documents_of(corpus: Corpus) -> tuple[dict[str, str], dict[str, tuple[str, int, int]]]:
    """(document id -> text, unit id -> (document id, start, end)) per the module docstring."""
    where: dict[str, tuple[str, int, int]] = {}
    texts: dict[str, str] = {}
    units = list(corpus)
    if units and all({"doc_id", "start", "end"} <= set(u.metadata or {}) for u in units):
        pieces: dict[str, list[tuple[int, str]]] = {}
        for u in units:
            s, e = int(u.metadata["start"]), int(u.metadata["end"])
            body = u.text[len(u.text) - (e - s):] if e > s else ""
            pieces.setdefault(str(u.metadata["doc_id"]), []).append((s, body))
            where[u.id] = (str(u.metadata["doc_id"]), s, e)
        for doc, parts in pieces.items():
            buf: list[str] = []
            for s, body in sorted(parts):
                cur = sum(len(b) for b in buf)
                if s > cur:
                    buf.append(" " * (s - cur))
                    cur = s
                buf.append(body[cur - s:])
            texts[doc] = "".join(buf)
        return texts, where
    groups: dict[str, list[tuple[int, Document]]] = {}
    for u in units:
        m = _SUFFIX.match(u.id)
        key, n = (m.group(1), int(m.group(2))) if m else (u.id, 0)
        groups.setdefault(key, []).append((n, u))
    for key, members in groups.items():
        pos, parts = 0, []
        for _, u in sorted(members, key=lambda t: t[0]):
            text = (u.title + "\n" + u.text) if u.title else u.text
            where[u.id] = (key, pos, pos + len(text))
            parts.append(text)
            pos += len(text) + 2
        texts[key] = "\n\n".join(parts)
    return texts, where


def excerpt(document: str, start: int, end: int, limit: int) -> str:
    """The document, or the ``limit`` characters centred on [start, end) when it is longer."""
    if len(document) <= limit:
        return document
    mid = (start + end) // 2
    lo = max(0, min(mid - limit // 2, len(document) - limit))
    return document[lo:lo + limit]


class ContextualRetriever(BaseRetriever):
    """LLM-written chunk contexts prepended for BM25, dense or both, fused by a hybrid; see the module docstring."""

    name = "contextual"

    def __init__(self, ctx: Context | None = None, *, llm: LLMSpec = None, apply: str = "both",
                 max_doc_chars: int = 4000, max_tokens: int = 80, fusion: str = "rrf", norm: str = "minmax",
                 rrf_k: int = 60,
                 weights: Sequence[float] | str | None = None, depth: int = 100, bm25_params: dict | None = None,
                 dense_params: dict | None = None):
        if apply not in APPLY:
            raise ConfigError(f"contextual: apply={apply!r}; choose one of {', '.join(APPLY)}")
        super().__init__(ctx, apply=apply, max_doc_chars=int(max_doc_chars), max_tokens=int(max_tokens),
                         fusion=fusion, norm=norm, rrf_k=rrf_k, depth=depth)
        self.apply, self.max_doc_chars = apply, int(max_doc_chars)
        self.gen = {"max_tokens": int(max_tokens), "temperature": 0.0}
        self.hybrid = build("hybrid", {"retrievers": ["bm25", "dense"], "fusion": fusion, "norm": norm,
                                       "rrf_k": rrf_k, "weights": weights, "depth": depth,
                                       "bm25": dict(bm25_params or {}), "dense": dict(dense_params or {})}, self.ctx)
        self.llm = llm_for(self.ctx, llm)
        self.contexts: dict[str, str] = {}
        self._diag = {"chunks": 0, "empty_contexts": 0, "truncated": 0, "documents_cut": 0, "fitted_to_context": 0}

    def prompt_budget(self) -> int | None:
        """Characters of document + chunk that fit the LLM's context (None: the LLM does not say its size)."""
        n_ctx = getattr(self.llm, "n_ctx", None)
        if not n_ctx:
            return None
        fixed = len(PROMPT.format(document="", chunk=""))
        return max(0, int((int(n_ctx) - self.gen["max_tokens"] - CONTEXT_MARGIN) * CHARS_PER_TOKEN) - fixed)

    def prompt_for(self, document: str, start: int, end: int, chunk: str) -> str:
        """The prompt for one chunk: the document excerpt (``max_doc_chars``) and the chunk, both cut to fit the LLM's
        context when it says its size (see the module docstring)."""
        limit, budget = self.max_doc_chars, self.prompt_budget()
        if budget is not None and len(chunk) + min(len(document), limit) > budget:
            self._diag["fitted_to_context"] += 1
            chunk = chunk[: budget // 2]
            limit = max(0, min(limit, budget - len(chunk)))
        return PROMPT.format(document=excerpt(document, start, end, limit) if limit else "", chunk=chunk)

    def prompts(self, corpus: Corpus) -> tuple[list[str], list[str]]:
        """(unit ids, the prompt of each unit), counting cut documents and fitted prompts in the diagnostics."""
        texts, where = documents_of(corpus)
        ids, prompts = [], []
        for u in corpus:
            doc, s, e = where[u.id]
            document = texts[doc]
            self._diag["documents_cut"] += int(len(document) > self.max_doc_chars)
            ids.append(u.id)
            prompts.append(self.prompt_for(document, s, e, u.text))
        return ids, prompts

    def cached_contexts(self, corpus: Corpus) -> int:
        """How many units of ``corpus`` have their context in the LLM's cache already (nothing is generated)."""
        return sum(self.llm.is_cached(p, **self.gen) for p in self.prompts(corpus)[1])

    def write_contexts(self, corpus: Corpus) -> dict[str, str]:
        """unit id -> the LLM's context (stripped; "" when it gave nothing)."""
        ids, prompts = self.prompts(corpus)
        comps = map_estimated(self.llm, prompts, f"contextual index: {len(prompts)} chunk contexts",
                              min_calls=INDEX_ESTIMATE_CALLS, desc="contextual: chunk contexts", **self.gen)
        out = {}
        for uid, c in zip(ids, comps, strict=True):
            text = " ".join((c.text or "").split())
            out[uid] = text
            self._diag["chunks"] += 1
            self._diag["empty_contexts"] += int(not text)
            self._diag["truncated"] += int(c.finish_reason == "length")
        return out

    def index(self, corpus: Corpus) -> None:
        self.contexts = self.write_contexts(corpus)
        contextual = Corpus({u.id: Document(u.id, (self.contexts[u.id] + "\n" + u.text) if self.contexts[u.id]
                                            else u.text, u.title, u.metadata) for u in corpus},
                            name=f"{corpus.name}/contextual")
        for label, part in zip(self.hybrid.labels, self.hybrid.parts, strict=True):
            use = contextual if self.apply in ("both", label) else corpus
            t0 = time.perf_counter()
            part.index(use)
            self.hybrid.index_seconds[label] = time.perf_counter() - t0

    @property
    def tuned(self) -> bool:
        """Whether the hybrid tunes its weights over the queries searched together (``weights="tuned"``)."""
        return self.hybrid.tuned

    def use_qrels(self, qrels, prepare=None) -> None:
        """Passed on to the hybrid (its ``weights="tuned"``)."""
        self.hybrid.use_qrels(qrels, prepare)

    def search(self, queries: Queries, k: int = 100) -> Run:
        run = self.hybrid.search(queries, k)
        return Run(run.scores, name=self.name, latency=run.latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.hybrid.search_one(text, k)

    def usage(self) -> dict[str, float]:
        return llm_usage(self.llm)

    def describe(self) -> dict:
        return {"strategy": self.name, "apply": self.apply, "prompt_version": PROMPT_VERSION,
                **llm_describe(self.llm), **self.gen, "max_doc_chars": self.max_doc_chars,
                "hybrid": self.hybrid.describe(), "diagnostics": dict(self._diag)}


register("contextual", params_from=ContextualRetriever, rules={
    "apply": one_of(*APPLY), "max_doc_chars": COUNT, "max_tokens": COUNT, "fusion": one_of(*FUSIONS),
    "norm": one_of(*NORMS), "rrf_k": at_least(0), "depth": COUNT}, nested={"bm25_params": "bm25",
                                                                           "dense_params": "dense"})(
    lambda ctx, **params: ContextualRetriever(ctx, **params))
