"""An experiment's :class:`lab.experiment.run.Result` logged as an MLflow run (the store: :mod:`lab.tracking.store`).

- :func:`log_result` with ``run_id=None`` creates a run (:func:`lab.tracking.lifecycle.tracked_run`) and ends it
  FINISHED; with a ``run_id`` it only logs into that run and leaves its status to its owner (the sweep).
- What is logged: params (the config, ``resolved.*``, ``retriever.*``), metrics (means, CI bounds, latency,
  index/search seconds), tags (dataset fingerprint, config hash, git commit, versions, model identities, metrics
  version, seed, and where the labels came from: ``labels.source``, ``labels.generator``, ``labels.judge``,
  ``labels.judge_check``, ``labels.judge_kappa`` from :mod:`lab.data.labels`) and the artifacts per_query.parquet,
  run.trec, result.json (:func:`write_result_files`); with held-out queries, metrics of the dev queries and the
  held-out per-query table beside them (:func:`log_result`).
- A result whose logging fails is saved under :func:`lab.tracking.faults.unlogged_root` first
  (:func:`save_unlogged`), and the :class:`lab.core.errors.TrackingError` names the cause in plain words and
  where the result went: a computed result is never lost. A run created here never stays RUNNING: its partial
  artifacts are removed (which also frees the room a full disk needs) and it ends FAILED with the cause.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import NoReturn
from urllib.parse import unquote, urlparse

import lab
from lab.core.atomic import atomic_path, write_text_atomic
from lab.core.errors import TrackingError
from lab.core.flat import config_hash, flatten, string_values
from lab.core.paths import public_paths_in
from lab.data.holdout import holdout_split, is_held_out
from lab.data.labels import TAG_FIELDS
from lab.data.trec import write_trec_run
from lab.metrics import bootstrap_ci
from lab.metrics.stats import CI_RESAMPLES
from lab.models.weights import default_memo, weights_record
from lab.tracking.faults import UNLOGGED_ENV, plain_cause, unlogged_root
from lab.tracking.lifecycle import tracked_run
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
    storage_fault,
)

#: Tags of a run whose queries are split into dev and held-out ones (set by lab.workbench.sweep on its children).
TAG_HOLDOUT = "holdout.fraction"
TAG_HOLDOUT_SEED = "holdout.seed"
#: Tag of a sweep's (or halving's) parent run: its winner's held-out check as JSON
#: (lab.analysis.trust.selection_record).
TAG_SELECTION = "holdout.selection"
#: The held-out queries' per-query table (parquet, indexed by query_id), logged beside per_query.parquet.
HOLDOUT_ARTIFACT = "holdout_per_query.parquet"


def result_metrics(result, ci: bool = True, seed: int = 0, n_resamples: int = CI_RESAMPLES) -> dict[str, float]:
    """Flat metrics of a Result, names unmapped: means, ``_ci_low``/``_ci_high`` (percentile bootstrap over
    queries, seeded), latency figures, index/search seconds, n_queries, n_excluded."""
    out = {str(k): float(v) for k, v in result.evaluation.means.items()}
    per_query = result.evaluation.per_query
    if ci and len(per_query):
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


def _user_values(result) -> list[str]:
    """The paths the user gave for a result (see lab.core.paths.public_path): the string values of its config, and
    the dataset folder it was run on (``info["dataset_path"]``: the config holds the dataset's name, the user named
    the folder; the report reads the dataset back from it)."""
    given = string_values(result.config or {})
    dataset_path = (result.info or {}).get("dataset_path")
    return given + ([str(dataset_path)] if dataset_path else [])


def public_describe(result) -> dict:
    """The result's strategy description (``info["retriever"]``) with its absolute paths (a model's weights, a
    tree file) in :func:`lab.core.paths.public_path` form: what ``retriever.*`` params and ``model.*`` tags show."""
    return public_paths_in((result.info or {}).get("retriever") or {}, _user_values(result))


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
    tags.update({f"model.{k}": v for k, v in model_identities(public_describe(result)).items()})
    labels = info.get("labels") or {}  # lab.data.labels: labels.source, labels.generator, labels.judge, ...
    tags.update({tag: str(labels[f]) for tag, f in TAG_FIELDS.items() if labels.get(f) is not None})

    tags[TAG_MODELS] = json.dumps(weights_record(describe, default_memo(), named=_user_values(result)),
                                  sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return tags


def write_result_files(result, folder: Path, seed: int = 0) -> list[Path]:
    """per_query.parquet, run.trec and result.json of a Result in ``folder``, each written atomically
    (lab.core.atomic: no 0-byte or half file is left when the disk is full)."""
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
        "info": public_paths_in(result.info or {}, _user_values(result)),  # no machine paths (public_path)
        "summary": result.summary(),
        "n_queries": result.evaluation.n_queries,
        "excluded": list(result.evaluation.excluded),
        "metrics_version": getattr(result.evaluation, "metrics_version", lab.METRICS_VERSION),
        "seed": seed,
    }
    write_text_atomic(folder / RESULT_ARTIFACT, json.dumps(doc, indent=1, default=str))
    paths.append(folder / RESULT_ARTIFACT)
    return paths


def log_result(result, run_id: str | None = None, experiment: str | None = None, tracking_root: str | Path = "mlruns",
               ci: bool = True, seed: int = 0, n_resamples: int = CI_RESAMPLES, run_name: str | None = None,
               holdout: tuple[float, int] | None = None) -> str:
    """Log a :class:`lab.experiment.run.Result` into MLflow and return the run id.

    run_id given: log into that run (a sweep's child run) and leave its status alone. run_id None: create a run
    in ``experiment`` (default "raglab"), log, and end it FINISHED (FAILED with tag ``error`` if logging raised;
    :func:`lab.tracking.lifecycle.tracked_run`).
    Logged: params (config as given, ``retriever.*`` description with every absolute path in
    :func:`lab.core.paths.public_path` form: repo-relative, ``site-packages/...``, ``~/...``, as the user named
    it, or the last component; see the module docstring for conflicts), metrics
    (means, CI bounds, latency, index/search seconds), tags (dataset_fingerprint, config_hash, git_commit,
    versions, model identities, metrics_version, seed, labels.* from lab.data.labels), artifacts per_query.parquet,
    run.trec, result.json.

    Held-out queries: with ``holdout`` (fraction, seed), or when the run carries the tags :data:`TAG_HOLDOUT` and
    :data:`TAG_HOLDOUT_SEED` (a sweep child of a spec with ``holdout``), the queries are split by
    :func:`lab.data.holdout.holdout_split`: metrics, CIs and per_query.parquet are of the dev queries only (what the
    leaderboard ranks on), and the held-out queries' per-query table is the artifact :data:`HOLDOUT_ARTIFACT`
    (read once the winner is chosen); metrics ``n_dev_queries`` and ``n_holdout_queries`` count both sides.
    """
    def log_into(run_id: str) -> None:
        run_tags = cl.get_run(run_id).data.tags
        logged, held = split_for_holdout(result, holdout or _holdout_tags(run_tags))
        params = dict(flatten(result.config))  # the user's config as given; the description's paths made public
        params.update({f"retriever.{k}": v for k, v in flatten(public_describe(result)).items()})
        log_params(run_id, params, cl=cl)
        metrics = result_metrics(logged, ci=ci, seed=seed, n_resamples=n_resamples)
        if held is not None:
            metrics.update(n_dev_queries=float(logged.evaluation.n_queries), n_holdout_queries=float(len(held)))
        log_metrics(run_id, metrics, cl=cl)
        tags = _result_tags(result, seed)
        if "config_hash" not in run_tags:
            tags["config_hash"] = config_hash(result.config)
        set_tags(run_id, tags, cl=cl)
        with tempfile.TemporaryDirectory(prefix="lab-result-") as tmp:
            paths = write_result_files(logged, Path(tmp), seed)
            if held is not None:
                paths.append(Path(tmp) / HOLDOUT_ARTIFACT)
                held.to_parquet(paths[-1])
            for path in paths:
                cl.log_artifact(run_id, str(path))

    cl, own, failed = None, run_id is None, None
    try:
        cl = client(tracking_root)
        if run_id is None:  # our own run: created here, ended FINISHED, or FAILED (tag error) when logging raises
            strategy = result.config.get("strategy", "run")
            with tracked_run(experiment or "raglab", tracking_root=tracking_root, cl=cl,
                             run_name=run_name or f"{strategy} on {result.info.get('dataset', '')}".strip()) as run:
                run_id = run.run_id
                try:
                    log_into(run_id)
                except Exception as exc:  # noqa: BLE001 - ended FAILED with the cause, then raised below
                    failed = exc
                    drop_local_artifacts(cl, run_id)
                    run.fail(plain_cause(exc, tracking_root))
            if failed is not None:
                raise failed
        else:
            log_into(run_id)
    except BaseException as exc:
        if not isinstance(exc, Exception):
            raise
        _raise_unlogged(result, seed, experiment, tracking_root, failed or exc, run_id if own else None, cl)
    return run_id


def drop_local_artifacts(cl, run_id: str) -> None:
    """Remove the artifacts a run stored in a local folder (a ``file:`` artifact URI): a partial set is never
    left behind, and a full disk gets back the room to record the run's end. Nothing for a server's artifacts."""
    try:
        uri = cl.get_run(run_id).info.artifact_uri
    except Exception:  # noqa: BLE001 - the store may be what failed
        return
    if uri.startswith("file:"):
        shutil.rmtree(unquote(urlparse(uri).path), ignore_errors=True)


def _ended(cl, run_id: str | None, cause: str) -> str:
    """How the run ``run_id`` (created by log_result) ended, for the error line; marks it FAILED when the first
    try could not (a full disk has more room once its partial artifacts are gone)."""
    if run_id is None or cl is None:
        return ""
    try:
        if cl.get_run(run_id).info.status == "RUNNING":
            set_tags(run_id, {"error": cause}, cl=cl)
            cl.set_terminated(run_id, "FAILED")
        return f"; run {run_id} is marked FAILED"
    except Exception:  # noqa: BLE001 - the store cannot be written at all
        return f"; run {run_id} could not be marked FAILED either"


def _raise_unlogged(result, seed: int, experiment: str | None, tracking_root, exc: Exception, run_id: str | None,
                    cl) -> NoReturn:
    """Save a result that could not be logged and raise the one TrackingError line: the cause, the run's end,
    and where the result went (or why it could not be saved)."""
    cause = plain_cause(exc, tracking_root)
    try:
        folder = save_unlogged(result, seed, experiment or "raglab", tracking_root=tracking_root)
    except OSError as saving:
        raise TrackingError(f"logging to MLflow (tracking root {tracking_root}) failed: {cause}"
                            f"{_ended(cl, run_id, cause)}; "
                            f"saving the result under {unlogged_root(tracking_root)} failed too: "
                            f"{storage_fault(saving) or saving}; set {UNLOGGED_ENV} to a folder on another disk to "
                            "keep it") from None
    raise TrackingError(f"logging to MLflow (tracking root {tracking_root}) failed: {cause}"
                        f"{_ended(cl, run_id, cause)}; "
                        f"the result was saved to {folder} ({RESULT_ARTIFACT}, {PER_QUERY_ARTIFACT}, {RUN_ARTIFACT})"
                        ) from exc


def _holdout_tags(tags) -> tuple[float, int] | None:
    """(fraction, seed) from a run's :data:`TAG_HOLDOUT` / :data:`TAG_HOLDOUT_SEED` tags, None without them."""
    if not tags.get(TAG_HOLDOUT):
        return None
    return float(tags[TAG_HOLDOUT]), int(tags.get(TAG_HOLDOUT_SEED) or 0)


def split_for_holdout(result, holdout: tuple[float, int] | None):
    """(the result on its dev queries, the held-out queries' per-query table) for ``holdout`` = (fraction, seed);
    (result, None) without a holdout. The dev result keeps the run and config; its evaluation holds the dev
    queries only (means recomputed, ``excluded`` cut to the dev queries)."""
    if holdout is None:
        return result, None
    ev = result.evaluation
    pq = ev.per_query
    split = holdout_split(pq.index.astype(str), *holdout)
    dev_ev = copy.copy(ev)
    dev_ev.per_query = pq.loc[list(split.dev)]
    dev_ev.means = {k: float(dev_ev.per_query[k].mean()) for k in pq.columns}
    dev_ev.n_queries = len(split.dev)
    dev_ev.excluded = [q for q in ev.excluded if not is_held_out(str(q), *holdout)]
    dev = copy.copy(result)
    dev.evaluation = dev_ev
    dev.info = {**(result.info or {}), "holdout": {"fraction": holdout[0], "seed": holdout[1],
                                                   "dev_queries": len(split.dev),
                                                   "holdout_queries": len(split.held_out)}}
    held = pq.loc[list(split.held_out)].copy()
    held.index = held.index.astype(str)
    held.index.name = "query_id"
    held.columns = [str(c) for c in held.columns]
    return dev, held


def save_unlogged(result, seed: int = 0, experiment: str = "raglab", folder: str | Path | None = None,
                  tracking_root: str | Path = "mlruns") -> Path:
    """Write a result that could not be logged to ``<unlogged root>/<experiment>/<time>-<strategy>-<pid>/`` (the
    unlogged root of tracking root ``root``: :func:`lab.tracking.faults.unlogged_root`), or to ``folder``:
    result.json, per_query.parquet and run.trec, as :func:`write_result_files` writes them."""
    if folder is None:
        strategy = re.sub(r"[^\w.-]", "_", str(result.config.get("strategy", "run")))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = unlogged_root(tracking_root) / re.sub(r"[^\w.-]", "_",
                                                       experiment) / f"{stamp}-{strategy}-{os.getpid()}"
    folder = Path(folder)
    made = not folder.exists()
    try:
        write_result_files(result, folder, seed)
    except OSError:
        if made:  # leave no half-saved result behind (a disk that filled up)
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
