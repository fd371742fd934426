"""Flat views of nested configs: dotted keys, MLflow param strings, canonical JSON and the config hash.

Pure functions on dicts (no I/O), shared by the sweep (lab.workbench), the tracking (lab.tracking.store) and the
analysis (lab.analysis.compare labels runs by :func:`varying_keys`), so every layer may import them.

Conventions (one way each, used by the sweep, the tracking and the resume logic alike)
- Dotted keys address nested params: ``"params.k1": 1.2`` is ``{"params": {"k1": 1.2}}``.
- :func:`flatten` turns a config into ``{dotted key: str}``: strings as they are, everything else as compact
  JSON (``1.2``, ``true``, ``null``, ``["a","b"]``); an empty dict is kept as ``"{}"``. MLflow params use it.
- :func:`config_hash` is the first 16 hex digits of the sha256 of the config's canonical JSON (sorted keys,
  compact separators, UTF-8). Resume identifies a config by it.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from lab.core.errors import ConfigError

__all__ = ["canonical_json", "config_hash", "flatten", "flatten_values", "format_value", "nan_to_none",
           "plain_copy", "set_dotted", "unflatten", "varying_keys"]


def set_dotted(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set ``config[a][b][c] = value`` for key ``"a.b.c"`` in place (creating dicts on the way); returns config.

    A dict value is merged into an existing dict at that place (deep), anything else replaces it.
    """
    *parents, leaf = key.split(".")
    node = config
    for i, p in enumerate(parents):
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"key {key!r}: {'.'.join(parents[:i + 1])!r} is {child!r}, not a mapping")
        node = child
    if isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
        for k, v in value.items():
            set_dotted(node[leaf], str(k), v)
    else:
        node[leaf] = plain_copy(value)
    return config


def nan_to_none(value: Any) -> Any:
    """``value``, except a float NaN, which becomes None: JSON has no NaN (RFC 8259, section 6), so a figure
    that was not measured is written as ``null``."""
    return None if isinstance(value, float) and math.isnan(value) else value


def plain_copy(value: Any) -> Any:
    """Deep copy of dicts and lists (YAML values), so configs never share mutable parts."""
    if isinstance(value, Mapping):
        return {str(k): plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(v) for v in value]
    return value


def _flat_items(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            yield from _flat_items(v, key + ".")
        else:
            yield key, v


def flatten_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{dotted key: value}`` of the leaves of a nested dict (values kept as they are; ``{}`` is a leaf)."""
    return dict(_flat_items(config))


def string_values(config: Mapping[str, Any]) -> list[str]:
    """The string leaves of a config, in order: what the user typed, so the paths they gave are among them
    (lab.core.paths.public_path keeps those as given)."""
    return [v for v in flatten_values(config or {}).values() if isinstance(v, str)]


def format_value(value: Any) -> str:
    """One value as an MLflow param string: a str as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def flatten(config: Mapping[str, Any]) -> dict[str, str]:
    """``{dotted key: str}``: the config's leaves, each formatted by :func:`format_value` (MLflow params)."""
    return {k: format_value(v) for k, v in _flat_items(config)}


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The nested dict of ``{dotted key: value}`` (inverse of :func:`flatten_values`)."""
    out: dict[str, Any] = {}
    for k, v in flat.items():
        set_dotted(out, k, v)
    return out


def canonical_json(config: Mapping[str, Any]) -> str:
    """The canonical JSON of a config: sorted keys, compact separators, non-ASCII kept."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def config_hash(config: Mapping[str, Any]) -> str:
    """First 16 hex digits of sha256(canonical JSON of the config, UTF-8): a config's identity for resume."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()[:16]


def varying_keys(configs: list[Mapping[str, Any]]) -> list[str]:
    """Dotted keys whose value differs between configs, in first-seen order (labels for runs and tables)."""
    flats = [flatten(c) for c in configs]
    keys: list[str] = []
    for f in flats:
        keys.extend(k for k in f if k not in keys)
    return [k for k in keys if len({f.get(k) for f in flats}) > 1]
