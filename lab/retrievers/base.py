"""The Retriever protocol and the strategy registry.

A strategy is a Retriever: ``index(corpus)`` once, then ``search(queries, k) -> Run``. Strategies are
registered by name with :func:`register`, and built from a plain params dict with :func:`build`, so a
new strategy is one module that calls ``@register("name")``. Composite strategies (hybrid, rerank) build
their parts through :func:`build` too: compose, do not copy.

Latency convention: ``Run.latency[qid]`` is the wall time of that query searched alone (one query at a
time, as a user's query arrives), in seconds. Index time is reported apart, by the caller.

The contract (:class:`Retriever`, every method present on :class:`BaseRetriever`): ``index``, ``search``,
``search_one`` (one query's hits), ``search_batch`` (a faster batched path where a strategy has one; by default
``search``), ``use_qrels`` (judgments a strategy may tune on; by default ignored), ``describe`` (params and
identities to log) and ``usage`` (cost counters; by default none).
:func:`build` refuses a factory whose object lacks one of them, so callers call them without probing.

Params: declared once, at :func:`register`; :func:`build` checks them (:func:`check_params`) and a registered
class checks the params it is constructed with the same way before its ``__init__`` runs, so ``__init__`` holds
only what no declaration can say (a check that ties two params together).

Cost convention: a strategy that pays for model calls (an LLM writing questions, summaries, rewrites) exposes
``usage() -> dict[str, float]``: cumulative counters since it was built, with the keys of
:meth:`lab.models.llm.LLM.usage` (calls, cache_hits, generated, prompt_tokens, completion_tokens, seconds, ...),
summed over the LLMs it owns (see :func:`llm_usage`). :func:`lab.experiment.run.run_experiment` takes a snapshot
before ``index``, after ``index`` and after ``search`` and reports the differences as index-time and query-time
cost (``llm_index_calls``, ``llm_index_tokens``, ``llm_index_seconds``, ``llm_query_*``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import time
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

import lab.retrievers as pkg
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Queries, Run
from lab.retrievers.params import check_value, signature_params, takes_extra


@dataclass
class Context:
    """What a strategy may need from its surroundings; no global state."""

    cache_dir: Path = field(default_factory=lambda: Path(".cache"))
    progress: bool = True
    seed: int = 0
    language: str = "auto"  # "en", "zh" or "auto" (detected per text)


@runtime_checkable
class Retriever(Protocol):
    """What every strategy offers (see the module docstring); :class:`BaseRetriever` gives the defaults."""

    name: str

    def index(self, corpus: Corpus) -> None: ...

    def search(self, queries: Queries, k: int = 100) -> Run: ...

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]: ...

    def search_batch(self, queries: Queries, k: int = 100) -> Run: ...

    def use_qrels(self, qrels, prepare=None) -> None: ...

    def describe(self) -> dict: ...

    def usage(self) -> dict[str, float]: ...


class BaseRetriever:
    """The base of every strategy: implement ``index`` and ``search_one``; ``search`` times each query alone.

    A strategy that answers a whole query set at once overrides ``search`` (and ``search_one`` through it); one
    with a faster batched path overrides ``search_batch`` (no per-query latency). ``describe`` and ``usage`` have
    defaults (the plain params; no cost).
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
        scores, latency = {}, {}
        for qid in progress(list(queries), desc=f"search {self.name}", enabled=self.ctx.progress, phase="searching",
                            unit="query"):
            t0 = time.perf_counter()
            hits = self.search_one(queries[qid], k)
            latency[qid] = time.perf_counter() - t0
            scores[qid] = dict(hits)
        return Run(scores, name=self.name, latency=latency)

    def search_batch(self, queries: Queries, k: int = 100) -> Run:
        """The hits of ``search`` by the strategy's fastest path over the whole set (no per-query latency);
        by default ``search`` itself."""
        return self.search(queries, k)

    def use_qrels(self, qrels, prepare=None) -> None:
        """The judgments a strategy may tune on (hybrid's ``weights="tuned"``); ignored by default."""

    def describe(self) -> dict:
        """Params and identities to log (model names, backends); JSON-serialisable."""
        return {"strategy": self.name, **{k: v for k, v in self.params.items() if _plain(v)}}

    def usage(self) -> dict[str, float]:
        """Cumulative cost counters of paid model calls (none for a plain retriever); see the module docstring."""
        return {}


