"""HyDE (Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels"): an LLM writes a
hypothetical passage answering the query; the passage's embedding (averaged with the query's) searches the dense
index. A query transform in front of the ``dense`` strategy, which is built through
:func:`lab.retrievers.base.build` and searched by vector (:meth:`DenseRetriever.search_vectors`).

Params: ``llm`` (spec for :func:`lab.retrievers.llmutil.llm_for`, default the packaged SmolLM2), ``n`` (hypothetical
passages per query, default 1), ``include_query`` (default true: the query's vector joins the mean, as in the
paper), ``max_tokens`` (128), ``temperature`` (default 0 for n=1 and 0.7 for n>1, where passage i uses seed
``ctx.seed + i``; n>1 at temperature 0 is refused: the passages would be identical), ``prompt`` (a template with
``{query}``; default :data:`HYDE_PROMPT`, the paper's web-search prompt). Any other param goes to the dense part
(``model``, ``max_seq_length``, ``index``, ...).

Conventions
- Vector of a query = L2-normalised mean of ``[encode_queries(query)]`` (if include_query) and
  ``encode_passages(p)`` for each usable passage (a hypothetical document is embedded as a document: with
  prefixed models such as e5 it gets the passage prefix). Mean over N+1 vectors with equal weight, as the paper.
- A passage is usable when it has words once stripped of a leading "Passage:" label (:func:`clean_passage`).
  A query whose passages are all unusable is searched with its own vector alone and counted in
  ``diagnostics()["fallback_to_query"]``.
- ``self.rewrites[qid]`` keeps the usable passages, ``self.raw[qid]`` the LLM texts, ``self.gen_seconds[qid]``
  the generation time counted in its latency.
- Latency (``Run.latency``) is what a user would see: the generation time of the query's passages (generated one
  after the other, so summed) + encoding + search. All passages of a batch are generated first (``llm.map``,
  progress bar), then each query is encoded and searched alone (timed, faiss and torch on one thread). On a cache
  hit the generation time is :attr:`lab.models.llm.Completion.gen_seconds` (what the answer took when it was
  generated), so a cached rerun reports the latency of a cold one; ``describe()["latency"]`` says so.
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
from lab.retrievers.dense import faiss_threads
from lab.retrievers.llmutil import llm_describe, llm_for
from lab.retrievers.params import COUNT, at_least
from lab.retrievers.rewrite import generation_seconds, has_words, prompt_template

HYDE_PROMPT = "Please write a passage to answer the question.\nQuestion: {query}\nPassage:"
PROMPT_VERSION = "hyde-1"
DEFAULT_SAMPLING_TEMPERATURE = 0.7  # n > 1 without a temperature: passages must differ

LATENCY_NOTE = ("latency includes LLM generation: per query, the generation seconds of its hypothetical passages "
                "(Completion.gen_seconds, also on cache hits) + encoding + dense search; backoff sleeps before LLM "
                "retries are excluded and reported apart (llm_query_retry_wait_seconds)")

_PASSAGE_LABEL_RE = re.compile(r"^\s*\**\s*(?:hypothetical\s+)?(?:passage|answer|document)\s*\**\s*[:：]\s*\**\s*",
                               re.IGNORECASE)


def clean_passage(text: str) -> str | None:
    """A hypothetical passage as embedded: stripped, without a leading "Passage:" / "Answer:" label; None when no
    words are left (an unusable answer)."""
    p = _PASSAGE_LABEL_RE.sub("", (text or "").strip(), count=1).strip()
    return p if has_words(p) else None


def mean_vector(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised mean of the rows (float32); rows are weighted equally. A zero mean stays zero."""
    v = np.asarray(vectors, dtype=np.float32).mean(axis=0)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


