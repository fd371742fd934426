"""The Retriever protocol and the strategy registry.

A strategy is a Retriever: ``index(corpus)`` once, then ``search(queries, k) -> Run``. Strategies are
registered by name with :func:`register`, and built from a plain params dict with :func:`build`, so a
new strategy is one module that calls ``@register("name")``. Composite strategies (hybrid, rerank) build
their parts through :func:`build` too: compose, do not copy.

Latency convention: ``Run.latency[qid]`` is the wall time of that query searched alone (one query at a
time, as a user's query arrives), in seconds. Index time is reported apart, by the caller.

Cost convention: a strategy that pays for model calls (an LLM writing questions, summaries, rewrites) exposes
``usage() -> dict[str, float]``: cumulative counters since it was built, with the keys of
:meth:`lab.models.llm.LLM.usage` (calls, cache_hits, generated, prompt_tokens, completion_tokens, seconds, ...),
summed over the LLMs it owns (see :func:`llm_usage`). :func:`lab.experiment.run_experiment` takes a snapshot
before ``index``, after ``index`` and after ``search`` and reports the differences as index-time and query-time
cost (``llm_index_calls``, ``llm_index_tokens``, ``llm_index_seconds``, ``llm_query_*``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from lab.data.types import Corpus, Queries, Run
from lab.errors import ConfigError


@dataclass
class Context:
    """What a strategy may need from its surroundings; no global state."""

    cache_dir: Path = field(default_factory=lambda: Path(".cache"))
    progress: bool = True
    seed: int = 0
    language: str = "auto"  # "en", "zh" or "auto" (detected per text)


@runtime_checkable
class Retriever(Protocol):
    name: str

    def index(self, corpus: Corpus) -> None: ...

    def search(self, queries: Queries, k: int = 100) -> Run: ...


class BaseRetriever:
    """Helper base: implement ``index`` and ``search_one``; ``search`` times each query alone.

    Subclasses with a faster batched path may override ``search_batch`` (no per-query latency).
    """

    name = "base"

    def __init__(self, ctx: Context | None = None, **params):
        self.ctx = ctx or Context()
        self.params = params

    def index(self, corpus: Corpus) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def search(self, queries: Queries, k: int = 100) -> Run:
        from lab.progress import progress

        scores, latency = {}, {}
        for qid in progress(list(queries), desc=f"search {self.name}", enabled=self.ctx.progress):
            t0 = time.perf_counter()
            hits = self.search_one(queries[qid], k)
            latency[qid] = time.perf_counter() - t0
            scores[qid] = dict(hits)
        return Run(scores, name=self.name, latency=latency)

    def describe(self) -> dict:
        """Params and identities to log (model names, backends); JSON-serialisable."""
        return {"strategy": self.name, **{k: v for k, v in self.params.items() if _plain(v)}}

    def usage(self) -> dict[str, float]:
        """Cumulative cost counters of paid model calls (none for a plain retriever); see the module docstring."""
        return {}


def llm_usage(*parts) -> dict[str, float]:
    """Counters summed over LLM objects and retrievers (anything with ``usage()``); ``None`` parts are skipped,
    and an object listed twice counts once."""
    total: dict[str, float] = {}
    seen: set[int] = set()
    for part in parts:
        if part is None or id(part) in seen or not hasattr(part, "usage"):
            continue
        seen.add(id(part))
        for key, value in part.usage().items():
            total[key] = total.get(key, 0) + value
    return total


def _plain(v) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


_REGISTRY: dict[str, Callable[..., Retriever]] = {}


def register(name: str):
    """Class or factory decorator: ``@register("bm25")``. The factory takes (ctx, **params)."""

    def deco(factory):
        _REGISTRY[name] = factory
        return factory

    return deco


def available() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def build(name: str, params: dict | None = None, ctx: Context | None = None) -> Retriever:
    _load_builtins()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown strategy {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](ctx or Context(), **(params or {}))


def _load_builtins() -> None:
    import importlib
    import pkgutil

    import lab.retrievers as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base" and not mod.name.startswith("_"):
            importlib.import_module(f"lab.retrievers.{mod.name}")
