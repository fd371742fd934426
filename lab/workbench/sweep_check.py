"""Checks of a sweep's configs before the first execution: nothing runs on a misspelt key.

:func:`validate_sweep` returns one line per problem (empty: the sweep may start); ``lab sweep --dry-run`` and a
real sweep both call it, and a sweep with any problem does not start. Each line names the spec file (and the line
of the key, when the key is written in the file), the config (its index and label) and what is accepted:

- keys: every top-level key of a config must be a parameter of the notebook's ``parameters`` cell (read with
  papermill's ``inspect_notebook``); Papermill would only warn and run with the notebook's default.
- values: where the notebook's default is an int, float, bool or str, the value must be one too (an int is a
  number); counts (``k``, ``max_queries``, ``n``, ``depth``, ``top_n``) must be >= 1.
- strategies: ``strategy`` with ``params``, each name of ``strategies`` with its ``strategy_params`` entry, are
  checked against the registry's declared params (:func:`lab.retrievers.base.param_problems`); a ``chunking``
  mapping against :func:`lab.experiment.run.chunking_problems`.
- datasets: ``dataset`` must be a BEIR folder (corpus, queries, qrels/) holding the config's ``split``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from lab.core.errors import LabError
from lab.core.paths import resolve_repo_path
from lab.core.yamlsafe import compose_yaml
from lab.data.beir import qrels_files
from lab.experiment.run import chunking_problems
from lab.retrievers.base import param_problems

#: Notebook parameters that count things: integers >= 1 (None allowed where the notebook's default is None).
COUNT_KEYS = ("k", "max_queries", "n", "depth", "top_n", "concurrency")


def notebook_parameters(notebook: str | Path) -> dict[str, Any]:
    """``{name: default value}`` of a notebook's ``parameters`` cell (defaults literal-evaluated; one that is not
    a literal is kept as its source text)."""
    import papermill as pm

    out = {}
    for name, info in pm.inspect_notebook(str(notebook)).items():
        try:
            out[name] = ast.literal_eval(info.get("default", "None"))
        except (ValueError, SyntaxError):
            out[name] = info.get("default")
    return out


def key_lines(spec_path: str | Path) -> dict[str, int]:
    """``{"fixed.k": 9, "grid.strategy": 11, "dataset": 3, ...}``: the 1-based line of each key of the spec's
    top level and of its fixed / grid / zip sections (empty when the file cannot be read as YAML)."""
    try:
        root = compose_yaml(Path(spec_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return out
    for key, value in root.value:
        out[str(key.value)] = key.start_mark.line + 1
        if key.value in ("fixed", "grid", "zip") and isinstance(value, yaml.MappingNode):
            _nested_lines(value, str(key.value), out)
    return out


def _nested_lines(node, prefix: str, out: dict[str, int]) -> None:
    """Lines of a section's keys, nested mappings included (``fixed.chunking.size``)."""
    for k, v in node.value:
        name = f"{prefix}.{k.value}"
        out[name] = k.start_mark.line + 1
        if isinstance(v, yaml.MappingNode):
            _nested_lines(v, name, out)


def _problem_key(key: str | None, message: str) -> str | None:
    """The most precise key a problem names: ``chunking.overlpa`` for "chunking: unknown key 'overlpa'"."""
    m = re.match(r"chunking: unknown key '([^']+)'", message) if key == "chunking" else None
    return f"chunking.{m.group(1)}" if m else key


def _kind(default) -> tuple[tuple[type, ...], str] | None:
    if isinstance(default, bool):
        return (bool,), "true or false"
    if isinstance(default, int):
        return (int,), "an integer"
    if isinstance(default, float):
        return (int, float), "a number"
    if isinstance(default, str):
        return (str,), "a string"
    return None


def _value_problem(key: str, value, default) -> str | None:
    if key in COUNT_KEYS:
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key}={value!r}: expected an integer >= 1" + (" or null" if default is None else "")
        return None
    kind = _kind(default)
    if kind is None or value is None:
        return None
    types, text = kind
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        return f"{key}={value!r}: expected {text} (the notebook's default is {default!r})"
    return None


