"""Declared strategy params: names, types and ranges, checked before any work starts.

Each registered strategy accepts the keyword params of its constructor; their types are the constructor's
annotations (``k1: float = 0.9``) and their ranges the :class:`Rule` objects given to
:func:`lab.retrievers.base.register` (``rules={"k1": at_least(0)}``). :func:`check_value` tells whether one value
fits its declaration and, when not, what the param accepts, so a misspelt name or a bad value is one line naming the
param and the accepted values (``lab run --set``, sweep configs, notebooks) instead of a TypeError after indexing.

Conventions
- A value of type ``int`` is accepted where ``float`` is declared (YAML writes ``1`` for 1.0); ``bool`` is never
  accepted as a number (``true`` for ``k1`` is a mistake, not 1).
- A param without an annotation, or annotated ``Any``, takes any value (an LLM spec, an embedder object).
- ``None`` passes a rule (None means "the default"), but only where the annotation allows None.
- Sequences are lists or tuples (a string is not a sequence of strings); mappings are dicts.
"""
from __future__ import annotations

import collections.abc as cabc
import inspect
import numbers
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable


# ----------------------------------------------------------------------------------------------------------
# rules (ranges and choices)
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """A range ``[low, high]`` (each end optional; ``open_low`` / ``open_high`` make that end strict) or a set of
    choices (``lists``: a list also passes, its items type-checked by the annotation: stopwords' own words).
    ``why``: for a param that takes any value (no type, no choices), the reason, stated where it is declared
    (:func:`any_value`); every registered param has a type, choices or a reason (tests/retrievers)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    choices: tuple = ()
    open_high: bool = False
    lists: bool = False
    why: str = ""

    def ok(self, value) -> bool:
        if value is None:
            return True
        if self.choices:
            return (self.lists and isinstance(value, (list, tuple))) or any(
                value == c and isinstance(value, bool) == isinstance(c, bool) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return True  # the type check reports non-numbers
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or (value < self.high if self.open_high else value <= self.high)

    def text(self) -> str:
        if self.why:
            return f"any value ({self.why})"
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices) + (", or a list" if self.lists else "")
        low = f"{'>' if self.open_low else '>='} {self.low:g}" if self.low is not None else ""
        high = f"{'<' if self.open_high else '<='} {self.high:g}" if self.high is not None else ""
        if low and high:
            return f"{low} and {high}" if self.open_low or self.open_high else f"between {self.low:g} and {self.high:g}"
        return low or high


def at_least(low: float) -> Rule:
    """``value >= low``."""
    return Rule(low=low)


def above(low: float) -> Rule:
    """``value > low``."""
    return Rule(low=low, open_low=True)


def between(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Rule:
    """``low <= value <= high`` (``<`` at an end made open)."""
    return Rule(low=low, high=high, open_low=open_low, open_high=open_high)


def one_of(*choices, lists: bool = False) -> Rule:
    """``value in choices`` (``True`` is not ``1``); ``lists``: or a list (its items typed by the annotation)."""
    return Rule(choices=tuple(choices), lists=lists)


def any_value(why: str) -> Rule:
    """A param that takes any value, and why no type or choices can say more (an object handed over in code)."""
    return Rule(why=why)


#: The rule of every count (k, depth, top_n, n, batch sizes): at least 1, since 0 would mean "nothing".
COUNT = at_least(1)


# ----------------------------------------------------------------------------------------------------------
# declarations
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One declared param: its type (a resolved annotation, None = any), default and rule."""

    name: str
    annotation: Any = None
    default: Any = None
    rule: Rule | None = None

    def expected(self) -> str:
        """What the param accepts, in words: "a number >= 0", "one of 'rrf', 'weighted'", "a string or null"."""
        parts = _union_args(self.annotation)
        nullable = parts is not None and type(None) in parts
        if self.rule is not None and self.rule.choices:
            lists = [type_text(a) for a in parts or () if typing.get_origin(a) in (list, tuple)]
            choices = self.rule.text().removesuffix(", or a list") + (f", or {lists[0]}" if lists else "")
            return choices + (", or null" if nullable else "")
        if self.rule is None:
            return type_text(self.annotation)
        if self.rule.why:
            return self.rule.text()
        inner = [a for a in parts if a is not type(None)] if parts is not None else [self.annotation]
        kind = " or ".join(dict.fromkeys(type_text(a) for a in inner))
        return f"{kind} {self.rule.text()}" + (", or null" if nullable else "")


