"""``key=value`` settings as written on a command line (``lab run --set k1=1.2 --set dense.model=mpnet``).

Conventions
- Each item is ``key=value``, split at the first ``=`` (so a value may contain ``=``); an item without ``=`` is a
  ConfigError naming it.
- The value is read as one YAML 1.1 node by PyYAML's ``safe_load`` (https://pyyaml.org/wiki/PyYAMLDocumentation):
  ``1.2`` is a float, ``true`` a bool, ``[bm25, dense]`` a list, ``{a: 1}`` a mapping, anything else a string;
  an empty value is the empty string. A value YAML cannot read is a ConfigError naming the item.
- Dotted keys nest: ``dense.model=mpnet`` -> ``{"dense": {"model": "mpnet"}}``; a later item wins over an
  earlier one with the same key.
"""
from __future__ import annotations

from typing import Any

import yaml

from lab.core.errors import ConfigError
from lab.core.yamlsafe import load_yaml


def parse_settings(items: list[str] | None, option: str = "--set") -> dict[str, Any]:
    """The nested mapping of ``key=value`` items (see the module docstring); ``option`` is the flag named in
    errors (e.g. ``--set 'k1': expected key=value, e.g. --set k1=1.2``). None or [] gives {}."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"{option} {item!r}: expected key=value, e.g. {option} k1=1.2")
        key, raw = item.split("=", 1)
        try:
            value = load_yaml(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"{option} {item!r}: the value is not a valid YAML scalar or list "
                              f"({getattr(exc, 'problem', exc)}); quote it or write e.g. {option} "
                              "retrievers=[bm25,dense]") from None
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out
