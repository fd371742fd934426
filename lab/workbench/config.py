"""Sweep specs: ``params/*.yaml`` -> validated :class:`SweepSpec` -> a list of configs.

Schema of a spec (top-level keys; anything else is an error naming the file and the key)::

    notebook: notebooks/02_chunk_size_grid.ipynb   # required; relative to the repo root (see lab.core.paths)
    dataset: data/scifact                          # the notebook's `dataset`; may instead come from fixed/grid/zip
    experiment: chunk-size-grid                    # MLflow experiment name (default: the spec's file stem)
    name: chunk-size-grid                          # sweep name (default: the spec's file stem)
    seed: 0                                        # optional; injected as the notebook's `seed`
    holdout: 0.3                                   # optional; share of queries held out to confirm the winner
    fixed: {strategy: bm25, k: 100}                # params shared by every config
    grid:                                          # cartesian product of the lists
      chunking.size: [128, 256, 512]
    zip:                                           # lists of equal length, taken row by row ...
      chunking.overlap: [16, 32, 64]               # ... then crossed with the grid
      chunking.chunker: [recursive, recursive, fixed]
    publish:                                       # optional: headline metrics to monitor (lab.workbench.monitoring)
      prometheus: results/metrics/raglab.prom      # node exporter textfile (inside the repo; elsewhere:
                                                   # --prometheus on the command line), and/or
      pushgateway: http://127.0.0.1:9091           # a Pushgateway (job, metrics, headers_env optional)

Conventions (one way each, used by the sweep, the tracking and the resume logic alike)
- Dotted keys address nested params: ``"params.k1": 1.2`` is ``{"params": {"k1": 1.2}}``. ``fixed`` may be
  written nested or dotted; both mean the same.
- A config is a nested dict: ``dataset`` and ``seed`` (when given) first, then ``fixed``, then the zip row,
  then the grid point. The same dotted key in two sections is an error (a value would be silently overridden).
- Order of the configs: zip rows outer, grid points inner; grid keys vary in the order written, the last
  fastest (``itertools.product``). No grid and no zip gives one config (fixed alone).
- :func:`flatten` turns a config into ``{dotted key: str}``: strings as they are, everything else as compact
  JSON (``1.2``, ``true``, ``null``, ``["a","b"]``); an empty dict is kept as ``"{}"``. MLflow params use it.
  It and its pure siblings (set_dotted, flatten_values, format_value, unflatten, canonical_json, config_hash,
  varying_keys) live in :mod:`lab.core.flat`, so every layer may import them; they are re-exported here.
- Files a spec writes (``publish.prometheus``) resolve inside the repository (or the spec's own folder when the
  spec is kept outside the repo); anything else is refused when the spec is read (file, line, key; exit 2).
- :func:`config_hash` is the first 16 hex digits of the sha256 of the config's canonical JSON (sorted keys,
  compact separators, UTF-8). Resume identifies a config by it.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from lab.core.errors import ConfigError

# pure flat-config helpers live in lab.core.flat (every layer may import them); re-exported here
from lab.core.flat import (  # noqa: F401
    canonical_json,
    config_hash,
    flatten,
    flatten_values,
    format_value,
    set_dotted,
    unflatten,
    varying_keys,
)
from lab.core.flat import plain_copy as _plain_copy
from lab.core.paths import repo_root, resolve_repo_path
from lab.core.yamlsafe import AliasBomb, load_yaml
from lab.data.holdout import holdout_problem
from lab.workbench.monitoring import parse_publish

#: Top-level keys a spec may hold.
SPEC_KEYS = ("notebook", "dataset", "experiment", "name", "seed", "fixed", "grid", "zip", "publish", "holdout")
#: Notebook parameters the sweep injects itself; a spec may not set them in fixed, grid or zip.
RESERVED_PARAMS = ("mlflow_run_id", "tracking_root", "experiment")


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec. ``notebook`` is absolute; ``dataset`` is kept as written (portable hash)."""

    path: Path
    name: str
    notebook: Path
    experiment: str
    dataset: str | None = None
    seed: int | None = None
    fixed: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    zip: dict = field(default_factory=dict)
    repo_root: Path | None = None
    publish: dict = field(default_factory=dict)  # lab.workbench.monitoring.parse_publish of the spec's `publish` key
    holdout: float | None = None  # share of the queries held out (lab.data.holdout; lab.workbench.selection)


# ----------------------------------------------------------------------------------------------------------
# loading and validation
# ----------------------------------------------------------------------------------------------------------
def _fail(path, key: str | None, message: str, hint: str = "") -> ConfigError:
    where = f"{path}" + (f", key '{key}'" if key else "")
    return ConfigError(f"{where}: {message}" + (f" ({hint})" if hint else ""))