def llm_usage(*parts) -> dict[str, float]:
    """Counters summed over LLM objects and retrievers (each has ``usage()``); ``None`` parts are skipped, and an
    object listed twice counts once."""
    total: dict[str, float] = {}
    seen: set[int] = set()
    for part in parts:
        if part is None or id(part) in seen:
            continue
        seen.add(id(part))
        for key, value in part.usage().items():
            total[key] = total.get(key, 0) + value
    return total


def _plain(v) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


_REGISTRY: dict[str, Callable[..., Retriever]] = {}
_DECLARED: dict[str, "Declaration"] = {}
#: Classes whose ``__init__`` already checks its declared params (a class registered under two names wraps once).
_CHECKED_INIT: set[type] = set()


@dataclass(frozen=True)
class ExtraKeys:
    """What a strategy does with params outside its declared ones; at most one field is set:

    - none set (the default): refused, each an unknown-param problem naming the accepted params;
    - ``unchecked``: a factory taking undeclared ``**kwargs`` (an outside plugin): they pass, unchecked;
    - ``strategy``: they are that strategy's params (hyde passes them to dense) and are checked as such;
    - ``check``: ``(extra: dict, params: dict, where: str) -> list[str]`` returning the problems, called on every
      check, even without extra keys (hybrid checks its parts and the params per part).
    """

    unchecked: bool = False
    strategy: str | None = None
    check: Callable[[dict, dict, str], list[str]] | None = None

    @classmethod
    def of(cls, value: "ExtraKeys | str | Callable | bool | None") -> "ExtraKeys":
        """From :func:`register`'s ``extra``: None (refused), True (unchecked), a strategy name or a check."""
        if isinstance(value, ExtraKeys):
            return value
        if value is None:
            return cls()
        if value is True:
            return cls(unchecked=True)
        if isinstance(value, str):
            return cls(strategy=value)
        if callable(value):
            return cls(check=value)
        raise TypeError(f"extra={value!r}: give None, True, a strategy name or a check callable")


@dataclass(frozen=True)
class Declaration:
    """What a registered strategy accepts (see :mod:`lab.retrievers.params`).

    ``params``: name -> :class:`lab.retrievers.params.Param`. ``extra``: what happens to keys outside ``params``
    (:class:`ExtraKeys`). ``nested``: param -> strategy whose params its dict value holds: a strategy name, or
    the name of the param that names the strategy (rerank's ``first_stage_params`` follow ``first_stage``)."""

    params: dict
    extra: ExtraKeys = field(default_factory=ExtraKeys)
    nested: dict = field(default_factory=dict)


def register(name: str, *, rules: dict | None = None, params_from=None, also=(), exclude=(), extra=None,
             nested: dict | None = None, defaults: dict | None = None):
    """Class or factory decorator: ``@register("bm25", rules={"k1": at_least(0)})``. The factory takes
    (ctx, **params).

    The params a strategy accepts are the keyword params of ``params_from`` (default: the factory; a class means
    its ``__init__``) and of the callables in ``also`` (a base class whose ``**kwargs`` they reach; the first
    wins), less ``exclude``, typed by their annotations and bounded by ``rules``; ``defaults`` overrides the
    signature's defaults where the factory passes its own (hybrid_rerank's first_stage). See
    :mod:`lab.retrievers.params`. ``extra`` (None, True, a strategy name or a check; see :class:`ExtraKeys`) and
    ``nested``: see :class:`Declaration`. A registered class (and a class named by ``params_from``) checks the
    declared params it is constructed with before its ``__init__`` runs (:func:`_checked_init`).
    """
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
        _DECLARED[name] = Declaration(declared, ExtraKeys.of(True if undeclared_extra else extra), dict(nested or {}))
        for cls in (factory, params_from):
            if inspect.isclass(cls) and "__init__" in vars(cls) and cls not in _CHECKED_INIT:
                cls.__init__ = _checked_init(cls, name)
                _CHECKED_INIT.add(cls)
        return factory

    return deco


