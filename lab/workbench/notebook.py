"""The setup the four notebooks share, as one call: ``ctx, ds = setup(dataset, seed=seed, ...)``.

What :func:`setup` does, in order (the same steps the notebooks' setup cell ran line by line before):
1. Offline and quiet model libraries: ``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``,
   ``MLFLOW_DISABLE_TELEMETRY=true``, ``TOKENIZERS_PARALLELISM=false``, each set only when the environment does not
   set it already (``lab notebook`` and ``lab sweep`` set them for the kernel too). They must be set before
   huggingface_hub or transformers is imported, which read them once at import time; the ``lab`` modules the
   notebooks import load those libraries lazily, at a model's first use, so calling ``setup`` after the imports
   of the setup cell is early enough.
2. Figures inline: in an IPython kernel, the ``%matplotlib inline`` magic (outside IPython nothing is done).
3. pandas display: 4 decimals, up to 40 columns, 250 characters wide (the leaderboards are wide).
4. One :class:`lab.retrievers.base.Context` for every run of the notebook: cache folder ``LAB_CACHE_DIR`` (default
   ``.cache``; relative paths against the repo root, :mod:`lab.core.paths`), ``seed``, ``progress``.
5. The dataset: ``dataset`` (a BEIR folder, relative to the repo root) loaded with
   :func:`lab.experiment.run.load`, and one summary printed: repo root, dataset size and splits, the MLflow store
   (:func:`lab.tracking.store.tracking_uri` of ``tracking_root``, which creates a folder store) and experiment.
   ``dataset=None`` skips this step (notebook 01 loads its source itself: a folder may be ingested first).

The seed is passed on, not applied: setup seeds no global random state (``random``, numpy, torch); as before, it
reaches the runs as ``ctx.seed`` and the notebook passes its ``seed`` on to the calls that take one.
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from lab.core.errors import ConfigError
from lab.core.paths import repo_root, resolve_repo_path
from lab.experiment.run import load
from lab.retrievers.base import Context
from lab.tracking.store import tracking_uri

#: Environment defaults for a notebook kernel (see the module docstring, step 1).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
               "TOKENIZERS_PARALLELISM": "false"}
#: pandas display options the notebooks' tables are laid out for.
PANDAS_OPTIONS = {"display.float_format": "{:.4f}".format, "display.max_columns": 40, "display.width": 250}


class NotebookSetup(NamedTuple):
    """What :func:`setup` returns; unpack it as ``ctx, ds = setup(...)``."""

    ctx: object  # lab.retrievers.base.Context
    ds: object | None  # lab.data.beir.Dataset, or None when setup was given no dataset


def _check(dataset, seed, progress, tracking_root, experiment) -> None:
    if dataset is not None and not isinstance(dataset, (str, Path)):
        raise ConfigError(f"dataset={dataset!r}: give a BEIR dataset folder (a path, repo-relative or absolute) "
                          "or None")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"seed={seed!r}: give a non-negative integer (e.g. seed = 0)")
    if not isinstance(progress, bool):
        raise ConfigError(f"progress={progress!r}: give True or False")
    if not isinstance(tracking_root, (str, Path)) or not str(tracking_root):
        raise ConfigError(f"tracking_root={tracking_root!r}: give an MLflow store, a folder (repo-relative or "
                          "absolute) or a URI, e.g. 'mlruns'")
    if experiment is not None and (not isinstance(experiment, str) or not experiment):
        raise ConfigError(f"experiment={experiment!r}: give an MLflow experiment name (a non-empty string) or None")


def _inline_figures() -> bool:
    """``%matplotlib inline`` when running in IPython; True when it ran."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipykernel, a requirement
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.run_line_magic("matplotlib", "inline")
    return True


def summary(ds, tracking_root: str | Path = "mlruns", experiment: str | None = None) -> str:
    """The lines a notebook prints about where it runs: repo root, dataset size and splits, MLflow store and
    experiment."""
    return (f"repo:    {repo_root()}\ndataset: {ds.name} ({len(ds.corpus):,} documents; splits {sorted(ds.qrels)})\n"
            f"MLflow:  {tracking_uri(tracking_root)}, experiment {experiment!r}")


def setup(dataset: str | Path | None, *, seed: int = 0, progress: bool = True,
          tracking_root: str | Path = "mlruns", experiment: str | None = None) -> NotebookSetup:
    """Prepare a notebook kernel and return ``(ctx, ds)``: see the module docstring for each step.

    ``dataset``: a BEIR folder (repo-relative or absolute) to load, or None to load nothing (``ds`` is then None
    and nothing is printed). ``seed`` (a non-negative int) and ``progress`` go into the Context; ``tracking_root``
    and ``experiment`` are only printed (the notebook logs with them). Raises ConfigError naming the parameter
    for a value of the wrong kind, and the loader's DataError for a folder that is not a dataset.
    """
    _check(dataset, seed, progress, tracking_root, experiment)
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    _inline_figures()

    for key, value in PANDAS_OPTIONS.items():
        pd.set_option(key, value)
    ctx = Context(cache_dir=resolve_repo_path(os.environ.get("LAB_CACHE_DIR", ".cache")), seed=int(seed),
                  progress=progress)
    ds = None
    if dataset is not None:
        ds = load(resolve_repo_path(dataset), progress=progress)
        print(summary(ds, tracking_root, experiment))
    return NotebookSetup(ctx, ds)
