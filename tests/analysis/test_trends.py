"""lab.analysis.trends: the history of scheduled sweeps read back from a real MLflow store (parents tagged and
holding schedule.json, child runs with their metrics), with dataset and model changes marked per config."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lab.analysis.trends import (
    RECORD_ARTIFACT,
    TAG_SCHEDULE,
    TAG_SCHEDULED,
    TAG_SEQUENCE,
    latest_scheduled_run_ids,
    schedule_history,
    scheduled_parents,
)
from lab.tracking.store import client, get_or_create_experiment, mlflow_metric_name


def _child(cl, exp_id: str, ndcg: float) -> str:
    run_id = cl.create_run(exp_id).info.run_id
    cl.log_metric(run_id, mlflow_metric_name("ndcg@10"), ndcg)
    cl.log_metric(run_id, mlflow_metric_name("ndcg@10_ci_low"), ndcg - 0.05)
    cl.set_terminated(run_id, "FINISHED")
    return run_id


def _parent(cl, exp_id: str, schedule: str, sequence: int, configs: list[dict] | None) -> str:
    """A scheduled sweep's parent run; ``configs`` None: no schedule.json (a sweep that stopped early)."""
    tags = {TAG_SCHEDULED: "true", TAG_SCHEDULE: schedule, TAG_SEQUENCE: str(sequence)}
    run_id = cl.create_run(exp_id, tags=tags).info.run_id
    if configs is not None:
        cl.log_text(run_id, json.dumps({"schedule": schedule, "sequence": sequence, "configs": configs}),
                    RECORD_ARTIFACT)
    cl.set_terminated(run_id, "FINISHED")
    return run_id


@pytest.fixture
def store(blank_tracking_root):
    """Schedule "nightly": sweep 1 (bm25, dense), a sweep 2 that stopped early, sweep 3 (bm25 on a changed
    dataset, dense reused with a new model); schedule "weekly": one sweep; and an unscheduled parent."""
    cl = client(blank_tracking_root)
    exp = get_or_create_experiment("sched", blank_tracking_root, cl)
    bm25_1, dense_1, bm25_3, weekly = (_child(cl, exp, v) for v in (0.60, 0.55, 0.62, 0.40))
    _parent(cl, exp, "nightly", 1, [
        {"config_hash": "h-bm25", "label": "bm25", "run_id": bm25_1, "datasets": {"d": "f1"}, "models": {}},
        {"config_hash": "h-dense", "label": "dense", "run_id": dense_1, "datasets": {"d": "f1"}, "models": {"m": "w1"}},
        {"config_hash": "h-none", "label": "never ran", "run_id": None}])
    _parent(cl, exp, "nightly", 2, None)
    _parent(cl, exp, "nightly", 3, [
        {"config_hash": "h-bm25", "label": "bm25", "run_id": bm25_3, "datasets": {"d": "f2"}, "models": {},
         "reason": "dataset changed"},
        {"config_hash": "h-dense", "label": "dense", "run_id": dense_1, "reused": True, "datasets": {"d": "f1"},
         "models": {"m": "w2"}}])
    _parent(cl, exp, "weekly", 1, [{"config_hash": "h-bm25", "label": "bm25", "run_id": weekly}])
    cl.create_run(exp, tags={"raglab.sweep": "x"})  # a parent that is not scheduled
    return blank_tracking_root, {"bm25_1": bm25_1, "dense_1": dense_1, "bm25_3": bm25_3, "weekly": weekly}


def test_scheduled_parents_are_the_tagged_runs_by_sequence(store):
    root, _ = store
    cl = client(root)
    exp = cl.get_experiment_by_name("sched").experiment_id
    assert [(r.data.tags[TAG_SCHEDULE], r.data.tags[TAG_SEQUENCE]) for r in scheduled_parents(cl, exp, "nightly")] == [
        ("nightly", "1"), ("nightly", "2"), ("nightly", "3")]
    assert len(scheduled_parents(cl, exp)) == 4


def test_history_has_a_row_per_sweep_and_config_with_changes_against_the_sweep_before(store):
    root, runs = store
    h = schedule_history("sched", tracking_root=root, schedule="nightly")
    assert list(zip(h["sequence"], h["label"], h["run_id"], strict=True)) == [
        (1, "bm25", runs["bm25_1"]), (1, "dense", runs["dense_1"]), (3, "bm25", runs["bm25_3"]),
        (3, "dense", runs["dense_1"])]  # sweep 2 has no record; a config without a run is left out
    assert h["ndcg@10"].tolist() == pytest.approx([0.60, 0.55, 0.62, 0.55])
    assert h["ndcg@10_ci_low"].tolist() == pytest.approx([0.55, 0.50, 0.57, 0.50])
    assert h["ndcg@10_ci_high"].isna().all()  # not logged: NaN, not an error
    assert h["dataset_changed"].tolist() == [False, False, True, False]
    assert h["model_changed"].tolist() == [False, False, False, True]
    assert h["reused"].tolist() == [False, False, False, True]
    assert h["reason"].tolist() == ["", "", "dataset changed", ""]


def test_schedules_are_kept_apart_and_an_unknown_experiment_gives_an_empty_table(store):
    root, runs = store
    both = schedule_history("sched", tracking_root=root)
    assert set(both["schedule"]) == {"nightly", "weekly"} and len(both) == 5
    weekly = both[both["schedule"] == "weekly"]
    assert weekly["run_id"].tolist() == [runs["weekly"]] and not weekly["dataset_changed"].any()
    empty = schedule_history("no-such-experiment", tracking_root=root, metric="recall@10")
    assert empty.empty and "recall@10_ci_low" in empty.columns


def test_latest_scheduled_run_ids_are_those_of_the_highest_sequence(store):
    root, runs = store
    ids, seq = latest_scheduled_run_ids(schedule_history("sched", tracking_root=root, schedule="nightly"))
    assert seq == 3 and ids == [runs["bm25_3"], runs["dense_1"]]
    table = pd.DataFrame({"sequence": [1, 2, 2], "run_id": ["a", "b", "c"]})
    assert latest_scheduled_run_ids(table) == (["b", "c"], 2)
