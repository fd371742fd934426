"""One config, once: its child run, the notebook executed by Papermill (on a prewarmed kernel when there is one),
the executed notebook logged, the run ended; with a claim (:mod:`lab.tracking.claims`) so that no two sweeps run
the same config at the same time. The same code runs in-process, in pool workers and in Ray tasks."""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

import lab
from lab.core import phases
from lab.core.errors import ConfigError
from lab.core.flat import flatten
from lab.tracking import claims
from lab.tracking.lifecycle import tracked_run
from lab.tracking.store import TAG_PARENT, log_params, set_tags, storage_fault
from lab.tracking.ui import RUN_TYPE_EVALUATION, RUN_TYPE_TAG
from lab.workbench.kernels import shutdown
from lab.workbench.sweep.outcome import (
    ERROR_ARTIFACT,
    NOTEBOOK_ARTIFACT_DIR,
    TAG_HASH,
    TAG_NAME,
    ConfigOutcome,
    SweepTask,
)

#: Environment every config's process starts with unless the user set it: offline, no telemetry.
ENV_DEFAULTS = {"MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}


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


def run_client(tracking_uri: str):
    """An :class:`mlflow.MlflowClient` on ``tracking_uri`` (a task's store, already created by the sweep)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _yield_to_winner(task: SweepTask, out: ConfigOutcome, winner: str) -> ConfigOutcome:
    """Delete this config's run in favour of another sweep's claim ``winner`` and wait for it: SKIPPED when it
    finished (its run stands for this config), else FAILED (:func:`execute_config` claims again)."""
    cl = run_client(task.tracking_uri)
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
    for k, v in ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    t0 = time.perf_counter()
    cl = run_client(task.tracking_uri)
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