def _find_root(path: Path) -> Path:
    """Repo root for a spec: the repo above the spec's folder, else :func:`lab.core.paths.repo_root` (LAB_REPO_ROOT,
    the cwd, the package's checkout), else the spec's folder."""

    for start in (path.parent, None):
        try:
            return repo_root(start)
        except ConfigError:
            continue
    return path.parent


def yaml_error_line(exc: Exception) -> int | None:
    """The 1-based line a YAML syntax error is on: where an unclosed construct (a ``[`` / ``{`` list or mapping,
    a quoted string) starts, since PyYAML notices it only on a later line; else where PyYAML noticed it."""
    problem, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    unclosed = str(getattr(exc, "context", "") or "").startswith(("while parsing a flow", "while scanning a quoted"))
    mark = context if unclosed and context is not None else problem
    return mark.line + 1 if mark is not None else None


def load_spec(path: str | Path, root: str | Path | None = None) -> SweepSpec:
    """Read and validate a spec file. ``root``: folder relative paths refer to (default: the repo root above
    the spec, see :mod:`lab.core.paths`; the spec's folder when there is none)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep spec; specs live in params/*.yaml")
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except AliasBomb as exc:
        raise ConfigError(f"{path}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc)
        raise ConfigError(f"{path}{f', line {line}' if line else ''}: not valid YAML: "
                          f"{getattr(exc, 'problem', exc)}") from None
    return parse_spec(raw, path, root=Path(root) if root is not None else _find_root(path.resolve()))


def parse_spec(raw: Any, path: str | Path = "<spec>", root: str | Path | None = None) -> SweepSpec:  # noqa: C901 - one flat check per spec field, each raising its own error line
    """Validate a spec already read from YAML (a dict); errors name ``path`` and the key."""
    path = Path(path)
    if not isinstance(raw, Mapping):
        raise _fail(path, None, f"expected a mapping of {', '.join(SPEC_KEYS)}, got {type(raw).__name__}")
    for key in raw:
        if key not in SPEC_KEYS:
            raise _fail(path, str(key), "unknown top-level key", f"allowed: {', '.join(SPEC_KEYS)}; "
                        "put notebook parameters under fixed, grid or zip")
    root = Path(root) if root is not None else path.parent

    nb = raw.get("notebook")
    if not nb or not isinstance(nb, str):
        raise _fail(path, "notebook", "missing; give the notebook to run, relative to the repo root",
                    "e.g. notebook: notebooks/02_chunk_size_grid.ipynb")
    notebook = Path(nb).expanduser()
    notebook = notebook if notebook.is_absolute() else root / notebook
    if not notebook.is_file():
        raise _fail(path, "notebook", f"{nb!r} not found (looked at {notebook})",
                    "paths are relative to the repo root")

    name = raw.get("name", path.stem)
    experiment = raw.get("experiment", path.stem)
    for key, value in (("name", name), ("experiment", experiment)):
        if not isinstance(value, str) or not value.strip():
            raise _fail(path, key, f"must be a non-empty string, got {value!r}")
    if "/" in name or name.startswith("."):
        raise _fail(path, "name", f"{name!r} is used as a folder name; use letters, digits, - and _")

    dataset = raw.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        raise _fail(path, "dataset", f"must be a path string, got {dataset!r}")
    seed = raw.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise _fail(path, "seed", f"must be an integer, got {seed!r}")

    holdout = raw.get("holdout")
    if holdout is not None:
        problem = holdout_problem(holdout)
        if problem:
            raise _fail(path, "holdout", problem.split(": ", 1)[1])
    fixed = raw.get("fixed") or {}
    if not isinstance(fixed, Mapping):
        raise _fail(path, "fixed", f"must be a mapping of params, got {type(fixed).__name__}")
    grid = raw.get("grid") or {}
    zipped = raw.get("zip") or {}
    for section, d in (("grid", grid), ("zip", zipped)):
        if not isinstance(d, Mapping):
            raise _fail(path, section, f"must be a mapping of key -> list, got {type(d).__name__}")
        for key, values in d.items():
            if not isinstance(values, list):
                raise _fail(path, f"{section}.{key}", f"must be a list of values, got {values!r}",
                            f"write {key}: [{values!r}] or move it to fixed")
            if not values:
                raise _fail(path, f"{section}.{key}", "empty list: the sweep would have no config",
                            "give at least one value or remove the key")
    if zipped:
        lengths = {str(k): len(v) for k, v in zipped.items()}
        if len(set(lengths.values())) > 1:
            first = next(iter(lengths))
            bad = next(k for k, n in lengths.items() if n != lengths[first])
            raise _fail(path, f"zip.{bad}", f"has {lengths[bad]} values but zip.{first} has {lengths[first]}",
                        "zip lists are taken row by row and must have equal lengths")

    for section, d in (("fixed", fixed), ("grid", grid), ("zip", zipped)):
        for key in d:
            if str(key).split(".", 1)[0] in RESERVED_PARAMS:
                raise _fail(path, f"{section}.{key}", "is set by the sweep itself",
                            "the experiment name goes in the top-level 'experiment' key")
    _check_overlaps(path, fixed, grid, zipped, dataset, seed)
    publish = _parse_publish(path, raw.get("publish"))
    _check_written_paths(path, publish, root)
    spec = SweepSpec(path=path, name=name, notebook=notebook.resolve(), experiment=experiment, dataset=dataset,
                     seed=seed, fixed=_plain_copy(fixed), grid=_plain_copy(grid), zip=_plain_copy(zipped),
                     repo_root=root.resolve(), publish=publish,
                     holdout=float(holdout) if holdout is not None else None)
    if dataset is None and not any("dataset" in _top_keys(d) for d in (spec.fixed, spec.grid, spec.zip)):
        raise _fail(path, "dataset", "missing; set it at the top level or in fixed/grid/zip",
                    "e.g. dataset: data/scifact")
    return spec


def _key_line(path: Path, key: str) -> str:
    """", line N" of the first line of the spec file that sets ``key`` ("" when it cannot be found)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    pattern = re.compile(rf"(^|[\s{{,]){re.escape(key)}\s*:")
    return next((f", line {i}" for i, text in enumerate(lines, 1) if pattern.search(text)), "")


