"""Where a report's runs come from: the finished runs of an MLflow experiment, or result files grouped by name."""
from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lab.analysis.compare import CompareWarning, experiment_leaderboard
from lab.analysis.gate import attach_per_query, looks_like_trec, read_result
from lab.core.errors import ConfigError, DataError
from lab.core.paths import resolve_repo_path
from lab.data.beir import load_dataset
from lab.data.trec import read_trec_run
from lab.tracking.store import (
    RESULT_ARTIFACT,
    RUN_ARTIFACT,
    artifact_file,
    client,
    load_per_query,
    metric_name_from_mlflow,
)

#: Metrics of the report when none are named: the README's headline columns.

#: Suffixes stripped (longest first) to group result files into runs.
FILE_SUFFIXES = (".per_query.parquet", ".per_query.csv", ".per_query.tsv", ".per_query.json", ".trec.gz", ".json",
                 ".trec", ".run", ".parquet", ".csv", ".tsv", ".txt")


@dataclass
class RunData:
    """One run of the report. ``figures``: flat numbers (metric means, ``<metric>_ci_low/high``, latency_p50_ms,
    ...); ``per_query``: queries x metrics (None when unknown); ``load_run``: returns the retrieved lists (Run)."""

    label: str
    figures: dict[str, float]
    per_query: pd.DataFrame | None = None
    source: str = ""
    run_id: str | None = None
    strategy: str = ""
    dataset: str = ""
    dataset_path: str | None = None
    split: str = "test"
    metrics_version: str | None = None
    load_run: Callable[[], object] | None = None


def existing_dataset(path: str | None) -> str | None:
    """``path`` resolved against the repository root when it is a dataset folder, else None."""
    if not path:
        return None

    try:
        p = resolve_repo_path(path)
    except ConfigError:
        p = Path(path)
    return str(p) if (p / "queries.jsonl").exists() or (p / "queries.jsonl.gz").exists() else None


def _logged_dataset_path(run_id: str, tracking_root, cl) -> str | None:
    """``info.dataset_path`` of a run's result.json artifact when it is a dataset folder here, else None."""
    try:
        with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
            doc = json.loads(artifact_file(run_id, RESULT_ARTIFACT, tmp, tracking_root, cl).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - no artifact: the caller notes the missing dataset
        return None
    return existing_dataset((doc.get("info") or {}).get("dataset_path"))


def runs_from_mlflow(experiment: str, tracking_root="mlruns", metric: str = "ndcg@10", parent_run_id: str | None = None,
                     notes: list[str] | None = None, run_ids: Sequence[str] | None = None,
                     trust: list | None = None) -> list[RunData]:
    """The finished runs of ``experiment`` that logged ``metric`` (labels as lab.analysis.compare names them); only
    ``run_ids`` when given. ``trust``: a list the leaderboard's trust object (lab.analysis.trust) is appended to."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        board = experiment_leaderboard(experiment, metric=metric, tracking_root=tracking_root,
                                       parent_run_id=parent_run_id,
                                       n_resamples=200, run_ids=run_ids)
    if notes is not None:
        notes.extend(board.attrs.get("warnings", []))
    if trust is not None and board.attrs.get("trust"):
        trust.append(board.attrs["trust"])
    cl = client(tracking_root)
    out = []
    for row in board.to_dict("records"):
        rid, label = row["run_id"], str(row["label"])
        r = cl.get_run(rid)
        figures = {metric_name_from_mlflow(k): float(v) for k, v in r.data.metrics.items()}
        try:
            pq = load_per_query(row["run_id"], tracking_root, cl)
        except Exception as exc:  # noqa: BLE001 - a run without the artifact is shown without per-query parts
            pq = None
            if notes is not None:
                notes.append(f"run {rid[:8]} ({label}): no per-query table ({type(exc).__name__})")

        def load(run_id=row["run_id"]):
            with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
                return read_trec_run(artifact_file(run_id, RUN_ARTIFACT, tmp, tracking_root, cl))

        params = r.data.params
        ds_path = existing_dataset(params.get("dataset")) or _logged_dataset_path(rid, tracking_root, cl)
        out.append(RunData(
            label=label, figures=figures, per_query=pq, source=f"mlflow run {rid}",
            run_id=row["run_id"], strategy=str(row["strategy"]), dataset=str(row["dataset"]),
            dataset_path=ds_path, split=params.get("split", "test"),
            metrics_version=str(row["metrics_version"]) or None, load_run=load))
    return out


def file_group(path: str | Path) -> str:
    """The run a result file belongs to: its name without the suffixes of :data:`FILE_SUFFIXES`
    ("bm25.per_query.csv" -> "bm25")."""
    name = Path(path).name
    for suffix in FILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def runs_from_files(paths: Sequence[str | Path], qrels=None, dataset: str | None = None, split: str = "test",
                    metrics: Sequence[str] | None = None, notes: list[str] | None = None) -> list[RunData]:
    """Runs from result files, grouped by :func:`file_group`. A TREC run is read for the worst queries and, when
    its group has no per-query table, evaluated against ``qrels`` (a path) or the split's qrels of ``dataset``."""
    groups: dict[str, list[Path]] = {}
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise DataError(p, "no such file")
        groups.setdefault(file_group(p), []).append(p)
    out = []
    for label, files in groups.items():
        summary, table, trec = None, None, None
        for p in files:
            if p.suffix not in (".json", ".csv", ".tsv", ".parquet") and looks_like_trec(p):
                trec = p
                continue
            res = read_result(p, companion=False)
            if res.kind == "summary":
                summary = res
            else:
                table = res
        if summary is not None and table is not None:
            summary = attach_per_query(summary, table.path)
        res = summary or table
        meta = res.meta if res is not None else {}
        ds_path = existing_dataset(dataset) or existing_dataset(meta.get("dataset_path"))
        run_split = split if dataset else str(meta.get("split") or split)
        per_query = res.per_query if res is not None else None
        figures = dict(res.figures) if res is not None else {}
        version = res.metrics_version if res is not None else None
        load = None
        if trec is not None:
            def load(t=trec):
                return read_trec_run(t)
            if per_query is None:
                qr = qrels
                if qr is None and ds_path:
                    qr = load_dataset(ds_path, splits=[run_split], progress=False).split(run_split)[1]
                if qr is None:
                    raise DataError(trec, "is a TREC run without a per-query table: pass --qrels or --dataset to "
                                    "evaluate it")
                ev = read_result(trec, qrels=qr, metrics=metrics)
                per_query, version = ev.per_query, ev.metrics_version
                figures = {**ev.figures, **figures}
        if per_query is None and not figures:
            raise DataError(files[0], "nothing to report in this file")
        if per_query is None and notes is not None:
            notes.append(f"{label}: means only (no per-query table): no CI, test or distribution")
        out.append(RunData(label=label, figures=figures, per_query=per_query,
                           source=", ".join(str(f) for f in files),
                           strategy=str((meta.get("config") or {}).get("strategy", "")) if meta else "",
                           dataset=str(meta.get("dataset", "")) if meta else "", dataset_path=ds_path,
                           split=run_split, metrics_version=version, load_run=load))
    return out


