"""Records of scheduled sweeps and the trends they make: each config's headline metric over the scheduled sweeps of
an experiment, marking where the dataset or a model changed (read by lab report, notebook 03 and
lab.workbench.schedule).

Conventions
- A scheduled sweep is a sweep parent run tagged ``raglab.scheduled=true``, ``raglab.schedule=<name>`` and
  ``raglab.sequence=<n>`` (1, 2, ... per schedule and experiment), holding the artifact ``schedule.json``: per config
  its config hash, label, the run that stands for it (run now or reused), whether it was reused, why it ran again,
  and the dataset fingerprints and model weights that run recorded (see lab.workbench.resume). A parent without the
  artifact (the sweep stopped early) is left out.
- ``dataset_changed`` / ``model_changed`` of a row compare that config's run with its row in the previous scheduled
  sweep of the same schedule: other dataset fingerprints, or other model weights (sha256) / identities.
"""
from __future__ import annotations

import json
import math
import tempfile

import pandas as pd

from lab.tracking.store import artifact_file, client, mlflow_metric_name

TAG_SCHEDULED = "raglab.scheduled"
TAG_SCHEDULE = "raglab.schedule"
TAG_SEQUENCE = "raglab.sequence"
RECORD_ARTIFACT = "schedule.json"


def scheduled_parents(cl, experiment_id: str, schedule: str | None = None) -> list:
    """Parent runs of the scheduled sweeps of an experiment (of one schedule when named), by sequence."""
    runs, token = [], None
    while True:
        page = cl.search_runs([experiment_id], filter_string=f"tags.`{TAG_SCHEDULED}` = 'true'", max_results=1000,
                              page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    runs = [r for r in runs if schedule is None or r.data.tags.get(TAG_SCHEDULE) == schedule]
    return sorted(runs, key=lambda r: (int(r.data.tags.get(TAG_SEQUENCE, "0") or 0), r.info.start_time))


def read_record(cl, parent_run_id: str) -> dict | None:
    """The ``schedule.json`` of a scheduled sweep's parent run (None when it has none: the sweep stopped early)."""
    with tempfile.TemporaryDirectory(prefix="lab-schedule-") as tmp:
        try:
            return json.loads(artifact_file(parent_run_id, RECORD_ARTIFACT, tmp, cl=cl).read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a parent without the record is skipped by the callers
            return None


def schedule_history(experiment: str, tracking_root="mlruns", metric: str = "ndcg@10", schedule: str | None = None,
                     cl=None) -> pd.DataFrame:
    """One row per (scheduled sweep, config) of ``experiment``: sequence, schedule, time, config_hash, label,
    run_id, reused, ``metric`` and its CI bounds, dataset_changed, model_changed (against that config's row of the
    sweep before), reason. Empty (with those columns) when the experiment has no scheduled sweep."""
    cols = ["sequence", "schedule", "time", "config_hash", "label", "run_id", "reused", metric, f"{metric}_ci_low",
            f"{metric}_ci_high", "dataset_changed", "model_changed", "reason"]
    cl = cl or client(tracking_root)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame(columns=cols)
    rows, last = [], {}
    metrics_of: dict[str, dict] = {}
    for parent in scheduled_parents(cl, exp.experiment_id, schedule):
        rec = read_record(cl, parent.info.run_id)
        if not rec:
            continue
        for c in rec.get("configs", []):
            rid = c.get("run_id")
            if not rid:
                continue
            if rid not in metrics_of:
                metrics_of[rid] = cl.get_run(rid).data.metrics
            m = metrics_of[rid]
            key = (rec.get("schedule"), c["config_hash"])
            before = last.get(key)
            rows.append({
                "sequence": int(rec.get("sequence") or 0), "schedule": rec.get("schedule"),
                "time": pd.to_datetime(parent.info.start_time, unit="ms"), "config_hash": c["config_hash"],
                "label": c["label"], "run_id": rid, "reused": bool(c.get("reused")),
                metric: m.get(mlflow_metric_name(metric), math.nan),
                f"{metric}_ci_low": m.get(mlflow_metric_name(f"{metric}_ci_low"), math.nan),
                f"{metric}_ci_high": m.get(mlflow_metric_name(f"{metric}_ci_high"), math.nan),
                "dataset_changed": bool(before is not None and before.get("datasets") != c.get("datasets")),
                "model_changed": bool(before is not None and before.get("models") != c.get("models")),
                "reason": c.get("reason") or ""})
            last[key] = c
    return pd.DataFrame(rows, columns=cols)


def latest_scheduled_run_ids(history: pd.DataFrame) -> tuple[list[str], int]:
    """The run ids of the latest scheduled sweep in a :func:`schedule_history` table, and its sequence."""
    seq = int(history["sequence"].max())
    return list(history.loc[history["sequence"] == seq, "run_id"]), seq
