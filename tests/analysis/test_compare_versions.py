"""Metrics versions: every result records lab.METRICS_VERSION, and `lab compare` warns (stderr and a flag column in
the table) when the runs compared carry different versions or none. Real BM25 runs on ORD-QA (20 queries)."""
from __future__ import annotations

import json
import warnings

import pytest
from conftest import blank_store

import lab
from lab.analysis.compare import (
    CompareWarning,
    experiment_leaderboard,
    format_leaderboard,
    metrics_version_warning,
)
from lab.tracking.results import log_result
from lab.tracking.store import RESULT_ARTIFACT, artifact_file, client


def test_warning_function():
    assert metrics_version_warning(["1", "1", "1"]) is None
    assert metrics_version_warning([]) is None
    mixed = metrics_version_warning(["1", "2", "2"])
    assert "different metrics_version" in mixed and "1: 1 run" in mixed and "2: 2 runs" in mixed
    missing = metrics_version_warning(["1", None, ""])
    assert "2 of 3 runs carry no metrics_version" in missing
    assert metrics_version_warning(["1", "1"], current="1") is None
    assert "this lab computes metrics version 2" in metrics_version_warning(["1", "1"], current="2")


@pytest.fixture(scope="module")
def store(tmp_path_factory, pytestconfig):
    from lab.core.paths import resolve_repo_path
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    root = blank_store(tmp_path_factory.mktemp("mv"), pytestconfig)
    res = {k1: run_experiment(resolve_repo_path("data/ord-qa"), "bm25", {"k1": k1}, max_queries=20,
                              metrics=["ndcg@10"], ctx=Context(progress=False)) for k1 in (0.9, 1.2, 1.5)}
    return root, res


def test_each_logged_result_records_the_metrics_version(store, tmp_path):
    root, res = store
    rid = log_result(res[0.9], experiment="same", tracking_root=root, n_resamples=50)
    assert client(root).get_run(rid).data.tags["metrics_version"] == lab.METRICS_VERSION
    doc = json.loads(artifact_file(rid, RESULT_ARTIFACT, tmp_path, root).read_text())
    assert doc["metrics_version"] == lab.METRICS_VERSION


def test_compare_flags_other_and_missing_versions(store, capsys):
    from lab.cli.main import main

    root, res = store
    ids = [log_result(r, experiment="mixed", tracking_root=root, n_resamples=50) for r in res.values()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompareWarning)  # one version everywhere: no warning
        pass_through = experiment_leaderboard("mixed", tracking_root=root, n_resamples=100)
    assert pass_through.attrs["metrics_version_warning"] is None
    assert "metrics v" not in format_leaderboard(pass_through)

    cl = client(root)
    cl.set_tag(ids[1], "metrics_version", "0")  # logged under an older convention
    cl.delete_tag(ids[2], "metrics_version")  # logged by a tool that records none
    with pytest.warns(CompareWarning, match="different metrics_version"):
        df = experiment_leaderboard("mixed", tracking_root=root, n_resamples=100)
    note = df.attrs["metrics_version_warning"]
    assert "0: 1 run" in note and "1 of 3 runs carry no metrics_version" in note
    text = format_leaderboard(df)
    assert "metrics v" in text and f"warning: {note}" in text
    ref = df["metrics_version"].iloc[0]  # the best run's version is the reference
    for rid, version in zip(df["run_id"], df["metrics_version"], strict=False):
        row = next(ln for ln in text.splitlines() if rid[:8] in ln)
        assert (" !" in row) == (version != ref or not version), row

    assert main(["compare", "--experiment", "mixed", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert "warning: runs carry different metrics_version" in captured.err  # on stderr, not only in the table
    assert "metrics v" in captured.out
