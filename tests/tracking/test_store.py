"""lab.tracking.store: metric names, tracking URIs, figures and storage-fault messages on a real MLflow store."""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lab.tracking.store import (
    client,
    git_commit,
    log_figure,
    metric_name_from_mlflow,
    mlflow_metric_name,
    storage_fault,
    tracking_uri,
)


def test_metric_names_map_at_sign_one_way():
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_metric_name

    with pytest.raises(MlflowException):  # the reason for the mapping
        _validate_metric_name("ndcg@10")
    for name in ("ndcg@10", "recall@100", "mrr", "ndcg@10_ci_low", "latency_p50_ms"):
        mapped = mlflow_metric_name(name)
        _validate_metric_name(mapped)
        assert metric_name_from_mlflow(mapped) == name
    assert mlflow_metric_name("ndcg@10_ci_high") == "ndcg_at_10_ci_high"


def test_tracking_uri_and_roots(tmp_path):
    from lab.core.paths import repo_root

    assert tracking_uri(tmp_path / "s") == f"sqlite:///{tmp_path / 's' / 'mlflow.db'}"
    assert (tmp_path / "s").is_dir()
    assert tracking_uri("mlruns") == f"sqlite:///{repo_root() / 'mlruns' / 'mlflow.db'}"  # relative: repo root
    assert tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_log_figure(store):
    from matplotlib.figure import Figure

    from lab.tracking.store import get_or_create_experiment

    cl = client(store)
    run_id = cl.create_run(get_or_create_experiment("figs", store, cl)).info.run_id
    fig = Figure()
    fig.subplots().plot(np.arange(5), np.arange(5) ** 2)
    assert log_figure(fig, "curve", run_id, tracking_root=store) == "figures/curve.png"
    local = Path(cl.download_artifacts(run_id, "figures/curve.png", str(store.parent)))
    assert local.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------- concurrent stores, no loss


def test_storage_fault_names_the_fault():
    assert storage_fault(ValueError("x")) is None
    denied = PermissionError(errno.EACCES, "Permission denied", "/data/corpus.jsonl")  # not the store
    assert storage_fault(denied) == "/data/corpus.jsonl: permission denied; check the path and its permissions"
    assert "the store is read-only" in storage_fault(PermissionError(errno.EROFS, "x", "/s/mlflow.db"), "/s/mlflow.db")
    full = OSError(errno.ENOSPC, "No space left on device", "/x/result.json")
    assert storage_fault(full).startswith("/x/result.json: no space left on the device")
    try:
        try:
            raise sqlite3.DatabaseError("database disk image is malformed")
        except sqlite3.DatabaseError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert "corrupt (database disk image is malformed)" in storage_fault(outer, "/s/mlflow.db")


def test_git_commit_takes_no_lock_and_leaves_the_index_as_it_was(tmp_path):
    """A tracked file touched (same content, new mtime): a plain `git status` would refresh and rewrite the index
    under .git/index.lock; reading the commit must leave the user's index untouched."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    os.utime(tmp_path / "a.txt", ns=(10**18, 10**18))
    index = tmp_path / ".git" / "index"
    before = (index.stat().st_ino, index.stat().st_mtime_ns, index.read_bytes())
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit(str(tmp_path)) == head
    assert (index.stat().st_ino, index.stat().st_mtime_ns, index.read_bytes()) == before
