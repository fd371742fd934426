"""An experiment's :class:`lab.experiment.run.Result` logged as an MLflow run (the store: :mod:`lab.tracking.store`).

- :func:`log_result` with ``run_id=None`` creates a run (:func:`lab.tracking.lifecycle.tracked_run`) and ends it
  FINISHED; with a ``run_id`` it only logs into that run and leaves its status to its owner (the sweep).
- What is logged: params (the config, ``resolved.*``, ``retriever.*``), metrics (means, CI bounds, latency,
  index/search seconds), tags (dataset fingerprint, config hash, git commit, versions, model identities, metrics
  version, seed) and the artifacts per_query.parquet, run.trec, result.json (:func:`write_result_files`).
- A result whose logging fails is saved to ``results/unlogged/`` first (:func:`save_unlogged`), and the
  :class:`lab.core.errors.TrackingError` says where: a computed result is never lost.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from lab.tracking.store import (
    PER_QUERY_ARTIFACT,
    RESULT_ARTIFACT,
    RUN_ARTIFACT,
    TAG_MODELS,
    client,
    environment_tags,
    log_metrics,
    log_params,
    model_identities,
    set_tags,
)


def result_metrics(result, ci: bool = True, seed: int = 0, n_resamples: int = 1000) -> dict[str, float]:
    """Flat metrics of a Result, names unmapped: means, ``_ci_low``/``_ci_high`` (percentile bootstrap over
    queries, seeded), latency figures, index/search seconds, n_queries, n_excluded."""
    out = {str(k): float(v) for k, v in result.evaluation.means.items()}
    per_query = result.evaluation.per_query
    if ci and len(per_query):
        from lab.metrics import bootstrap_ci

        for row in bootstrap_ci(per_query, n_resamples=n_resamples, seed=seed).itertuples(index=False):
            out[f"{row.metric}_ci_low"] = float(row.ci_low)
            out[f"{row.metric}_ci_high"] = float(row.ci_high)
    out.update({str(k): float(v) for k, v in result.latency.items()})
    out["index_seconds"] = float(result.index_seconds)
    out["search_seconds"] = float(result.search_seconds)
    out.update({str(k): float(v) for k, v in getattr(result, "cost", {}).items()})
    out["n_queries"] = float(result.evaluation.n_queries)
    out["n_excluded"] = float(len(result.evaluation.excluded))
    return out


def _result_tags(result, seed: int) -> dict[str, str]:
    info = result.info or {}
    describe = info.get("retriever") or {}
    tags = {
        "dataset": info.get("dataset", result.config.get("dataset")),
        "dataset_fingerprint": info.get("dataset_fingerprint"),
        "strategy": result.config.get("strategy"),
        "split": info.get("split", result.config.get("split")),
        "relevance_mode": info.get("relevance_mode"),
        "seed": seed,
        **environment_tags(),
    }
    tags.update({f"model.{k}": v for k, v in model_identities(describe).items()})
    from lab.models.weights import default_memo, weights_record

    tags[TAG_MODELS] = json.dumps(weights_record(describe, default_memo()), sort_keys=True, separators=(",", ":"),
                                  ensure_ascii=False)
    return tags


def write_result_files(result, folder: Path, seed: int = 0) -> list[Path]:
    """per_query.parquet, run.trec and result.json of a Result in ``folder``, each written atomically
    (lab.core.atomic: no 0-byte or half file is left when the disk is full)."""
    import lab
    from lab.core.atomic import atomic_path, write_text_atomic
    from lab.data.trec import write_trec_run

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    pq = result.evaluation.per_query.copy()
    pq.index = pq.index.astype(str)
    pq.index.name = "query_id"
    pq.columns = [str(c) for c in pq.columns]
    with atomic_path(folder / PER_QUERY_ARTIFACT) as tmp:
        pq.to_parquet(tmp)
    paths.append(folder / PER_QUERY_ARTIFACT)
    paths.append(Path(write_trec_run(result.run, folder / RUN_ARTIFACT, tag=str(result.config.get("strategy", "lab")))))
    doc = {
        "config": result.config,
        "info": result.info,
        "summary": result.summary(),
        "n_queries": result.evaluation.n_queries,
        "excluded": list(result.evaluation.excluded),
        "metrics_version": getattr(result.evaluation, "metrics_version", lab.METRICS_VERSION),
        "seed": seed,
    }
    write_text_atomic(folder / RESULT_ARTIFACT, json.dumps(doc, indent=1, default=str))
    paths.append(folder / RESULT_ARTIFACT)
    return paths


def log_result(result, run_id: str | None = None, experiment: str | None = None, root: str | Path = "mlruns",
               ci: bool = True, seed: int = 0, n_resamples: int = 1000, run_name: str | None = None) -> str:
    """Log a :class:`lab.experiment.run.Result` into MLflow and return the run id.

    run_id given: log into that run (a sweep's child run) and leave its status alone. run_id None: create a run
    in ``experiment`` (default "raglab"), log, and end it FINISHED (FAILED with tag ``error`` if logging raised;
    :func:`lab.tracking.lifecycle.tracked_run`).
    Logged: params (config, ``retriever.*`` description; see the module docstring for conflicts), metrics
    (means, CI bounds, latency, index/search seconds), tags (dataset_fingerprint, config_hash, git_commit,
    versions, model identities, metrics_version, seed), artifacts per_query.parquet, run.trec, result.json.
    """
    from lab.tracking.lifecycle import tracked_run
    from lab.core.flat import config_hash, flatten

    def log_into(run_id: str) -> None:
        describe = (result.info or {}).get("retriever") or {}
        params = dict(flatten(result.config))
        params.update({f"retriever.{k}": v for k, v in flatten(describe).items()})
        log_params(run_id, params, cl=cl)
        log_metrics(run_id, result_metrics(result, ci=ci, seed=seed, n_resamples=n_resamples), cl=cl)
        tags = _result_tags(result, seed)
        if "config_hash" not in cl.get_run(run_id).data.tags:
            tags["config_hash"] = config_hash(result.config)
        set_tags(run_id, tags, cl=cl)
        with tempfile.TemporaryDirectory(prefix="lab-result-") as tmp:
            for path in write_result_files(result, Path(tmp), seed):
                cl.log_artifact(run_id, str(path))

    cl = None
    try:
        cl = client(root)
        if run_id is None:  # our own run: created here, ended FINISHED, or FAILED (tag error) when logging raises
            strategy = result.config.get("strategy", "run")
            with tracked_run(experiment or "raglab", root=root, cl=cl,
                             run_name=run_name or f"{strategy} on {result.info.get('dataset', '')}".strip()) as run:
                run_id = run.run_id
                log_into(run_id)
        else:
            log_into(run_id)
    except BaseException as exc:
        if not isinstance(exc, Exception):
            raise
        from lab.core.errors import TrackingError

        try:
            folder = save_unlogged(result, seed, experiment or "raglab")
        except OSError as saving:
            from lab.tracking.store import storage_fault

            raise TrackingError(
                f"logging to MLflow (tracking root {root}) failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}; saving the result locally failed too: "
                f"{storage_fault(saving) or saving}") from None
        raise TrackingError(f"logging to MLflow (tracking root {root}) failed: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}; the result was saved to {folder} "
                            f"({RESULT_ARTIFACT}, {PER_QUERY_ARTIFACT}, {RUN_ARTIFACT})") from exc
    return run_id


def save_unlogged(result, seed: int = 0, experiment: str = "raglab", folder: str | Path | None = None) -> Path:
    """Write a result that could not be logged to ``results/unlogged/<experiment>/<time>-<strategy>-<pid>/``
    (or ``folder``): result.json, per_query.parquet and run.trec, as :func:`write_result_files` writes them."""
    import time

    if folder is None:
        from lab.core.paths import results_dir

        strategy = re.sub(r"[^\w.-]", "_", str(result.config.get("strategy", "run")))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = results_dir("unlogged", re.sub(r"[^\w.-]", "_", experiment), create=True) / \
            f"{stamp}-{strategy}-{os.getpid()}"
    folder = Path(folder)
    made = not folder.exists()
    try:
        write_result_files(result, folder, seed)
    except OSError:
        if made:  # leave no half-saved result behind (a disk that filled up)
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
