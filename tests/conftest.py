"""Shared test fixtures."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def blank_mlflow_root(tmp_path, pytestconfig) -> Path:
    """A fresh tracking root: a copy of an empty MLflow DB made once per MLflow version (creating one runs the
    migrations, ~15 s here), cached under pytest's cache folder."""
    return blank_store(tmp_path, pytestconfig)


def blank_store(folder: Path, pytestconfig) -> Path:
    import mlflow

    from lab.tracking import client

    cache = pytestconfig.cache.mkdir(f"blank-mlflow-{mlflow.__version__}")
    if not (cache / "mlflow.db").exists():
        tmp = cache / "making"
        shutil.rmtree(tmp, ignore_errors=True)
        client(tmp).search_experiments()
        (tmp / "mlflow.db").replace(cache / "mlflow.db")
    root = folder / "mlruns"
    root.mkdir(parents=True)
    shutil.copy(cache / "mlflow.db", root / "mlflow.db")
    return root
