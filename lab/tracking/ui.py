"""Links into the MLflow UI that land on an experiment's runs table, showing the columns that matter.

Conventions (MLflow 3 UI, checked against the UI bundled with the pinned mlflow)
- Runs view: the UI routes an experiment's runs table at ``#/experiments/<id>/runs``. The bare
  ``#/experiments/<id>`` opens the experiment's default tab, which for an experiment without a kind is the GenAI
  overview ("No data available" for retrieval runs); :func:`lab.tracking.store.get_or_create_experiment` tags every
  experiment as model training (``mlflow.experimentKind``). The UI's sidebar switch (GenAI / Model training,
  remembered per browser, GenAI by default) takes precedence over that tag, so links also carry
  ``workflowType=machine_learning``, the URL parameter that selects "Model training".
- Columns: the runs table shows the columns of its view state. The UI's "share view" feature keeps a view state as
  the experiment tag ``mlflow.sharedViewState.<key>`` (a JSON object with ``selectedColumns`` and the search
  facets) and applies it when the link carries ``?viewStateShareKey=<key>``. raglab writes the key
  :data:`VIEW_KEY`: param columns (``strategy`` and whatever a sweep varies) and metric columns (``ndcg_at_10``,
  the sweep's metric, median latency), metrics first (``columnOrder``). Column ids are ``params.`name``` and
  ``metrics.`name``` (MLflow names:
  ``ndcg@10`` is ``ndcg_at_10``, see :func:`lab.tracking.store.mlflow_metric_name`).
- Child runs: on a browser's first visit to an experiment, the UI expands the parent of every run tagged
  ``mlflow.runType`` = ``evaluation``; sweep child runs carry that tag (each is an evaluation of one config), so
  they show under their sweep's run, expanded.
- Host and port default to what ``lab ui`` serves (127.0.0.1:5000): :func:`ui_command` is its ``mlflow ui``
  command line (one worker, run with :data:`UI_ENV`: no job runner, no telemetry).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from lab.core.errors import ConfigError
from lab.tracking.store import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    artifact_location,
    client,
    mlflow_metric_name,
    safe_key,
    tracking_uri,
)

#: Key of the view state raglab writes (the ``viewStateShareKey`` of the links it prints).
VIEW_KEY = "raglab"
#: Prefix of the experiment tag holding a shared view state (MLflow UI convention).
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: Run tag (and value) that makes the UI expand a run's parent on a first visit.
RUN_TYPE_TAG, RUN_TYPE_EVALUATION = "mlflow.runType", "evaluation"
#: URL parameter (and value) selecting the UI's "Model training" mode.
WORKFLOW_PARAM = "workflowType=machine_learning"
#: Metric columns every raglab view shows (lab metric names, mapped to MLflow names when written).
DEFAULT_METRICS = ("ndcg@10", "latency_p50_ms")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 5000
#: Environment of the MLflow UI server: no job runner (huey consumer) and no telemetry, so `mlflow ui` is one
#: server process that only serves the store.
UI_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


def column_id(kind: str, name: str) -> str:
    """The runs table's id of a column: ``kind`` is "params", "metrics", "tags" or "attributes"."""
    if kind not in ("params", "metrics", "tags", "attributes"):
        raise ValueError(f"column kind {kind!r}: use params, metrics, tags or attributes")
    return f"{kind}.`{name}`"


def view_columns(params=(), metrics=DEFAULT_METRICS) -> list[str]:
    """Column ids for ``params`` (logged param keys, e.g. "strategy", "params.alpha") then ``metrics`` (lab
    names such as "ndcg@10", mapped to MLflow's), duplicates removed, order kept."""
    cols = [column_id("params", safe_key(p)) for p in params if p]
    cols += [column_id("metrics", mlflow_metric_name(m)) for m in metrics if m]
    return list(dict.fromkeys(cols))


def set_runs_view(cl, experiment_id: str, params=(), metrics=DEFAULT_METRICS) -> list[str]:
    """Write (or widen) the experiment's :data:`VIEW_KEY` view state so its runs table shows these columns.

    Columns already in the view are kept (two sweeps into one experiment show the union), new ones appended;
    metric columns come first. Returns the view's columns."""
    tag = VIEW_TAG_PREFIX + VIEW_KEY
    old = cl.get_experiment(experiment_id).tags.get(tag)
    try:
        state = json.loads(old) if old else {}
    except ValueError:
        state = {}
    cols = list(dict.fromkeys([*state.get("selectedColumns", []), *view_columns(params, metrics)]))
    state["selectedColumns"] = cols
    state["columnOrder"] = [c for c in cols if c.startswith("metrics.")] + [c for c in cols
                                                                            if not c.startswith("metrics.")]
    cl.set_experiment_tag(experiment_id, tag, json.dumps(state, separators=(",", ":")))
    return cols


def base_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """``http://host:port`` (an IPv6 host in brackets)."""
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def runs_url(experiment_id: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, cl=None) -> str:
    """URL of the experiment's runs table in "Model training" mode; with the :data:`VIEW_KEY` view state when the
    experiment has one (checked through ``cl`` when given, else assumed)."""
    url = f"{base_url(host, port)}/#/experiments/{experiment_id}/runs?{WORKFLOW_PARAM}"
    has_view = True
    if cl is not None:
        has_view = (VIEW_TAG_PREFIX + VIEW_KEY) in (cl.get_experiment(experiment_id).tags or {})
    return url + (f"&viewStateShareKey={VIEW_KEY}" if has_view else "")


def ui_command(tracking_root="mlruns", host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[str]:
    """The `mlflow ui` command line for the store at ``tracking_root`` (one worker; run it with :data:`UI_ENV`)."""
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "ui", "--backend-store-uri", tracking_uri(tracking_root)]
    art = artifact_location(tracking_root)
    if art:
        cmd += ["--default-artifact-root", art]
    return cmd + ["--host", host, "--port", str(port), "--workers", "1"]


def ui_links(tracking_root="mlruns", host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
             experiment: str | None = None) -> list[str]:
    """Lines naming the runs view of each experiment in the store (``experiment`` only, when given; the one with
    the latest run first). Experiments without the model-training tag get it (see lab.tracking.store)."""
    cl = client(tracking_root)
    exps = [e for e in cl.search_experiments() if e.name != "Default" or experiment == "Default"]
    if experiment is not None:
        exps = [e for e in exps if e.name == experiment]
        if not exps:
            names = ", ".join(sorted(e.name for e in cl.search_experiments())) or "none"
            raise ConfigError(f"--experiment {experiment!r}: no such experiment in the store (it has: {names})")
    latest = {}
    for e in exps:
        if EXPERIMENT_KIND_TAG not in (e.tags or {}):
            cl.set_experiment_tag(e.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        runs = cl.search_runs([e.experiment_id], max_results=1, order_by=["attributes.start_time DESC"])
        latest[e.experiment_id] = runs[0].info.start_time if runs else -1
    exps.sort(key=lambda e: -latest[e.experiment_id])
    return [f"  {e.name}: {runs_url(e.experiment_id, host, port, cl)}" for e in exps]
