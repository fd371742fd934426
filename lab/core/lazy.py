"""Lazy public names for a package's ``__init__`` (PEP 562), so ``import lab`` and ``import lab.<layer>`` stay cheap.

A package lists its public face as ``{name: module}``; the name is imported from its module on first use and
kept in the package's namespace, so later look-ups cost nothing::

    _PUBLIC = {"run_experiment": "lab.experiment.run"}
    __all__ = list(_PUBLIC)
    __getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(namespace: dict[str, object], public: Mapping[str, str]) -> tuple[Callable[[str], object],
                                                                                 Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose ``public`` names (name -> defining module) load on
    first use. ``namespace``: the package's ``globals()``; a loaded name is stored there."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
