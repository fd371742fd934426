"""Sweeps: a params YAML -> configs -> one Papermill execution and one MLflow run per config.

Flow of :func:`run_sweep`
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

import atexit
import contextlib
import ctypes
import hashlib
import multiprocessing as mp
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
from filelock import FileLock, Timeout

import lab
from lab.analysis.compare import CompareWarning, experiment_leaderboard, plot_leaderboard
from lab.analysis.labels import short_labels
from lab.analysis.plots import quality_vs_latency
from lab.analysis.report import build_report, runs_from_mlflow
from lab.core import phases
from lab.core.errors import ConfigError, LabError
from lab.core.flat import config_hash, flatten, varying_keys
from lab.core.paths import repo_root, resolve_repo_path, results_dir
from lab.core.progress import progress as bar
from lab.models.llm import THREADS_ENV, usable_cores
from lab.tracking import claims
from lab.tracking.lifecycle import TAG_ERROR, tracked_run
from lab.tracking.store import (
    TAG_PARENT,
    TAG_ROLE,
    client,
    environment_tags,
    get_or_create_experiment,
    is_uri,
    log_metrics,
    log_params,
    root_path,
    search_all_runs,
    set_tags,
    storage_fault,
    tracking_uri,
)
from lab.tracking.ui import DEFAULT_METRICS, RUN_TYPE_EVALUATION, RUN_TYPE_TAG, set_runs_view
from lab.workbench import monitoring
from lab.workbench.config import SweepSpec, expand, label, load_spec
from lab.workbench.kernels import WarmKernels, shutdown
from lab.workbench.monitoring import parse_publish
from lab.workbench.phase_watch import watch_phases
from lab.workbench.resume import TAG_REASON, Decision, RunIdentity, decide, run_identity
from lab.workbench.selection import check_holdout, holdout_decisions, holdout_tags, record_selection, selection_line
from lab.workbench.sweep_check import validate_sweep

#: Tags written by the sweep (TAG_PARENT and TAG_ROLE are defined in lab.tracking.store, TAG_ERROR in
#: lab.tracking.lifecycle, which every layer above tracking reads).
TAG_HASH = "config_hash"
TAG_NAME = "sweep.name"
TAG_SPEC_HASH = "sweep.spec_hash"
NOTEBOOK_ARTIFACT_DIR = "notebook"
ERROR_ARTIFACT = "error.txt"
_ENV_DEFAULTS = {"MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                 "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class ConfigOutcome:
    """What happened to one config: status FINISHED, FAILED, KILLED, SKIPPED (finished earlier) or PENDING
    (dry run: would run)."""

    index: int
    config_hash: str
    label: str
    config: dict
    status: str
    run_id: str | None = None
    seconds: float = 0.0
    error: str = ""
    notebook: str = ""
    reason: str = ""  # why it runs again ("" when skipped); see lab.workbench.resume
    previous_run_id: str | None = None  # the finished run the reason compares with


@dataclass
class SweepReport:
    """Outcome of :func:`run_sweep`, one :class:`ConfigOutcome` per config in expansion order."""

    name: str
    experiment: str
    experiment_id: str | None
    parent_run_id: str | None
    output_dir: Path
    outcomes: list[ConfigOutcome] = field(default_factory=list)
    seconds: float = 0.0
    dry_run: bool = False
    stale_marked: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)  # files written / Pushgateway URLs pushed to
    publish_error: str = ""
    summary_artifacts: list[str] = field(default_factory=list)  # artifact paths logged into the parent run
    summary_error: str = ""
    selection: dict | None = None  # the winner's held-out check (lab.workbench.selection), with a holdout
    selection_error: str = ""

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def n_finished(self) -> int:
        return self.count("FINISHED")

    @property
    def n_failed(self) -> int:
        return self.count("FAILED") + self.count("KILLED")

    @property
    def n_skipped(self) -> int:
        return self.count("SKIPPED")

    @property
    def ok(self) -> bool:
        """True when every config has a finished run (now or from before) and publishing (if asked) worked."""
        return all(o.status in ("FINISHED", "SKIPPED") for o in self.outcomes) and not self.publish_error

    def table(self):
        """DataFrame: index, config_hash, status, label, run_id, seconds, error, reason."""
        return pd.DataFrame([{"index": o.index, "config_hash": o.config_hash, "status": o.status, "label": o.label,
                              "run_id": o.run_id, "seconds": round(o.seconds, 2), "error": o.error,
                              "reason": o.reason} for o in self.outcomes])

    def summary(self) -> str:
        head = "dry run: " if self.dry_run else ""
        if self.dry_run:
            return (f"{head}sweep {self.name!r} ({self.experiment}): {len(self.outcomes)} configs, "
                    f"{self.count('PENDING')} would run, {self.n_skipped} finished earlier (skipped)")
        return (f"sweep {self.name!r} ({self.experiment}): {len(self.outcomes)} configs, {self.n_finished} finished, "
                f"{self.n_failed} failed, {self.n_skipped} skipped (finished earlier) in {self.seconds:.1f} s; "
                f"parent run {self.parent_run_id}")


@dataclass
class SweepTask:
    """One config to run, everything :func:`execute_config` needs as plain values: it is pickled to pool workers
    and Ray tasks, so it holds no client, spec or callable."""

    index: int  # position in the spec's expansion
    config: dict
    config_hash: str
    label: str
    run_name: str  # the child run's name in the MLflow UI: what varies, short
    inject: dict  # extra notebook parameters: tracking_root, experiment, dataset (resolved)
    notebook: str
    notebook_rel: str  # the notebook as the run's source name (relative to the repo root when under it)
    output_path: str  # the executed notebook
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    sweep_name: str
    kernel_name: str | None = None  # None: default_kernel()
    execution_timeout: int | None = None  # seconds per cell
    tags: dict = field(default_factory=dict)  # extra tags of the child run
    claim_key: str | None = None  # lab.tracking.claims key: no other sweep runs this config at the same time
    warm_next: bool = True  # a pool or Ray worker warms a kernel after this config (_mark_last)
    staged: bool = False  # notebook and dataset are relative to a Ray working_dir (_stage_for_ray)
    runtime_env: dict | None = None  # a Ray runtime_env sent with this task (a Ray session the caller started)
    phase_dir: str | None = None  # where the config reports its phases (lab.workbench.phase_watch)

    def outcome(self, status: str, **fields) -> ConfigOutcome:
        """This config's :class:`ConfigOutcome` with ``status`` (notebook: this task's output path unless given)."""
        return ConfigOutcome(self.index, self.config_hash, self.label, self.config, status,
                             **{"notebook": self.output_path, **fields})


# ----------------------------------------------------------------------------------------------------------
# kernel and environment
# ----------------------------------------------------------------------------------------------------------
def default_kernel() -> str:
    """The Jupyter kernel that runs *this* interpreter: "raglab" (installed by ``make setup``) when its argv
    starts with ``sys.executable``, else "python3" when its argv starts with a bare ``python`` (jupyter_client
    replaces that with ``sys.executable``). Raises ConfigError when neither fits."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    bare = {"python", f"python{sys.version_info[0]}", "python%i.%i" % sys.version_info[:2]}
    here = os.path.abspath(sys.executable)
    for name in ("raglab", "python3"):
        try:
            argv = ksm.get_kernel_spec(name).argv
        except NoSuchKernel:
            continue
        if argv and (os.path.abspath(argv[0]) == here or argv[0] in bare):
            return name
    raise ConfigError(f"no Jupyter kernel runs {sys.executable}; run `make setup` (installs the 'raglab' kernel) "
                      "or `python -m ipykernel install --sys-prefix --name raglab`")


