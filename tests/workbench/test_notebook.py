"""lab.workbench.notebook.setup: the one call the notebooks' setup cell makes (environment, inline figures, pandas
display, the Context, the dataset and its summary), and its errors. The notebooks run it in a real kernel in
test_notebooks.py; here each step is checked on its own."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lab.core.errors import ConfigError, DataError
from lab.retrievers.base import Context
from lab.workbench.notebook import OFFLINE_ENV, PANDAS_OPTIONS, NotebookSetup, setup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_pandas_options():
    """setup sets pandas display options globally; put them back for the other tests."""
    saved = {key: pd.get_option(key) for key in PANDAS_OPTIONS}
    yield
    for key, value in saved.items():
        pd.set_option(key, value)


@pytest.fixture
def bare_env(monkeypatch):
    """No offline variables and no LAB_CACHE_DIR: what setup sets must come from setup."""
    for key in [*OFFLINE_ENV, "LAB_CACHE_DIR"]:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_setup_loads_the_dataset_builds_the_context_and_prints_where_it_runs(tmp_path, bare_env, capsys):
    bare_env.setenv("TOKENIZERS_PARALLELISM", "true")  # set by the user: kept
    bare_env.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    bare_env.chdir(tmp_path)  # as in a kernel started anywhere: "data/ord-qa" is still the repo's
    store = tmp_path / "store"

    out = setup("data/ord-qa", seed=7, progress=False, tracking_root=str(store), experiment="e1")

    assert isinstance(out, NotebookSetup)
    ctx, ds = out
    assert ctx == Context(cache_dir=tmp_path / "cache", seed=7, progress=False)
    assert ds.name == "ord-qa" and len(ds.corpus) == 290 and Path(ds.path) == ROOT / "data" / "ord-qa"
    assert {k: os.environ[k] for k in OFFLINE_ENV} == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                                       "MLFLOW_DISABLE_TELEMETRY": "true",
                                                       "TOKENIZERS_PARALLELISM": "true"}
    assert pd.get_option("display.max_columns") == 40 and pd.get_option("display.width") == 250
    assert pd.get_option("display.float_format")(0.123456) == "0.1235"
    assert capsys.readouterr().out.splitlines() == [
        f"repo:    {ROOT}",
        "dataset: ord-qa (290 documents; splits ['test'])",
        f"MLflow:  sqlite:///{store}/mlflow.db, experiment 'e1'",
    ]
    assert store.is_dir()  # the folder store, created as tracking_uri does


def test_setup_without_a_dataset_loads_and_prints_nothing(bare_env, capsys):
    ctx, ds = setup(None)
    assert ds is None and capsys.readouterr().out == ""
    assert ctx == Context(cache_dir=ROOT / ".cache", seed=0, progress=True)  # LAB_CACHE_DIR unset: repo's .cache
    assert all(os.environ[k] == v for k, v in OFFLINE_ENV.items())


def test_relative_cache_dir_is_under_the_repo_root(tmp_path, bare_env):
    bare_env.setenv("LAB_CACHE_DIR", "some/cache")
    bare_env.chdir(tmp_path)
    ctx, _ = setup(None)
    assert ctx.cache_dir == ROOT / "some" / "cache"


def test_seed_goes_into_the_context_and_no_global_random_state_is_touched(bare_env):
    random.seed(123)
    np.random.seed(123)
    before = random.getstate(), np.random.get_state()[1].copy()
    ctx, _ = setup(None, seed=np.int64(5))  # Papermill injects ints; numpy ints are integers too
    assert ctx.seed == 5 and type(ctx.seed) is int
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


@pytest.mark.parametrize("kwargs, match", [
    ({"seed": -1}, r"seed=-1: give a non-negative integer"),
    ({"seed": True}, r"seed=True: give a non-negative integer"),
    ({"seed": "0"}, r"seed='0': give a non-negative integer"),
    ({"seed": 1.0}, r"seed=1.0: give a non-negative integer"),
    ({"progress": "yes"}, r"progress='yes': give True or False"),
    ({"tracking_root": None}, r"tracking_root=None: give an MLflow store"),
    ({"tracking_root": ""}, r"tracking_root='': give an MLflow store"),
    ({"experiment": ""}, r"experiment='': give an MLflow experiment name"),
    ({"dataset": 3}, r"dataset=3: give a BEIR dataset folder"),
])
def test_bad_parameters_are_named_before_anything_is_set(bare_env, capsys, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        setup(kwargs.pop("dataset", "data/ord-qa"), **kwargs)
    assert not any(k in os.environ for k in OFFLINE_ENV)  # nothing set on the way to the error
    assert capsys.readouterr().out == ""


def test_a_folder_that_is_not_a_dataset_names_the_folder(tmp_path, bare_env):
    with pytest.raises(DataError, match="dataset folder not found") as err:
        setup(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)


def test_figures_are_inline_in_ipython_and_untouched_outside():
    """In IPython, setup runs %matplotlib inline (a real IPython shell, in a subprocess); outside, no backend change."""
    code = ("import matplotlib; before = matplotlib.get_backend(); from lab.workbench.notebook import setup; "
            "setup(None); print('BACKEND', before, matplotlib.get_backend())")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "agg"}
    ipython = subprocess.run([sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", code], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=180)
    plain = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=180)
    ((_, before, after),) = [ln.split() for ln in ipython.stdout.splitlines() if ln.startswith("BACKEND")]
    assert before.lower() == "agg" and "inline" in after, ipython.stdout + ipython.stderr
    ((_, before, after),) = [ln.split() for ln in plain.stdout.splitlines() if ln.startswith("BACKEND")]
    assert before.lower() == after.lower() == "agg", plain.stdout + plain.stderr