def _checked_init(cls: type, name: str) -> Callable:
    """``cls.__init__`` preceded by the check of the declared params it is given (keyword values; see
    :func:`check_params`), for objects of exactly ``cls`` (a subclass checks by its own registration)."""
    init = vars(cls)["__init__"]  # the class's own __init__ (register wraps only a class that defines one)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if type(self) is cls:
            decl = _DECLARED[name]
            check_params(name, {k: v for k, v in kwargs.items() if k in decl.params})
        init(self, *args, **kwargs)

    return __init__


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
    if decl.extra.strategy is not None:
        names |= accepted_names(decl.extra.strategy)
    return names


def param_problems(name, params: dict | None, where: str | None = None) -> list[str]:
    """One line per problem of ``params`` for strategy ``name``: an unknown strategy, an unknown param (with the
    accepted names), a value of the wrong type or out of range (with what the param accepts). Nested strategy
    params (hybrid parts, rerank's first stage, hyde's dense params) are checked the same way. Builds nothing."""
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
    if decl.extra.unchecked:  # undeclared **kwargs: nothing to check them against
        pass
    elif decl.extra.check is not None:  # called even without extra keys: it may check params it shares (hybrid's parts)
        problems += decl.extra.check(extra, params, where)
    elif extra:
        names = accepted_names(name)
        known = {k: v for k, v in extra.items() if k in names}
        for key in extra:
            if key not in known:
                problems.append(f"{where}: unknown param {key!r}; {name} accepts: {', '.join(sorted(names))}")
        if known:
            problems += param_problems(decl.extra.strategy, known, where)
    return problems


def check_params(name, params: dict | None, where: str | None = None) -> None:
    """Raise ConfigError with the first problem :func:`param_problems` finds (one line), before any work."""
    problems = param_problems(name, params, where)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)


def build(name: str, params: dict | None = None, ctx: Context | None = None) -> Retriever:
    """Strategy ``name`` built from ``params`` (checked first, one ConfigError line) in ``ctx``.

    Raises TypeError when the factory's object lacks a method of the :class:`Retriever` contract (a plugin not
    built on :class:`BaseRetriever`)."""
    check_params(name, params)
    retriever = _REGISTRY[name](ctx or Context(), **(params or {}))
    if not isinstance(retriever, Retriever):
        missing = [m for m in ("index", "search", "search_one", "search_batch", "use_qrels", "describe", "usage")
                   if not callable(getattr(retriever, m, None))]
        raise TypeError(f"strategy {name!r} built a {type(retriever).__name__} without {', '.join(missing)}; "
                        "derive it from lab.retrievers.base.BaseRetriever, which has every method of the contract")
    return retriever


#: Entry-point group through which packages (and lab's own higher layers) add strategies: ``name = "module"``
#: in ``[project.entry-points."raglab.strategies"]``; the module registers itself on import, as plugins do.
ENTRY_POINT_GROUP = "raglab.strategies"


def _load_builtins() -> None:
    """Import every strategy module of this package, then every module named in the entry-point group.

    A strategy that needs a layer above retrievers (``dense_ft`` trains its embedder with lab.training) registers
    through the entry point, so this layer never imports upward; an unimportable plugin is reported, not hidden.
    """
    if not _MODULES:  # the package's modules and the installed entry points, read once per process (each
        # read of the entry points scans every installed distribution's metadata: ~15 ms, 3 times per config)
        _MODULES.extend(mod.name for mod in pkgutil.iter_modules(pkg.__path__)
                        if mod.name != "base" and not mod.name.startswith("_"))
        _ENTRY_POINTS.extend((ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP))
    for name in _MODULES:
        importlib.import_module(f"lab.retrievers.{name}")
    for ep_name, ep_value in _ENTRY_POINTS:
        if ep_name not in _REGISTRY:
            try:
                importlib.import_module(ep_value.split(":")[0])
            except ImportError as exc:
                raise ConfigError(f"strategy plugin {ep_name!r} ({ep_value}) could not be imported: {exc}") from exc


_MODULES: list[str] = []  # the strategy modules of this package (read once by _load_builtins)
_ENTRY_POINTS: list[tuple[str, str]] = []  # (name, value) of the entry points of ENTRY_POINT_GROUP (read once)