def _check_written_paths(path: Path, publish: Mapping, root: Path) -> None:
    """Files a spec writes (``publish.prometheus``) stay inside the repository (or the spec's own folder, for a
    spec kept outside it); a path that climbs out is refused here, before any work. Elsewhere: give it on the
    command line (``--prometheus``)."""
    target = publish.get("prometheus")
    if not target:
        return
    where = os.path.realpath(resolve_repo_path(target, root))
    allowed = [os.path.realpath(root)] + ([os.path.realpath(path.parent)] if path.is_file() else [])
    if any(where == a or where.startswith(a.rstrip(os.sep) + os.sep) for a in allowed):
        return
    raise ConfigError(f"{path}{_key_line(path, 'prometheus')}, key 'publish.prometheus': {target!r} is {where}, "
                      f"outside the repository ({os.path.realpath(root)}); a spec writes only inside it (pass "
                      "--prometheus PATH on the command line to write elsewhere)")


def _parse_publish(path, raw) -> dict:
    """The spec's ``publish`` key validated by :func:`lab.workbench.monitoring.parse_publish` (errors name the file)."""
    if raw is None:
        return {}

    try:
        return parse_publish(raw, "publish")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _top_keys(d: Mapping) -> set[str]:
    return {str(k).split(".", 1)[0] for k in d}


def _check_overlaps(path, fixed, grid, zipped, dataset, seed) -> None:
    """The same dotted key (or a key and its parent) in two sections is an error."""
    sections = {
        "top level": {k for k, v in (("dataset", dataset), ("seed", seed)) if v is not None},
        "fixed": {k for k, v in flatten_values(unflatten(fixed)).items() if v != {}} if fixed else set(),
        "zip": {str(k) for k in zipped},
        "grid": {str(k) for k in grid},
    }
    names = list(sections)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for ka in sections[a]:
                for kb in sections[b]:
                    if ka == kb or kb.startswith(ka + ".") or ka.startswith(kb + "."):
                        raise _fail(path, kb if b != "top level" else ka,
                                    f"set in both {a} ({ka}) and {b} ({kb}); one would override the other",
                                    "keep each key in one section")


# ----------------------------------------------------------------------------------------------------------
# expansion
# ----------------------------------------------------------------------------------------------------------
def expand(spec: SweepSpec) -> list[dict]:
    """All configs of a spec (nested dicts), zip rows outer, grid points inner (see the module docstring)."""
    base: dict = {}
    if spec.dataset is not None:
        base["dataset"] = spec.dataset
    if spec.seed is not None:
        base["seed"] = spec.seed
    for k, v in spec.fixed.items():
        set_dotted(base, str(k), v)

    zkeys = list(spec.zip)
    n_rows = len(spec.zip[zkeys[0]]) if zkeys else 1
    zrows = [{k: spec.zip[k][i] for k in zkeys} for i in range(n_rows)]
    gkeys = list(spec.grid)
    gpoints = [dict(zip(gkeys, combo, strict=True)) for combo in itertools.product(*(spec.grid[k] for k in gkeys))]

    configs = []
    for zrow in zrows:
        for gpoint in gpoints:
            config = _plain_copy(base)
            for k, v in {**zrow, **gpoint}.items():
                set_dotted(config, str(k), v)
            configs.append(config)
    return configs


def label(config: Mapping, keys: list[str] | None = None) -> str:
    """Short human label of a config: ``key=value`` of ``keys`` (default: all leaves) joined by ", "."""
    flat = flatten(config)
    keys = list(flat) if keys is None else keys
    return ", ".join(f"{k}={flat[k]}" for k in keys if k in flat) or "config"
