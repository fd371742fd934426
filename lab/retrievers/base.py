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
summed over the LLMs it owns (see :func:`llm_usage`). :func:`lab.experiment.run.run_experiment` takes a snapshot
before ``index``, after ``index`` and after ``search`` and reports the differences as index-time and query-time
cost (``llm_index_calls``, ``llm_index_tokens``, ``llm_index_seconds``, ``llm_query_*``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from lab.data.types import Corpus, Queries, Run
from lab.core.errors import ConfigError


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
        from lab.core.progress import progress

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
_DECLARED: dict[str, "Declaration"] = {}


@dataclass(frozen=True)
class Declaration:
    """What a registered strategy accepts (see :mod:`lab.retrievers.params`).

    ``params``: name -> :class:`lab.retrievers.params.Param`. ``extra``: what happens to keys outside ``params``:
    None (refused), True (a factory taking undeclared ``**kwargs``: not checked), a strategy name (they are that
    strategy's params, e.g. hyde passes them to dense) or a callable
    ``(extra: dict, params: dict, where: str) -> list[str]`` returning the problems, called for every check (hybrid:
    its parts and the params per part).
    ``nested``: param -> strategy whose params its dict value holds: a strategy name, or the name of the param
    that names the strategy (rerank's ``first_stage_params`` follow ``first_stage``)."""

    params: dict
    extra: object = None
    nested: dict = field(default_factory=dict)


def register(name: str, *, rules: dict | None = None, params_from=None, also=(), exclude=(), extra=None,
             nested: dict | None = None, defaults: dict | None = None):
    """Class or factory decorator: ``@register("bm25", rules={"k1": at_least(0)})``. The factory takes
    (ctx, **params).

    The params a strategy accepts are the keyword params of ``params_from`` (default: the factory; a class means
    its ``__init__``) and of the callables in ``also`` (a base class whose ``**kwargs`` they reach; the first
    wins), less ``exclude``, typed by their annotations and bounded by ``rules``; ``defaults`` overrides the
    signature's defaults where the factory passes its own (hybrid_rerank's first_stage). See
    :mod:`lab.retrievers.params`. ``extra`` and ``nested``: see :class:`Declaration`.
    """
    from lab.retrievers.params import signature_params, takes_extra

    def deco(factory):
        sources = [params_from or factory, *also]
        undeclared_extra = extra is None and not also and takes_extra(sources[0])
        declared: dict = {}
        for src in reversed(sources):
            declared.update(signature_params(src, rules, exclude))
        for key, value in (defaults or {}).items():
            declared[key] = replace(declared[key], default=value)
        unknown = set(rules or {}) - set(declared)
        if unknown:
            raise TypeError(f"register({name!r}): rules for undeclared params {sorted(unknown)}")
        _REGISTRY[name] = factory
        # a factory taking **kwargs that declares nothing about them (an outside plugin): they pass unchecked
        _DECLARED[name] = Declaration(declared, True if undeclared_extra else extra, dict(nested or {}))
        return factory

    return deco


def unregister(name: str) -> None:
    """Remove a registered strategy (a plugin unloading, a test cleaning up); unknown names are ignored."""
    _REGISTRY.pop(name, None)
    _DECLARED.pop(name, None)


def available() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def declared_params(name: str) -> Declaration:
    """The :class:`Declaration` of a registered strategy (ConfigError for an unknown name)."""
    _load_builtins()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown strategy {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _DECLARED[name]


def accepted_names(name: str) -> set[str]:
    """Every param name strategy ``name`` accepts: its own, plus those of the strategy its extra keys go to."""
    decl = declared_params(name)
    names = set(decl.params)
    if isinstance(decl.extra, str):
        names |= accepted_names(decl.extra)
    return names


def param_problems(name, params: dict | None, where: str | None = None) -> list[str]:
    """One line per problem of ``params`` for strategy ``name``: an unknown strategy, an unknown param (with the
    accepted names), a value of the wrong type or out of range (with what the param accepts). Nested strategy
    params (hybrid parts, rerank's first stage, hyde's dense params) are checked the same way. Builds nothing."""
    from lab.retrievers.params import check_value

    where = where or f"strategy {name}"
    _load_builtins()
    if not isinstance(name, str) or name not in _REGISTRY:
        return [f"{where}: unknown strategy {name!r}; registered: {', '.join(sorted(_REGISTRY))}"]
    if params is None:
        return []
    if not isinstance(params, dict):
        return [f"{where}: params must be a mapping of name -> value, got {params!r}"]
    decl = _DECLARED[name]
    problems, extra = [], {}
    for key, value in params.items():
        param = decl.params.get(key)
        if param is None:
            extra[key] = value
            continue
        expected = check_value(param, value)
        if expected is not None:
            problems.append(f"{where}: param {key}={value!r} is not valid; {key} takes {expected} "
                            f"(default {param.default!r})")
            continue
        target = decl.nested.get(key)
        if target is not None and value is not None:
            inner = params.get(target, decl.params[target].default) if target in decl.params else target
            if isinstance(inner, str):
                problems += param_problems(inner, value, f"{where}: {key}")
    if decl.extra is True:  # undeclared **kwargs: nothing to check them against
        pass
    elif callable(decl.extra):  # called even without extra keys: it may check params it shares (hybrid's parts)
        problems += decl.extra(extra, params, where)
    elif extra:
        names = accepted_names(name)
        known = {k: v for k, v in extra.items() if k in names}
        for key in extra:
            if key not in known:
                problems.append(f"{where}: unknown param {key!r}; {name} accepts: {', '.join(sorted(names))}")
        if known:
            problems += param_problems(decl.extra, known, where)
    return problems


def check_params(name, params: dict | None, where: str | None = None) -> None:
    """Raise ConfigError with the first problem :func:`param_problems` finds (one line), before any work."""
    problems = param_problems(name, params, where)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)


def build(name: str, params: dict | None = None, ctx: Context | None = None) -> Retriever:
    check_params(name, params)
    return _REGISTRY[name](ctx or Context(), **(params or {}))


#: Entry-point group through which packages (and lab's own higher layers) add strategies: ``name = "module"``
#: in ``[project.entry-points."raglab.strategies"]``; the module registers itself on import, as plugins do.
ENTRY_POINT_GROUP = "raglab.strategies"


def _load_builtins() -> None:
    """Import every strategy module of this package, then every module named in the entry-point group.

    A strategy that needs a layer above retrievers (``dense_ft`` trains its embedder with lab.training) registers
    through the entry point, so this layer never imports upward; an unimportable plugin is reported, not hidden.
    """
    import importlib
    import pkgutil
    from importlib.metadata import entry_points

    import lab.retrievers as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base" and not mod.name.startswith("_"):
            importlib.import_module(f"lab.retrievers.{mod.name}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            try:
                importlib.import_module(ep.value.split(":")[0])
            except ImportError as exc:
                raise ConfigError(f"strategy plugin {ep.name!r} ({ep.value}) could not be imported: {exc}") from exc