def signature_params(factory: Callable, rules: dict[str, Rule] | None = None, exclude=()) -> dict[str, Param]:
    """The keyword params of ``factory`` (a class: its ``__init__``), types resolved from the annotations, less
    ``ctx``, ``self``, ``*args`` / ``**kwargs`` and ``exclude``."""
    fn = factory.__init__ if inspect.isclass(factory) else factory
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation is treated as "any value"
        hints = {}
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name in ("self", "ctx") or name in exclude or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        out[name] = Param(name, hints.get(name), default, (rules or {}).get(name))
    return out


def takes_extra(factory: Callable) -> bool:
    """True when ``factory`` (a class: its ``__init__``) takes ``**kwargs``."""
    fn = factory.__init__ if inspect.isclass(factory) else factory
    return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


# ----------------------------------------------------------------------------------------------------------
# type checks
# ----------------------------------------------------------------------------------------------------------
def _union_args(annotation) -> tuple | None:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return None


def conforms(value, annotation) -> bool:
    """True when ``value`` (a plain YAML/JSON value) fits ``annotation`` (see the module conventions)."""
    if annotation is None or annotation is Any or annotation is inspect.Parameter.empty:
        return True
    parts = _union_args(annotation)
    if parts is not None:
        return any(conforms(value, a) for a in parts)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    origin = typing.get_origin(annotation) or annotation
    args = typing.get_args(annotation)
    if origin in (dict, cabc.Mapping, cabc.MutableMapping):
        return isinstance(value, dict)
    if origin in (list, tuple, cabc.Sequence, cabc.MutableSequence):
        if not isinstance(value, (list, tuple)):
            return False
        if not args or args[-1] is Ellipsis and len(args) == 2 and args[0] is Any:
            return True
        if origin is tuple and Ellipsis not in args:
            return len(value) == len(args) and all(conforms(v, a) for v, a in zip(value, args, strict=True))
        return all(conforms(v, args[0]) for v in value)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True


def type_text(annotation) -> str:
    """An annotation in words: "a number", "an integer", "true or false", "a string or null", "a list of numbers"."""
    if annotation is None or annotation is Any or annotation is inspect.Parameter.empty:
        return "any value"
    parts = _union_args(annotation)
    if parts is not None:
        texts = list(dict.fromkeys(type_text(a) for a in parts if a is not type(None)))
        return " or ".join(texts) + (" or null" if type(None) in parts else "")
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a string"
    origin = typing.get_origin(annotation) or annotation
    args = typing.get_args(annotation)
    if origin in (dict, cabc.Mapping, cabc.MutableMapping):
        return "a mapping"
    if origin in (list, tuple, cabc.Sequence, cabc.MutableSequence):
        if origin is tuple and args and Ellipsis not in args:
            kinds = {type_text(a) for a in args}
            return f"a list of {len(args)} " + ("numbers" if kinds == {"a number"} else "values")
        if args:
            inner = type_text(args[0])
            return "a list of " + {"a number": "numbers", "an integer": "integers", "a string": "strings"}.get(
                inner, "values")
        return "a list"
    name = getattr(origin, "__name__", str(origin))
    vowel_sound = name[:1] in "AEIOUaeiou" or (name.isupper() and name[:1] in "FHLMNRSX")  # an LLM, an Embedder
    return f"{'an' if vowel_sound else 'a'} {name} object"


def check_value(param: Param, value) -> str | None:
    """None when ``value`` fits ``param``, else what it accepts (for the error line)."""
    if not conforms(value, param.annotation):
        return param.expected()
    if param.rule is not None and not param.rule.ok(value):
        return param.expected()
    return None