def _dataset_problem(dataset, split, repo_root) -> str | None:
    if not isinstance(dataset, str):
        return f"dataset={dataset!r}: expected a path to a BEIR folder, e.g. data/scifact"
    try:
        folder = Path(resolve_repo_path(dataset, repo_root))
    except LabError as exc:
        return f"dataset {dataset!r}: {exc}"
    if not folder.is_dir():
        return f"dataset {dataset!r}: dataset folder not found ({folder}); paths are relative to the repo root"
    for stem in ("corpus", "queries"):
        if not any((folder / f"{stem}{ext}").is_file() for ext in (".jsonl", ".jsonl.gz")):
            return f"dataset {dataset!r}: no {stem}.jsonl in {folder} (not a BEIR folder)"
    try:
        splits = qrels_files(folder)
    except LabError as exc:
        return f"dataset {dataset!r}: {exc}"
    if isinstance(split, str) and split not in splits:
        return f"split {split!r}: dataset {dataset!r} has qrels for {', '.join(sorted(splits)) or 'no split'}"
    return None


def config_problems(config: Mapping, nb_params: Mapping[str, Any], repo_root=None,
                    injected=("mlflow_run_id", "tracking_root", "experiment")) -> list[tuple[str | None, str]]:
    """``(top-level key or None, message)`` for each problem of one config (see the module docstring)."""
    out: list[tuple[str | None, str]] = []
    accepted = sorted(k for k in nb_params if k not in injected)
    for key, value in config.items():
        if key not in nb_params:
            out.append((key, f"key {key!r} is not a parameter of the notebook; it takes: {', '.join(accepted)}"))
            continue
        problem = _value_problem(key, value, nb_params[key])
        if problem:
            out.append((key, problem))
    merged = {**nb_params, **config}
    strategy, params = merged.get("strategy"), merged.get("params")
    if "strategy" in nb_params and strategy is not None:
        if not isinstance(params, (dict, type(None))):
            out.append(("params", f"params={params!r}: expected a mapping of strategy params"))
        else:
            out += [("strategy" if "unknown strategy" in p else "params", p) for p in param_problems(strategy, params)]
    if "strategies" in nb_params and strategy is None and isinstance(merged.get("strategies"), list):
        per = merged.get("strategy_params") or {}
        for name in merged["strategies"]:
            p_params = per.get(name) if isinstance(per, dict) else None
            out += [("strategies", p) for p in param_problems(name, p_params)]
    if "chunking" in nb_params and isinstance(merged.get("chunking"), dict):
        out += [("chunking", p) for p in chunking_problems(merged["chunking"])]
    if "dataset" in nb_params:
        problem = _dataset_problem(merged.get("dataset"), merged.get("split"), repo_root)
        if problem:
            out.append(("dataset" if not problem.startswith("split") else "split", problem))
    return out


def validate_sweep(spec, configs: list[dict], labels: list[str] | None = None) -> list[str]:
    """One line per problem of the sweep's configs, before anything runs (see the module docstring). A problem
    shared by several configs (a misspelt key under ``fixed``) is one line naming them all."""
    nb_params = notebook_parameters(spec.notebook)
    lines = key_lines(spec.path)
    found: dict[tuple[str | None, str], list[int]] = {}
    for i, config in enumerate(configs):
        for key, message in config_problems(config, nb_params, spec.repo_root):
            found.setdefault((key, message), []).append(i)
    out = []
    for (key, message), indices in found.items():
        where = str(spec.path)
        precise = _problem_key(key, message)
        key = precise if any(f"{s}.{precise}" in lines for s in ("fixed", "grid", "zip")) else key
        section = next((s for s in ("fixed", "grid", "zip") if key is not None and f"{s}.{key}" in lines), None)
        line_key = f"{section}.{key}" if section else key
        if line_key in lines:
            where += f", line {lines[line_key]}, key '{line_key}'"
        if len(indices) == len(configs) and len(configs) > 1:
            which = f"all {len(configs)} configs"
        elif labels is not None and len(indices) == 1:
            which = f"config {indices[0]} ({labels[indices[0]]})"
        else:
            which = "config" + ("s " if len(indices) > 1 else " ") + ", ".join(str(i) for i in indices)
        out.append(f"{where}: {which}: {message}")
    return out