@register("hyde", rules={"n": COUNT, "max_tokens": COUNT, "temperature": at_least(0)}, extra="dense")
class HydeRetriever(BaseRetriever):
    """Hypothetical passages from an LLM, embedded and averaged, search the dense index (module docstring)."""

    name = "hyde"

    def __init__(self, ctx: Context | None = None, *, llm: LLMSpec = None, n: int = 1, include_query: bool = True,
                 max_tokens: int = 128, temperature: float | None = None, prompt: str | None = None,
                 **dense_params):
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"hyde: n (hypothetical passages per query) must be a positive integer, got {n!r}")
        if temperature is None:
            temperature = 0.0 if n == 1 else DEFAULT_SAMPLING_TEMPERATURE
        if n > 1 and float(temperature) == 0:
            raise ConfigError(f"hyde: n={n} at temperature 0 would give {n} identical passages; set temperature > 0 "
                              f"(e.g. {DEFAULT_SAMPLING_TEMPERATURE}) or n=1")
        if int(max_tokens) < 1 or float(temperature) < 0:
            raise ConfigError(f"hyde: max_tokens must be >= 1 and temperature >= 0, got {max_tokens}, {temperature}")
        super().__init__(ctx, llm=llm, n=n, include_query=bool(include_query), max_tokens=int(max_tokens),
                         temperature=float(temperature), **dense_params)
        self.template, self.prompt_version = prompt_template(prompt, HYDE_PROMPT, PROMPT_VERSION, ("query",))
        self.n, self.include_query = n, bool(include_query)
        self.gen = {"max_tokens": int(max_tokens), "temperature": float(temperature)}
        self.dense = build("dense", dense_params, self.ctx)
        self.llm = llm_for(self.ctx, llm)
        self.rewrites: dict[str, list[str]] = {}
        self.raw: dict[str, list[str]] = {}
        self.gen_seconds: dict[str, float] = {}  # qid -> generation seconds counted in its latency
        self._diag = {"queries": 0, "passages": 0, "unusable_passages": 0, "fallback_to_query": 0, "truncated": 0}

    # ---------------------------------------------------------------- parts
    def seeds(self) -> list[int]:
        """Seed of passage i: ``ctx.seed + i`` (passage 0 uses the LLM's default seed, so n=1 shares its cache)."""
        return [self.ctx.seed + i for i in range(self.n)]

    def generate(self, queries: Queries) -> dict[str, list]:
        """All hypothetical passages of a batch (``llm.map`` per seed, progress bar), parsed into
        ``self.rewrites`` / ``self.raw``; returns qid -> [Completion]."""
        qids = list(queries)
        prompts = [self.template.format(query=queries[q]) for q in qids]
        per_seed = [self.llm.map(prompts, desc=f"hyde passages {i + 1}/{self.n}", seed=seed, **self.gen)
                    for i, seed in enumerate(self.seeds())]
        out = {}
        for j, qid in enumerate(qids):
            comps = [answers[j] for answers in per_seed]
            passages = [clean_passage(c.text) for c in comps]
            self.rewrites[qid] = [p for p in passages if p]
            self.raw[qid] = [c.text for c in comps]
            self._diag["queries"] += 1
            self._diag["passages"] += len(self.rewrites[qid])
            self._diag["unusable_passages"] += sum(p is None for p in passages)
            self._diag["truncated"] += sum(c.finish_reason == "length" for c in comps)
            out[qid] = comps
        return out

    def query_vector(self, query: str, passages: list[str]) -> np.ndarray:
        """The search vector of one query (module docstring); the query's own vector when nothing else is left."""
        emb = self.dense.embedder
        parts = []
        if self.include_query or not passages:
            parts.append(emb.encode_queries([query]))
        if passages:
            parts.append(emb.encode_passages(passages))
        return mean_vector(np.vstack(parts))

    # ---------------------------------------------------------------- Retriever
    def index(self, corpus: Corpus) -> None:
        self.dense.index(corpus)

    def search(self, queries: Queries, k: int = 100) -> Run:
        """Passages for all queries first (untimed batch), then each query encoded and searched alone (timed);
        latency = generation seconds + encode + search (module docstring)."""
        self.dense._require_index()
        comps = self.generate(queries)
        scores, latency = {}, {}
        with faiss_threads(1):
            for qid in progress(list(queries), desc="search hyde", enabled=self.ctx.progress):
                passages = self.rewrites[qid]
                self._diag["fallback_to_query"] += int(not passages)
                t0 = time.perf_counter()
                hits = self.dense.search_vectors(self.query_vector(queries[qid], passages), k)[0]
                self.gen_seconds[qid] = generation_seconds(comps[qid])
                latency[qid] = time.perf_counter() - t0 + self.gen_seconds[qid]
                scores[qid] = dict(hits)
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search(Queries({"q": text}), k).ranked("q")

    # ---------------------------------------------------------------- reporting
    def usage(self) -> dict[str, float]:
        return llm_usage(self.llm)

    def diagnostics(self) -> dict[str, float]:
        """Cumulative since built: queries, usable passages, unusable answers, queries searched by their own vector
        alone (no usable passage), answers cut by max_tokens."""
        return dict(self._diag)

    def describe(self) -> dict:
        out = {"strategy": self.name, "prompt_version": self.prompt_version, **llm_describe(self.llm),
               "n": self.n, "include_query": self.include_query, **self.gen, "seeds": self.seeds(),
               "latency": LATENCY_NOTE, "dense": self.dense.describe(), "diagnostics": self.diagnostics()}
        if self.prompt_version.startswith("custom-"):
            out["prompt"] = self.template
        return out