def _init_worker(llm_threads: int) -> None:
    """Pool-worker initializer: die with the sweep (:func:`_die_with_parent`), and give a local LLM made in this
    worker (or its notebook kernel) its share of the cores, ``$LAB_LLM_THREADS`` (unless the user set it): each
    worker measuring the idle cores at once would see them all free and take them all, and llama.cpp's spinning
    threads slow 10-30x without a core of their own."""
    _die_with_parent()
    os.environ.setdefault(THREADS_ENV, str(llm_threads))


def _die_with_parent() -> None:
    """Pool-worker initializer: end this process when the sweep process dies (kill -9 included)."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="lab-parent-watch").start()


# ----------------------------------------------------------------------------------------------------------
# one config
# ----------------------------------------------------------------------------------------------------------
#: times a config's kernel is started again when it dies before answering (two kernels starting at once on a
#: loaded machine sometimes lose that race; no cell has run then, so starting again is safe).
KERNEL_START_RETRIES = 2
#: Arguments of every config's kernel: no TCP-transport warning in the sweep's output.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]
_KERNEL_START_ERRORS = ("Kernel died before replying to kernel_info", "Kernel didn't respond in",
                        "Address already in use")


def is_kernel_start_failure(exc: BaseException) -> bool:
    """True for the errors jupyter_client raises when a kernel fails to start (before any cell ran)."""
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _KERNEL_START_ERRORS)


def _clean_traceback(lines) -> str:
    text = "\n".join(lines) if isinstance(lines, (list, tuple)) else str(lines)
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


#: rounds of claiming a config (lab.tracking.claims) before giving up when each winner ends without finishing
CLAIM_ROUNDS = 3


def execute_config(task: SweepTask, kernels=None, more: bool = False) -> ConfigOutcome:
    """Run one config once across sweeps: with ``task.claim_key``, its run is a claim (lab.tracking.claims):
    when another sweep's run of the same key wins the election, this one yields (its run is deleted), waits for
    the winner and returns SKIPPED with the winner's run id and ``reason`` naming it; a winner that ends without
    finishing is claimed again (up to :data:`CLAIM_ROUNDS` rounds, then FAILED). See :func:`_execute_once`."""
    phases.bind(task.phase_dir)
    phases.announce(task.index, task.run_name, str(task.config.get("strategy") or ""))
    out = task.outcome("FAILED")
    for _ in range(CLAIM_ROUNDS):
        try:
            out, winner = _execute_once(task, kernels, more)
        except Exception as exc:  # noqa: BLE001 - the store failed (full, read-only): this config FAILED, go on
            first = str(exc).splitlines()[0] if str(exc) else ""
            return task.outcome("FAILED", error=storage_fault(exc) or f"{type(exc).__name__}: {first}")
        if not winner:
            return out
        out = _yield_to_winner(task, out, winner)
        if out.status == "SKIPPED":
            return out
    return out


def _client(tracking_uri: str):
    """An :class:`mlflow.MlflowClient` on ``tracking_uri`` (a task's store, already created by the sweep)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _yield_to_winner(task: SweepTask, out: ConfigOutcome, winner: str) -> ConfigOutcome:
    """Delete this config's run in favour of another sweep's claim ``winner`` and wait for it: SKIPPED when it
    finished (its run stands for this config), else FAILED (:func:`execute_config` claims again)."""
    cl = _client(task.tracking_uri)
    claims.yield_to(cl, out.run_id, winner)
    status, why = claims.wait_for(cl, winner)
    if status == "FINISHED":
        return replace(out, status="SKIPPED", run_id=winner, error="",
                       reason=f"run by another sweep at the same time (run {winner[:8]}); not run twice")
    return replace(out, status="FAILED", run_id=None,
                   error=f"claimed by run {winner[:8]} of another sweep, which ended {status}"
                   + (f": {why}" if why else ""))


def _execute_once(task: SweepTask, kernels=None, more: bool = False) -> tuple[ConfigOutcome, str | None]:
    """Run one config: create its child run, execute the notebook, log, end the run. Returns the outcome and the
    run id of another sweep's claim it yields to (None: it did not yield). The same function runs in-process, in
    pool workers and in Ray tasks. ``kernels``: a :class:`lab.workbench.kernels.WarmKernels` whose prewarmed
    kernel runs this config (``more``: another config follows, so warm the next one); the run's tag
    ``sweep.kernel`` says "prewarmed" or "cold" (Papermill started it: no pool, or warming failed, or a kernel
    start was retried)."""
    for k, v in _ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    t0 = time.perf_counter()
    cl = _client(task.tracking_uri)
    winner = None
    # FINISHED, or FAILED with tag error; KeyboardInterrupt: KILLED; anything else that raises here: FAILED (tag
    # error) and re-raised. keep_ended: never revive a run something else ended (a rerun marked it KILLED)
    with tracked_run(experiment_id=task.experiment_id, run_name=task.run_name[:240], tags=_child_tags(task), cl=cl,
                     keep_ended=True) as run:
        run_id = run.run_id
        beat = None
        if task.claim_key:  # create, then check: another sweep's claim on this config may be older
            verdict = claims.elect(cl, task.experiment_id, task.claim_key, run_id)
            if not verdict.won:  # ended KILLED here; execute_config deletes it and waits for the winner
                run.status = "KILLED"
                return (task.outcome("KILLED", run_id=run_id, seconds=time.perf_counter() - t0),
                        verdict.winner_run_id)
            beat = claims.Heartbeat(cl, run_id).start()
        log_params(run_id, flatten(task.config), cl=cl)
        error, details = _run_notebook(task, run_id, cl, kernels, more)
        error = _log_notebook(task, run_id, cl, error, details)
        if error:
            run.fail(error)  # tag TAG_ERROR ("error"), status FAILED
        if beat is not None:
            beat.stop()
            if not error:  # elect again before finishing: a claim made at the same instant is seen by now
                verdict = claims.elect(cl, task.experiment_id, task.claim_key, run_id)
                if not verdict.won:
                    run.status = "KILLED"
                    winner = verdict.winner_run_id
    return task.outcome(run.final_status, run_id=run_id, error=error, seconds=time.perf_counter() - t0), winner


def _child_tags(task: SweepTask) -> dict:
    """Tags of a config's child run: its parent, config hash, sweep, host, notebook, claim and the task's own."""
    tags = {TAG_PARENT: task.parent_run_id, TAG_HASH: task.config_hash, TAG_NAME: task.sweep_name,
            "metrics_version": str(lab.METRICS_VERSION),
            "sweep.index": str(task.index), "sweep.host": os.uname().nodename, "sweep.pid": str(os.getpid()),
            "mlflow.source.name": task.notebook_rel, "mlflow.source.type": "NOTEBOOK",
            RUN_TYPE_TAG: RUN_TYPE_EVALUATION, **task.tags}
    if task.claim_key:
        tags.update(claims.claim_tags(task.claim_key))
    return tags


def _run_notebook(task: SweepTask, run_id: str, cl, kernels, more: bool) -> tuple[str, str]:
    """Execute the config's notebook with its parameters; returns (error line, details), both "" when it ran."""
    from papermill.exceptions import PapermillExecutionError

    parameters = {**task.config, **task.inject, "mlflow_run_id": run_id}
    try:
        _papermill(task, parameters, run_id, cl, kernels, more)
    except Exception as exc:  # noqa: BLE001 - any failure of a config is recorded and the sweep goes on
        if isinstance(exc, PapermillExecutionError):
            return (f"{exc.ename}: {exc.evalue} (cell {exc.cell_index}, execution count {exc.exec_count})",
                    _clean_traceback(exc.traceback))
        return f"{type(exc).__name__}: {exc}", traceback.format_exc()
    return "", ""


def _papermill(task: SweepTask, parameters: dict, run_id: str, cl, kernels, more: bool) -> None:
    """Papermill on the notebook, on a prewarmed kernel when ``kernels`` has one; a kernel that fails to start
    (no cell ran) is started again, up to :data:`KERNEL_START_RETRIES` times."""
    import papermill as pm

    Path(task.output_path).parent.mkdir(parents=True, exist_ok=True)
    km = kernels.take(more=more) if kernels is not None else None
    set_tags(run_id, {"sweep.kernel": "prewarmed" if km is not None else "cold"}, cl=cl)
    for attempt in range(KERNEL_START_RETRIES + 1):
        try:
            pm.execute_notebook(task.notebook, task.output_path, parameters=parameters,
                                kernel_name=task.kernel_name or default_kernel(), cwd=str(Path(task.notebook).parent),
                                progress_bar=False, log_output=False, start_timeout=180,
                                execution_timeout=task.execution_timeout,
                                extra_arguments=KERNEL_ARGUMENTS, **({"km": km} if km is not None else {}))
            return
        except RuntimeError as exc:
            # the kernel never started (no cell ran, nothing was logged): start it again
            if attempt == KERNEL_START_RETRIES or not is_kernel_start_failure(exc):
                raise
            set_tags(run_id, {"sweep.kernel_start_retries": str(attempt + 1), "sweep.kernel": "cold"}, cl=cl)
            shutdown(km)
            km = None
            time.sleep(1.0 + attempt)
        finally:
            shutdown(km)  # a kernel handed to Papermill is the caller's to end


def _log_notebook(task: SweepTask, run_id: str, cl, error: str, details: str) -> str:
    """Log the executed notebook (and ``error.txt`` when the config failed) into the run; returns ``error``, or a
    new one when the store cannot take the artifacts (a full disk fails this config, not the sweep)."""
    try:
        if Path(task.output_path).is_file():
            cl.log_artifact(run_id, task.output_path, NOTEBOOK_ARTIFACT_DIR)
        if error:
            with tempfile.TemporaryDirectory(prefix="lab-err-") as tmp:
                path = Path(tmp) / ERROR_ARTIFACT
                path.write_text(f"{error}\n\nconfig: {task.label}\nnotebook: {task.output_path}\n\n"
                                f"{details}\n", encoding="utf-8")
                cl.log_artifact(run_id, str(path))
    except OSError as exc:
        error = error or f"logging the executed notebook failed: {storage_fault(exc) or exc}"
    return error


# ----------------------------------------------------------------------------------------------------------
# executors
# ----------------------------------------------------------------------------------------------------------
def _run_local(tasks: list[SweepTask], jobs: int, warm_kernels: bool = True) -> Iterator[ConfigOutcome]:
    if jobs <= 1:
        if not warm_kernels or len(tasks) < 2 or len({(t.notebook, t.kernel_name) for t in tasks}) > 1:
            for t in tasks:
                yield execute_config(t)
            return
        name = tasks[0].kernel_name or default_kernel()
        with WarmKernels(name, tasks[0].notebook, extra_arguments=KERNEL_ARGUMENTS) as kernels:
            for i, t in enumerate(tasks):
                yield execute_config(t, kernels=kernels, more=i + 1 < len(tasks))
        return
    ctx = mp.get_context("spawn")
    run = _execute_warm if warm_kernels else execute_config
    share = max(1, usable_cores() // jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(share,)) as pool:
        futures = {pool.submit(run, t): t for t in _mark_last(tasks, jobs)}
        for f in as_completed(futures):
            yield _future_result(f, futures[f])


#: This worker process's :class:`lab.workbench.kernels.WarmKernels` per (kernel name, notebook), with whether it is
#: warming a next kernel, for pool and Ray workers (see :func:`_execute_warm`); closed when the process exits.
_WORKER_KERNELS: dict = {}


def _mark_last(tasks: list[SweepTask], jobs: int) -> list[SweepTask]:
    """The tasks with ``warm_next``: False for the last ``jobs`` of them (handed out in this order, each is the last
    its worker gets, so warming a kernel after it would be wasted work at the end of the sweep)."""
    return [replace(t, warm_next=i < len(tasks) - max(jobs, 1)) for i, t in enumerate(tasks)]


def _execute_warm(task: SweepTask) -> ConfigOutcome:
    """:func:`execute_config` in a pool or Ray worker, with a kernel this worker warmed while its previous config
    ran (the first config of a worker waits for its own). The worker warms one more unless the task says it is
    among the last (``warm_next``, :func:`_mark_last`); a kernel warmed for nothing is shut down when the worker
    exits, and a config that finds none runs on a cold kernel (tag ``sweep.kernel=cold``)."""
    key = (task.kernel_name or default_kernel(), task.notebook)
    phases.bind(task.phase_dir)  # before a kernel starts here: it inherits where to report
    if not _WORKER_KERNELS:
        atexit.register(lambda: [k.close() for k, _ in _WORKER_KERNELS.values()])
    kernels, warming = _WORKER_KERNELS.get(key, (None, False))
    if not warming:  # first config here, or the one before was marked last: start one now
        if kernels is not None:
            kernels.close()
        kernels = WarmKernels(key[0], task.notebook, extra_arguments=KERNEL_ARGUMENTS)
    _WORKER_KERNELS[key] = (kernels, task.warm_next)
    return execute_config(task, kernels=kernels, more=task.warm_next)


def _future_result(future, task: SweepTask) -> ConfigOutcome:
    """A worker's outcome, or a FAILED outcome when the worker itself died (the run stays for the next resume)."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - a worker that died: recorded as FAILED, the sweep goes on
        return task.outcome("FAILED", error=f"{type(exc).__name__}: {exc}")


#: Tags a Ray task adds to its run: the Ray node it ran on (id and IP address) and where its notebook and dataset
#: came from ("runtime_env": Ray's working_dir, see :func:`_stage_for_ray`).
TAG_RAY_NODE = "sweep.ray_node_id"
TAG_RAY_NODE_IP = "sweep.ray_node_ip"
TAG_STAGED = "sweep.staged"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _run_ray(tasks: list[SweepTask], jobs: int, address: str | None,
             warm_kernels: bool = True) -> Iterator[ConfigOutcome]:
    """Configs as Ray tasks (one CPU each), at most ``max(jobs, 1)`` in flight, on the cluster at ``address``
    or on a local instance started here (2 CPUs, no dashboard) and shut down afterwards.

    Workers need no shared filesystem: the notebook and each config's dataset folder travel in the job's
    ``runtime_env`` working_dir (:func:`_stage_for_ray`); runs and the executed notebook go to the tracking store
    (use an ``http://`` server when workers are on other machines). A task whose worker dies (killed, out of memory,
    node lost) is not retried: its run, left RUNNING by the dead worker, is ended FAILED with tag ``error`` and the
    sweep goes on; a rerun runs that config again."""
    ray = _import_ray(address)
    started = False
    with tempfile.TemporaryDirectory(prefix="lab-ray-stage-") as stage:
        staged = _stage_for_ray(tasks, Path(stage))
        if not ray.is_initialized():
            ray.init(**_ray_init_args(address), runtime_env={"working_dir": stage}, log_to_driver=False)
            started = True
        else:  # a Ray session the caller started: the job's runtime_env is the caller's; send ours per task
            staged = [replace(t, runtime_env={"working_dir": stage}) for t in staged]
        try:
            yield from _ray_loop(ray, staged, jobs, warm_kernels)
        finally:
            if started:
                ray.shutdown()


def _ray_loop(ray, tasks: list[SweepTask], jobs: int, warm_kernels: bool) -> Iterator[ConfigOutcome]:
    remote = ray.remote(num_cpus=1, max_retries=0)(_execute_on_ray)
    queue = _mark_last(tasks, jobs)
    inflight: dict = {}
    while queue or inflight:
        while queue and len(inflight) < max(jobs, 1):
            t = queue.pop(0)
            env, t = t.runtime_env, replace(t, runtime_env=None)
            inflight[(remote.options(runtime_env=env) if env else remote).remote(t, warm_kernels)] = t
        done, _ = ray.wait(list(inflight), num_returns=1)
        t = inflight.pop(done[0])
        try:
            yield ray.get(done[0])
        except Exception as exc:  # noqa: BLE001 - a task whose worker died: recorded, the sweep goes on
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            yield t.outcome("FAILED", run_id=_fail_orphan_run(t, f"Ray worker died: {error}"), error=error)


def _import_ray(address: str | None):
    """Ray, imported with what raglab needs set first: on a loopback address, Ray keeps 127.0.0.1 (it otherwise
    swaps it for the machine's network address: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``); with an explicit
    address and a token on this machine (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``),
    token authentication is turned on for the driver (Ray turns it on by itself only for a cluster it finds
    without an address). Variables the user set are left as they are."""
    if address and _ray_host(address) in _LOOPBACK:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if address and "RAY_AUTH_MODE" not in os.environ and _ray_token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    try:
        import ray
    except ImportError:
        raise ConfigError("executor 'ray' needs Ray: pip install 'raglab[ray]' (or pip install ray)") from None
    return ray


def _ray_host(address: str) -> str:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def _ray_token_available() -> bool:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(path or Path.home() / ".ray" / "auth_token").is_file()


def _ray_init_args(address: str | None) -> dict:
    """ray.init arguments: the cluster at ``address`` (this driver on 127.0.0.1 when the address is loopback), or
    a new local instance of 2 CPUs without a dashboard (``address="local"``: never a cluster Ray finds by itself
    through RAY_ADDRESS or a stale /tmp/ray/ray_current_cluster; ``--ray-address auto`` asks for that)."""
    if not address:
        return {"address": "local", "num_cpus": 2, "include_dashboard": False}
    args: dict = {"address": address}
    if _ray_host(address) in _LOOPBACK:
        args["_node_ip_address"] = "127.0.0.1"
    return args


def _stage_for_ray(tasks: list[SweepTask], stage: Path) -> list[SweepTask]:
    """Copy each task's notebook and dataset folder under ``stage`` (the job's working_dir: Ray uploads it to the
    cluster and unpacks it for every worker) and return the tasks with those paths made relative to it; the
    executed notebook is written in the worker's own temporary folder (it reaches the driver as the run's
    artifact). Other files a config names must be on a path every node sees."""
    places: dict[str, str] = {}

    def place(src: str, kind: str) -> str:
        if src not in places:
            rel = f"{kind}/{sum(v.startswith(kind + '/') for v in places.values()):02d}_{Path(src).name}"
            copy = shutil.copytree if Path(src).is_dir() else shutil.copy2
            (stage / kind).mkdir(parents=True, exist_ok=True)
            copy(src, stage / rel)
            places[src] = rel
        return places[src]

    out = []
    for t in tasks:
        inject = dict(t.inject)
        if isinstance(inject.get("dataset"), str) and Path(inject["dataset"]).is_dir():
            inject["dataset"] = place(inject["dataset"], "data")
        out.append(replace(t, inject=inject, notebook=place(t.notebook, "notebook"), staged=True))
    return out


def _execute_on_ray(task: SweepTask, warm_kernels: bool = True) -> ConfigOutcome:
    """A Ray task: tag the run with this node, resolve the staged paths in this worker's working_dir, run the
    config (:func:`execute_config`, with a prewarmed kernel unless ``warm_kernels`` is False)."""
    import ray  # the optional package (raglab[ray]): only a Ray worker runs this

    os.environ.setdefault(THREADS_ENV, "1")  # the one CPU this task reserved (num_cpus=1), for a local LLM
    tags = {**task.tags, TAG_RAY_NODE: ray.get_runtime_context().get_node_id(),
            TAG_RAY_NODE_IP: ray.util.get_node_ip_address()}
    if not task.staged:
        task = replace(task, tags=tags)
        return _execute_warm(task) if warm_kernels else execute_config(task)
    here = Path.cwd()  # the job's working_dir, unpacked by Ray on this node
    inject = dict(task.inject)
    if isinstance(inject.get("dataset"), str) and not Path(inject["dataset"]).is_absolute():
        inject["dataset"] = str(here / inject["dataset"])
    scratch = tempfile.mkdtemp(prefix="lab-ray-nb-")  # removed after: the notebook goes to the run's artifacts
    task = replace(task, staged=False, notebook=str(here / task.notebook), inject=inject,
                   output_path=str(Path(scratch) / Path(task.output_path).name),
                   tags={**tags, TAG_STAGED: "runtime_env"})
    _default_cache_dir()
    try:
        out = _execute_warm(task) if warm_kernels else execute_config(task)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    name = Path(task.output_path).name
    return replace(out, notebook=f"artifact {NOTEBOOK_ARTIFACT_DIR}/{name} of run {out.run_id}")


def _default_cache_dir() -> None:
    """Outside a raglab checkout (raglab installed from a wheel on a worker node) ``.cache`` has no repo root to
    sit under: LAB_CACHE_DIR defaults to ``~/.cache/raglab`` then (kernels inherit it)."""
    try:
        repo_root()
    except ConfigError:
        os.environ.setdefault("LAB_CACHE_DIR", str(Path.home() / ".cache" / "raglab"))


def _fail_orphan_run(task: SweepTask, error: str) -> str | None:
    """End FAILED (tag ``error``) the run a dead worker left RUNNING for this task's config; returns its id (None
    when the worker died before creating it)."""
    cl = _client(task.tracking_uri)
    found = None
    for r in search_all_runs(cl, task.experiment_id, f"tags.`{TAG_HASH}` = '{task.config_hash}'"):
        if r.data.tags.get(TAG_PARENT) == task.parent_run_id and r.info.status == "RUNNING":
            set_tags(r.info.run_id, {TAG_ERROR: error}, cl=cl)
            cl.set_terminated(r.info.run_id, "FAILED")
            found = r.info.run_id
    return found


# ----------------------------------------------------------------------------------------------------------
# resume
# ----------------------------------------------------------------------------------------------------------
def mark_stale(cl, experiment_id: str, sweep_name: str) -> list[str]:
    """End as KILLED the runs of sweep ``sweep_name`` left RUNNING (their process died): child runs get an
    ``error`` tag and their configs run again; parents stay reusable. Returns the child run ids.
    Only call while holding the sweep's lock (see :func:`_lock`): then no live process owns such a run."""
    stale = []
    for r in search_all_runs(cl, experiment_id, "attributes.status = 'RUNNING'"):
        tags = r.data.tags
        if tags.get(TAG_NAME) != sweep_name:
            continue
        if tags.get(claims.TAG_KEY) and not claims.stale_reason(r):
            continue  # a live claim (a sweep of the same name on another host): lab.tracking.claims
        if tags.get(TAG_ROLE) != "parent":
            set_tags(r.info.run_id, {TAG_ERROR: "interrupted: left RUNNING by a sweep process that died; "
                                                "the config was run again"}, cl=cl)
            stale.append(r.info.run_id)
        cl.set_terminated(r.info.run_id, "KILLED")
    return stale


