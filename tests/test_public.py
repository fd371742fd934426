"""The public face: ``from lab import ...`` gives the calls a notebook needs, every layer names its face in
``__all__``, every listed name resolves, and ``import lab`` stays cheap (no numpy, pandas or MLflow)."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from test_layers import LAYERS

import lab


def test_top_level_gives_the_five_calls():
    from lab import evaluate, leaderboard, load_dataset, run_experiment, run_sweep

    assert [f.__module__ for f in (load_dataset, evaluate, run_experiment, run_sweep, leaderboard)] == [
        "lab.data.beir", "lab.metrics.ranking", "lab.experiment.run", "lab.workbench.sweep.run",
        "lab.analysis.leaderboard"]
    assert {"load_dataset", "evaluate", "run_experiment", "run_sweep", "leaderboard"} <= set(lab.__all__)


@pytest.mark.parametrize("package", ["lab", *(f"lab.{layer}" for layer in LAYERS)])
def test_every_name_in_all_resolves(package):
    module = importlib.import_module(package)
    assert module.__all__, f"{package} names no public face in __all__"
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lab.nope  # noqa: B018 - the look-up is the test


def test_import_lab_loads_no_heavy_package():
    code = ("import sys, lab, lab.analysis, lab.workbench; "
            "print(sorted(m for m in ('numpy', 'pandas', 'mlflow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
