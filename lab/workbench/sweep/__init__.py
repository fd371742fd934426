"""Sweeps: a params YAML -> configs -> one Papermill execution and one MLflow run per config.

Flow of :func:`run_sweep` (:mod:`.run`; each step names the module that holds it)
1. Load and expand the spec (:mod:`lab.workbench.config`); each config has a :func:`lab.core.flat.config_hash`.
2. Resume: a config is skipped when a FINISHED run of the same experiment (whatever sweep made it) can stand for
   it: same config hash, same dataset content, same model weights, same metrics version (and, with
   ``rerun_on_code_change``, the same git commit); see :mod:`lab.workbench.resume`. Every config that runs again says
   why ("dataset changed since run 1f44446e (corpus.jsonl)"), in the dry run too, and its run keeps the reason in
   tag ``sweep.rerun_reason``. A dataset folder that is gone stops the sweep before anything runs. Runs of this
   sweep left RUNNING by a process that died (kill -9, power loss) are marked KILLED with an ``error`` tag and
   their configs are run again. A lock file (under the tracking root) makes sure no live sweep of the same name
   and experiment is running, so RUNNING means dead.
3. Parent run: an unfinished parent of this sweep (same name and same set of configs) is reused, else a new
   one is created (tag ``sweep.role=parent``). Nothing to run: no parent is created, unless ``new_parent``
   (scheduled sweeps, :mod:`lab.workbench.schedule`: every scheduled sweep is one parent run, even when all is reused).
4. Each config runs :func:`execute_config` (in this process for ``jobs=1``, in a pool of ``jobs`` spawned
   processes, or as Ray tasks): it creates the child run (named by what varies, lab.analysis.labels.short_labels; tag
   ``mlflow.parentRunId``, ``config_hash``, the flattened config as params), executes the notebook with the config,
   ``mlflow_run_id``, ``tracking_root`` and
   ``experiment`` injected, logs the executed notebook as an artifact and ends the run FINISHED. A notebook that
   raises ends FAILED with tag ``error`` and artifact ``error.txt``; the sweep goes on.
   The child run is also a claim on its config (:mod:`lab.tracking.claims`, key: config hash plus dataset content
   and metrics version): when another sweep of the same experiment, whatever its name, claimed the config first,
   this sweep deletes its run, waits for that one and counts the config SKIPPED ("run by another sweep at the same
   time"), so no config runs twice. A store that cannot take a config's artifacts fails that config, not the sweep.
5. The parent is ended FINISHED when every config has a finished run, else FAILED (a rerun retries the rest).
   Its artifacts ``summary/``: ``leaderboard.png`` and ``quality_vs_latency.png`` (lab.analysis.plots),
   ``leaderboard.csv``
   and ``report.html`` (lab.analysis.report) of the sweep's finished runs; a summary that fails is reported
   (``SweepReport.summary_error``) and leaves the runs alone. The experiment's runs view
   (:mod:`lab.tracking.ui`) shows ``strategy``, the varying keys, ``ndcg_at_10``, the sweep's ``metric`` and
   latency as columns; child runs are tagged ``mlflow.runType=evaluation`` so the UI shows them under the parent.
6. Publish (when the spec's ``publish`` key or the caller asks): the finished runs of this sweep's configs (run
   now or skipped as finished earlier) go to a Prometheus textfile and/or a Pushgateway
   (:mod:`lab.workbench.monitoring`).
   A publishing failure is reported (``SweepReport.publish_error``), never lost, and leaves the runs alone.

Crash safety: a run is FINISHED only after its notebook ran and its artifacts were logged, and it is never
set FINISHED once something else ended it. Pool workers die with the sweep process (PR_SET_PDEATHSIG, and a
parent watcher elsewhere), and kernels die with their worker (ipykernel's parent poller), so a rerun after
kill -9 neither loses a finished run nor duplicates one.
"""
from __future__ import annotations

from lab.workbench.sweep.execute import KERNEL_START_RETRIES, default_kernel, execute_config, is_kernel_start_failure
from lab.workbench.sweep.options import SweepOptions, sweep_options
from lab.workbench.sweep.outcome import (
    ERROR_ARTIFACT,
    NOTEBOOK_ARTIFACT_DIR,
    TAG_HASH,
    TAG_NAME,
    TAG_SPEC_HASH,
    ConfigOutcome,
    SweepReport,
    SweepTask,
)
from lab.workbench.sweep.run import run_sweep, sweep_metric
from lab.workbench.sweep.stale import mark_stale
from lab.workbench.sweep.summary import publish_report

__all__ = ["ERROR_ARTIFACT", "KERNEL_START_RETRIES", "NOTEBOOK_ARTIFACT_DIR", "TAG_HASH", "TAG_NAME", "TAG_SPEC_HASH",
           "ConfigOutcome", "SweepOptions", "SweepReport", "SweepTask", "default_kernel", "execute_config",
           "is_kernel_start_failure", "mark_stale", "publish_report", "run_sweep", "sweep_metric", "sweep_options"]