def _reusable_parent(cl, experiment_id: str, sweep_name: str, spec_hash: str) -> str | None:
    """Latest parent run of this sweep (same spec hash) that did not finish, or None."""
    runs = [r for r in search_all_runs(cl, experiment_id, f"tags.`{TAG_ROLE}` = 'parent'")
            if r.data.tags.get(TAG_NAME) == sweep_name and r.data.tags.get(TAG_SPEC_HASH) == spec_hash
            and r.info.status != "FINISHED"]
    runs.sort(key=lambda r: r.info.start_time, reverse=True)
    return runs[0].info.run_id if runs else None


def _reused_parent(cl, run_ids: list[str | None]) -> str | None:
    """The sweep parent run of the latest of ``run_ids`` that has one: what a sweep that skipped every config
    reused (None when no run has a parent)."""
    runs = sorted((cl.get_run(r) for r in run_ids if r), key=lambda r: r.info.start_time, reverse=True)
    return next((r.data.tags["mlflow.parentRunId"] for r in runs if r.data.tags.get("mlflow.parentRunId")), None)


def _lock(root, output_dir: Path, name: str, experiment: str):
    """An exclusive, non-blocking file lock for (store, experiment, sweep name); released when the process dies."""
    folder = output_dir if is_uri(root) else root_path(root) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{experiment}\0{name}".encode()).hexdigest()[:12]
    lock = FileLock(str(folder / f"sweep-{key}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(f"sweep {name!r} of experiment {experiment!r} is already running (lock {lock.lock_file}); "
                          "wait for it to end, or end it first") from None
    return lock


# ----------------------------------------------------------------------------------------------------------
# the sweep
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SweepOptions:
    """The options of :func:`run_sweep` after the spec path (documented there), carried through its steps."""

    jobs: int = 1
    executor: str = "local"
    dry_run: bool = False
    ray_address: str | None = None
    root: str | Path = "mlruns"
    output_dir: str | Path | None = None
    progress: bool = True
    kernel_name: str | None = None
    execution_timeout: int | None = None
    echo: Callable[..., object] = print
    publish: dict | None = None
    summary: bool = True
    rerun_on_code_change: bool = False
    parent_tags: dict | None = None
    new_parent: bool = False
    defer_publish: bool = False
    warm_kernels: bool = True
    holdout: float | None = None


@dataclass
class SweepPlan:
    """What a sweep would run (step 1): the spec, its configs in expansion order with their hashes, labels and run
    identities (lab.workbench.resume), the held-out share (None: no holdout) and where executed notebooks go."""

    spec: SweepSpec
    configs: list[dict]
    hashes: list[str]
    keys: list[str]  # the keys whose values vary between configs
    labels: list[str]
    identities: list[RunIdentity]
    fraction: float | None
    out_dir: Path
    uri: str  # the tracking store's URI

    @property
    def seed(self) -> int:
        return int(self.spec.seed or 0)

    @property
    def metric(self) -> str:
        return sweep_metric(self.configs)

    def spec_hash(self) -> str:
        """The identity of the sweep's parent run: its configs, notebook and holdout."""
        holdout = {"holdout": [self.fraction, self.seed]} if self.fraction is not None else {}
        return config_hash({"configs": sorted(self.hashes), "notebook": str(self.spec.notebook.name), **holdout})


def run_sweep(spec_path: str | Path, jobs: int = 1, executor: str = "local", dry_run: bool = False,  # noqa: PLR0913 - the public signature, one keyword per `lab sweep` option; the steps take SweepOptions
              ray_address: str | None = None, root: str | Path = "mlruns", output_dir: str | Path | None = None,
              progress: bool = True, kernel_name: str | None = None, execution_timeout: int | None = None,
              echo=print, publish: dict | None = None, summary: bool = True, rerun_on_code_change: bool = False,
              parent_tags: dict | None = None, new_parent: bool = False, defer_publish: bool = False,
              warm_kernels: bool = True, holdout: float | None = None) -> SweepReport:
    """Run every config of the sweep spec at ``spec_path`` (see the module docstring); returns a SweepReport.

    jobs: configs run at once (processes; Ray tasks in flight). executor: "local" or "ray". dry_run: print the
    configs and which would be skipped (and why the others run), run nothing. root: tracking root (see
    :mod:`lab.tracking.store`). output_dir: executed notebooks (default ``results/sweeps/<name>`` under the repo root).
    kernel_name: default :func:`default_kernel`. execution_timeout: seconds per cell (None: no limit). echo: where
    dry-run and status lines go (None: silent). publish: keys of the spec's ``publish`` mapping (prometheus,
    pushgateway, job, metrics, headers_env) that override or add to the spec's. summary: log the leaderboard
    charts and the HTML report into the parent run (step 5). rerun_on_code_change: the git commit is part of a
    run's identity (see :mod:`lab.workbench.resume`). parent_tags: extra tags of the parent run. new_parent: always
    create a new parent run, even when every config is reused. defer_publish: do not publish here (the caller publishes
    with :func:`publish_report` once it has checked the outcome). warm_kernels: with ``jobs=1`` and the local
    executor, start the next config's kernel (and its notebook's imports) while the current config runs
    (:mod:`lab.workbench.kernels`); False: Papermill starts each kernel when its config begins. holdout: share of
    the queries held out to confirm the winner (overrides the spec's ``holdout``; :mod:`lab.workbench.selection`):
    runs are ranked on the dev queries, the winner scored on the held-out ones (``SweepReport.selection``).
    """
    opts = SweepOptions(jobs=jobs, executor=executor, dry_run=dry_run, ray_address=ray_address, root=root,
                        output_dir=output_dir, progress=progress, kernel_name=kernel_name,
                        execution_timeout=execution_timeout, echo=echo or (lambda *a, **k: None), publish=publish,
                        summary=summary, rerun_on_code_change=rerun_on_code_change, parent_tags=parent_tags,
                        new_parent=new_parent, defer_publish=defer_publish, warm_kernels=warm_kernels,
                        holdout=holdout)
    _check_options(opts)
    t0 = time.perf_counter()
    plan = _plan(spec_path, opts)
    cl = client(root)
    report = SweepReport(plan.spec.name, plan.spec.experiment, None, None, plan.out_dir, dry_run=dry_run)
    if dry_run:
        return _dry_run(plan, opts, cl, report)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(root, plan.out_dir, plan.spec.name, plan.spec.experiment)
    try:
        return _sweep(plan, opts, cl, report, t0)
    finally:
        lock.release()


def _check_options(opts: SweepOptions) -> None:
    if opts.executor not in ("local", "ray"):
        raise ConfigError(f"executor {opts.executor!r}: use 'local' or 'ray'")
    if opts.jobs < 1:
        raise ConfigError(f"jobs={opts.jobs}: must be at least 1")


def _plan(spec_path: str | Path, opts: SweepOptions) -> SweepPlan:
    """Step 1: load and expand the spec, label and hash its configs, refuse a spec with a problem (ConfigError) and
    compute each config's run identity (lab.workbench.resume.run_identity)."""
    spec = load_spec(spec_path)
    configs = expand(spec)
    hashes = [config_hash(c) for c in configs]
    keys = varying_keys(configs)
    labels = [label(c, keys) if keys else spec.notebook.stem for c in configs]
    if len(set(hashes)) != len(hashes):
        dup = next(h for h in hashes if hashes.count(h) > 1)
        raise ConfigError(f"{spec.path}: two configs are identical (hash {dup}); remove the repeated grid/zip value")
    _check_configs(spec, configs, labels)
    fraction = spec.holdout if opts.holdout is None else opts.holdout
    if fraction is not None:
        check_holdout(fraction, configs, int(spec.seed or 0),
                      "--holdout" if opts.holdout is not None else f"{spec.path}: holdout")
    memo: dict = {}
    identities = [run_identity(c, spec.repo_root, opts.rerun_on_code_change, memo,
                               where=f"{spec.path}, config {i} ({lab_})")
                  for i, (c, lab_) in enumerate(zip(configs, labels, strict=True))]
    out_dir = (resolve_repo_path(opts.output_dir, spec.repo_root) if opts.output_dir is not None
               else results_dir("sweeps", spec.name, root=spec.repo_root, create=False))
    return SweepPlan(spec, configs, hashes, keys, labels, identities, fraction, out_dir, tracking_uri(opts.root))


def _decided_outcome(plan: SweepPlan, i: int, decision: Decision, status: str) -> ConfigOutcome:
    """Config ``i``'s outcome as its resume decision says (SKIPPED: the finished run standing for it)."""
    return ConfigOutcome(i, plan.hashes[i], plan.labels[i], plan.configs[i], status, decision.run_id,
                         reason=decision.reason, previous_run_id=decision.previous_run_id)


def _dry_run(plan: SweepPlan, opts: SweepOptions, cl, report: SweepReport) -> SweepReport:
    """Print each config and whether it would run (and why) or be skipped; run nothing."""
    spec, echo = plan.spec, opts.echo
    exp = cl.get_experiment_by_name(spec.experiment)
    report.experiment_id = exp.experiment_id if exp else None
    decisions = _holdout_decisions(cl, decide(cl, report.experiment_id, plan.identities), plan)
    report.outcomes = [_decided_outcome(plan, i, d, "SKIPPED" if d.run_id else "PENDING")
                       for i, d in enumerate(decisions)]
    echo(f"sweep {spec.name!r}: notebook {spec.notebook}, experiment {spec.experiment!r}, store {plan.uri}")
    for o in report.outcomes:
        what = f"skip (finished run {o.run_id})" if o.status == "SKIPPED" else "run"
        echo(f"  [{o.index:3d}] {o.config_hash}  {what:<44} {o.label}"
             + (f"\n        why: {o.reason}" if o.reason else ""))
    echo(report.summary())
    return report


def _sweep(plan: SweepPlan, opts: SweepOptions, cl, report: SweepReport, t0: float) -> SweepReport:
    """Steps 2-6 under the sweep's lock: resume decisions, the parent run, executing the configs that need it,
    the summary and publishing."""
    exp_id = report.experiment_id = _prepare_experiment(plan, opts, cl)
    report.stale_marked = mark_stale(cl, exp_id, plan.spec.name)
    decisions = _resume_decisions(plan, cl, exp_id, report.stale_marked, opts.echo)
    todo = [i for i, d in enumerate(decisions) if d.run_id is None]
    if not todo and not opts.new_parent:
        return _nothing_to_run(plan, opts, cl, report, decisions, t0)
    with _parent_run(plan, opts, cl, exp_id) as parent_run:
        report.parent_run_id = parent_run.run_id
        tasks = _tasks(plan, opts, todo, decisions, exp_id, parent_run.run_id)
        report.outcomes = _execute(plan, opts, tasks, decisions)
        report.seconds = time.perf_counter() - t0
        _record_on_parent(report, plan, opts, cl, len(tasks))
        parent_run.status = "FINISHED" if report.ok else "FAILED"
    _summarise(report, plan, opts)
    return report


def _prepare_experiment(plan: SweepPlan, opts: SweepOptions, cl) -> str:
    """The sweep's experiment (created when new), its runs view set to the strategy, the varying keys shown and
    the sweep's metric; returns its id."""
    exp_id = get_or_create_experiment(plan.spec.experiment, opts.root, cl)
    shown = [k for k in plan.keys
             if any(flatten(c).get(k) not in (None, "{}", "[]", "") for c in plan.configs)]  # no "{}" columns
    set_runs_view(cl, exp_id, ["strategy", *shown], [*DEFAULT_METRICS, plan.metric])
    return exp_id


def _resume_decisions(plan: SweepPlan, cl, exp_id: str, stale: list[str], echo) -> list[Decision]:
    """Step 2: per config, the finished run that stands for it or why it runs (again); says what runs again."""
    decisions = _holdout_decisions(cl, decide(cl, exp_id, plan.identities), plan)
    if stale:
        echo(f"marked {len(stale)} run(s) left RUNNING by an interrupted sweep as KILLED; redoing them")
    for i, d in enumerate(decisions):
        if d.run_id is None and d.previous_run_id:  # a config seen before: say why it runs again
            echo(f"config {i} ({plan.labels[i]}) runs again: {d.reason}")
    return decisions


def _nothing_to_run(plan: SweepPlan, opts: SweepOptions, cl, report: SweepReport, decisions: list[Decision],
                    t0: float) -> SweepReport:
    """Every config has a finished run: the report names them and the parent run they were made under; no parent
    run is created and no summary logged (publishing still happens unless deferred)."""
    report.outcomes = [_decided_outcome(plan, i, d, "SKIPPED") for i, d in enumerate(decisions)]
    report.seconds = time.perf_counter() - t0
    report.parent_run_id = _reused_parent(cl, [o.run_id for o in report.outcomes])
    opts.echo(f"nothing to run: all {len(plan.configs)} configs have finished runs in {plan.spec.experiment!r} "
              f"(same config, data, models and metrics version; parent run {report.parent_run_id})")
    if not opts.defer_publish:
        publish_report(report, plan.spec, opts.publish, opts.root, opts.echo)
    return report


@contextlib.contextmanager
def _parent_run(plan: SweepPlan, opts: SweepOptions, cl, exp_id: str) -> Iterator:
    """Step 3: the sweep's parent run, a new one or the reused unfinished one set RUNNING again; the caller sets its
    status (FINISHED when every config finished, else FAILED); something raising inside ends it FAILED (KILLED on
    KeyboardInterrupt) with tag error, re-raised (lab.tracking.lifecycle.tracked_run)."""
    spec, spec_hash = plan.spec, plan.spec_hash()
    reused = None if opts.new_parent else _reusable_parent(cl, exp_id, spec.name, spec_hash)
    tags = {TAG_ROLE: "parent", TAG_NAME: spec.name, TAG_SPEC_HASH: spec_hash, "mlflow.source.name": str(spec.path),
            **environment_tags(), **(opts.parent_tags or {})}
    with tracked_run(experiment_id=exp_id, run_name=f"sweep {spec.name}", cl=cl, source_type=None,
                     resume_run_id=reused, tags=tags) as parent_run:
        if reused is None:
            _log_parent_inputs(plan, opts, cl, parent_run.run_id)
        yield parent_run


def _log_parent_inputs(plan: SweepPlan, opts: SweepOptions, cl, parent: str) -> None:
    """A new parent run's artifact ``spec/`` (the spec file) and params (notebook, configs, executor, holdout)."""
    spec = plan.spec
    try:
        cl.log_artifact(parent, str(spec.path), "spec")
    except OSError as exc:  # no room for artifacts: each config records it; the sweep goes on
        opts.echo(f"spec not logged to the parent run: {storage_fault(exc) or exc}")
    holdout = {"holdout.fraction": plan.fraction, "holdout.seed": plan.seed} if plan.fraction is not None else {}
    log_params(parent, {"sweep.notebook": str(spec.notebook.name), "sweep.n_configs": len(plan.configs),
                        "sweep.varying": ",".join(plan.keys), "sweep.executor": opts.executor, "sweep.jobs": opts.jobs,
                        "sweep.rerun_on_code_change": opts.rerun_on_code_change, **holdout}, cl=cl)


def _tasks(plan: SweepPlan, opts: SweepOptions, todo: list[int], decisions: list[Decision], experiment_id: str,
           parent_run_id: str) -> list[SweepTask]:
    """One :class:`SweepTask` per index in ``todo`` (indices into the full expansion), each with its resume tags
    (why it runs) and its claim key (no other sweep runs it at the same time)."""
    spec, root = plan.spec, opts.root
    root_value = str(root) if is_uri(root) else str(root_path(root))
    try:
        nb_rel = str(spec.notebook.relative_to(spec.repo_root))
    except ValueError:
        nb_rel = str(spec.notebook)
    names = short_labels(plan.labels)  # run names in the MLflow UI: what varies, short ("kg · base bm25")
    tasks = []
    for i in todo:
        config, h = plan.configs[i], plan.hashes[i]
        inject = {"tracking_root": root_value, "experiment": spec.experiment}
        if isinstance(config.get("dataset"), str):
            inject["dataset"] = str(resolve_repo_path(config["dataset"], spec.repo_root))
        tags = {**plan.identities[i].tags(), TAG_REASON: decisions[i].reason,
                "sweep.previous_run_id": decisions[i].previous_run_id, **_holdout_tags(plan)}
        tasks.append(SweepTask(
            index=i, config=config, config_hash=h, label=plan.labels[i], run_name=names[i], inject=inject,
            notebook=str(spec.notebook), notebook_rel=nb_rel, output_path=str(plan.out_dir / f"{i:03d}_{h}.ipynb"),
            tracking_uri=plan.uri, experiment_id=experiment_id, parent_run_id=parent_run_id,
            sweep_name=spec.name, kernel_name=opts.kernel_name, execution_timeout=opts.execution_timeout,
            tags={k: v for k, v in tags.items() if v},
            claim_key=plan.identities[i].claim_key(replaces=decisions[i].previous_run_id)))
    return tasks


def _execute(plan: SweepPlan, opts: SweepOptions, tasks: list[SweepTask],
             decisions: list[Decision]) -> list[ConfigOutcome]:
    """Step 4: run the tasks on the chosen executor behind a progress bar; every config's outcome in expansion
    order (the ones not run: SKIPPED, their finished run standing for them)."""
    outcomes = {i: _decided_outcome(plan, i, d, "SKIPPED") for i, d in enumerate(decisions) if d.run_id is not None}
    lines = not opts.progress or not sys.stderr.isatty()  # no bar to show phases on: one line per phase
    with watch_phases(plan.spec.name, lines, opts.echo) as watch:
        tasks = [replace(t, phase_dir=watch.folder) for t in tasks]
        stream: Iterator[ConfigOutcome] = iter(())
        if tasks and opts.executor == "ray":
            stream = _run_ray(tasks, opts.jobs, opts.ray_address, opts.warm_kernels)
        elif tasks:
            stream = _run_local(tasks, opts.jobs, opts.warm_kernels)
        pbar = bar(stream, desc=f"sweep {plan.spec.name}", total=len(tasks), enabled=opts.progress and bool(tasks),
                   unit="config")
        watch.bar = pbar
        _collect_outcomes(pbar, decisions, outcomes, opts.echo)
    return [outcomes[i] for i in range(len(plan.configs))]


def _record_on_parent(report: SweepReport, plan: SweepPlan, opts: SweepOptions, cl, n_run_now: int) -> None:
    """The parent run's counts and times, tag ``sweep.ok`` and, with a holdout, the winner's held-out check."""
    parent = report.parent_run_id
    log_metrics(parent, {"n_configs": len(plan.configs), "n_finished": report.n_finished + report.n_skipped,
                         "n_failed": report.n_failed, "n_run_now": n_run_now, "seconds": report.seconds}, cl=cl)
    set_tags(parent, {"sweep.ok": str(report.ok).lower()}, cl=cl)
    if plan.fraction is not None:
        _select(report, cl, plan.metric, opts.root, plan.fraction, plan.seed, opts.echo)


def _summarise(report: SweepReport, plan: SweepPlan, opts: SweepOptions) -> None:
    """Steps 5 and 6: the summary artifacts of the parent run (unless ``summary`` is off) and publishing (unless
    deferred)."""
    if opts.summary:
        _log_summary(report, plan.metric, opts.root, opts.echo)
    if not opts.defer_publish:
        publish_report(report, plan.spec, opts.publish, opts.root, opts.echo)


def _collect_outcomes(pbar, decisions: list[Decision], outcomes: dict[int, ConfigOutcome], echo) -> None:
    """Each config's outcome as the executor yields its result (``pbar``, the progress bar over the stream), into
    ``outcomes`` by index, with its decision's reason unless a claim gave one; skips and failures are written on the
    bar (through ``echo`` without one) and the bar shows the count of failures."""
    failed = 0
    write = pbar.write if hasattr(pbar, "write") else echo
    for o in pbar:
        o.reason = o.reason or decisions[o.index].reason  # a claim's reason: who ran it
        o.previous_run_id = decisions[o.index].previous_run_id
        outcomes[o.index] = o
        if o.status == "SKIPPED":  # another sweep ran it meanwhile (lab.tracking.claims)
            write(f"config {o.index} ({o.label}): {o.reason}")
        elif o.status != "FINISHED":
            failed += 1
            write(f"config {o.index} ({o.label}) {o.status}: {o.error}")
        if hasattr(pbar, "set_postfix"):
            pbar.set_postfix(failed=failed)


def _holdout_decisions(cl, decisions: list[Decision], plan: SweepPlan) -> list[Decision]:
    """Decisions with runs scored under another holdout not reused (lab.workbench.selection.holdout_decisions)."""
    return holdout_decisions(cl, decisions, plan.fraction, plan.seed)


def _holdout_tags(plan: SweepPlan) -> dict:
    return {} if plan.fraction is None else holdout_tags(plan.fraction, plan.seed)


def _select(report: SweepReport, cl, metric: str, root, fraction: float, seed: int, echo) -> None:
    """The winner's held-out check recorded on the parent (lab.workbench.selection.record_selection); a failure
    is reported in ``report.selection_error``, not raised (the runs are logged)."""
    run_ids = [o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id]
    try:
        report.selection = record_selection(cl, report.parent_run_id, report.experiment, run_ids, metric, root,
                                            fraction, seed)
        echo(selection_line(report.selection))
    except Exception as exc:  # noqa: BLE001 - reported, the runs stay
        report.selection_error = f"{type(exc).__name__}: {exc}"
        echo(f"held-out check not recorded: {report.selection_error}")


def sweep_metric(configs: list[dict], default: str = "ndcg@10") -> str:
    """The metric a sweep ranks by: its configs' ``metric`` param when they set one (notebooks 02-04 take it),
    else ``default``."""
    values = {c.get("metric") for c in configs if isinstance(c.get("metric"), str)}
    return values.pop() if len(values) == 1 else default


def _log_summary(report: SweepReport, metric: str, root, echo) -> None:
    """Leaderboard charts, CSV and HTML report of the sweep's finished runs, logged into its parent run under
    ``summary/`` (step 5). Failures are reported in ``report.summary_error``, not raised."""
    run_ids = [o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id]
    if not run_ids or not report.parent_run_id:
        return
    cl = client(root)
    try:
        with tempfile.TemporaryDirectory(prefix="lab-sweep-summary-") as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore", CompareWarning)
            out = Path(tmp)
            df = experiment_leaderboard(report.experiment, metric=metric, root=root, run_ids=run_ids)
            if df.empty:
                return
            title = f"{report.name}: {metric}"
            files = [plot_leaderboard(df, out / "leaderboard.png", metric=metric, title=title)]
            quality_vs_latency(df, metric, label="label", title=f"{report.name}: quality vs latency").savefig(
                out / "quality_vs_latency.png", dpi=120)
            df.to_csv(out / "leaderboard.csv", index=False)
            files += [out / "quality_vs_latency.png", out / "leaderboard.csv"]
            notes: list[str] = []
            runs = [r for r in runs_from_mlflow(report.experiment, root, metric, None, notes) if r.run_id in run_ids]
            if runs:
                files.append(build_report(runs, out / "report.html", [metric],
                                          title=f"Retrieval report: sweep {report.name}", notes=notes,
                                          trust=df.attrs.get("trust")).path)
            for f in files:
                cl.log_artifact(report.parent_run_id, str(f), "summary")
                report.summary_artifacts.append(f"summary/{Path(f).name}")
    except Exception as exc:  # noqa: BLE001 - the runs are logged; a summary failure must not lose them
        report.summary_error = f"{type(exc).__name__}: {exc}"
        echo(f"sweep summary not logged to the parent run: {report.summary_error}")


def _check_configs(spec, configs: list[dict], labels: list[str]) -> None:
    """Refuse to start (dry run included) when a config has a problem: one ConfigError line per problem
    (:func:`lab.workbench.sweep_check.validate_sweep`)."""
    problems = validate_sweep(spec, configs, labels)
    if len(problems) == 1:  # one problem, one line
        raise ConfigError(f"{problems[0]}; sweep {spec.name!r} not started: fix it and run again")
    if problems:
        raise ConfigError("\n".join(problems + [f"sweep {spec.name!r} not started: {len(problems)} problem(s) in "
                                                 f"{spec.path}; fix them and run again"]))


def publish_report(report: SweepReport, spec, overrides: dict | None, root, echo=print, extra_samples=()) -> None:
    """Publish the finished runs of the sweep's configs when the spec or ``overrides`` ask (see step 6);
    ``extra_samples`` (lab.workbench.monitoring.Sample) go into the same exposition."""
    _publish(report, spec, overrides, root, echo or (lambda *a, **k: None), extra_samples)


def _publish(report: SweepReport, spec, overrides: dict | None, root, echo, extra_samples=()) -> None:
    """Publish the finished runs of the sweep's configs when the spec or ``overrides`` ask (see step 6)."""
    merged = {**(spec.publish or {}), **{k: v for k, v in (overrides or {}).items() if v is not None}}
    if not merged:
        return
    run_ids = [o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id]
    if not run_ids:
        report.publish_error = "no finished run to publish"
        echo(f"publish: {report.publish_error}")
        return
    try:
        opts = parse_publish(merged, "publish")
        target = opts.get("prometheus")
        report.published = monitoring.publish(
            spec.experiment, prometheus=resolve_repo_path(target, spec.repo_root) if target else None,
            pushgateway=opts.get("pushgateway"), job=opts.get("job", "raglab"), metrics=opts["metrics"], root=root,
            run_ids=run_ids, headers_env=opts.get("headers_env"), extra_samples=extra_samples)
        echo(f"published {len(run_ids)} run(s) of {spec.experiment!r} to {', '.join(report.published)}")
    except LabError as exc:
        report.publish_error = str(exc)
        echo(f"publish failed: {exc}")


def sweep_configs(spec_path: str | Path) -> list[dict]:
    """The expanded configs of a spec (a convenience for notebooks and tests)."""
    return expand(load_spec(spec_path))
