"""One lifecycle for every MLflow run raglab creates: :func:`tracked_run`.

    with tracked_run("testset", run_name="generate on scifact", tracking_root=tracking_root, environment=True) as run:
        run.log_params({...})
        run.log_metrics({...})

Conventions
- Creation: ``create_run`` in experiment ``experiment`` (a name; created by
  :func:`lab.tracking.store.get_or_create_experiment` when absent) or ``experiment_id``, named ``run_name``, with
  tags ``mlflow.source.type`` = ``source_type`` ("LOCAL"; None: no such tag), ``mlflow.parentRunId`` =
  ``parent_run_id`` (a nested run: the MLflow UI shows it under its parent), the environment tags of
  :func:`lab.tracking.store.environment_tags` when ``environment``, then ``tags`` (which win on a clash).
  Tag keys and values are made as :func:`lab.tracking.store.set_tags` makes them (safe keys, long values cut);
  None values are left out. ``resume_run_id`` instead takes up an existing run (the creation arguments are then
  unused): it is set RUNNING again and loses a previous ``error`` tag.
- End, as MLflow's own ``mlflow.start_run`` context manager does (FINISHED on a normal exit, FAILED on an
  exception), plus KILLED for an interrupt and a status the caller may choose:
  normal exit -> ``run.status`` when the caller set it (e.g. "FAILED" when some of its parts failed), else
  FINISHED; ``run.fail(message)`` -> FAILED with tag ``error`` = message, nothing raised (a failure the caller
  caught and recorded); an exception -> FAILED, ``KeyboardInterrupt`` -> KILLED, both with tag ``error`` =
  ``"<ExceptionType>: <message>"`` (:data:`TAG_ERROR`, the tag lab.workbench.sweep has always written), and the
  exception is re-raised unchanged. While an exception is propagating, a failure to tag or end the run (the
  store itself may be what failed) is swallowed, so the first error is the one the caller sees.
- ``keep_ended``: a run that something else ended while it ran (its status is no longer RUNNING when the block
  exits; e.g. a resumed sweep marked it KILLED) keeps that status: a run is never revived.
- After the block, ``run.final_status`` is the status the run ended with.
Statuses are MLflow's ``RunStatus`` names (RUNNING, FINISHED, FAILED, KILLED; mlflow.entities.RunStatus).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from lab.core.errors import ConfigError
from lab.tracking.store import (
    MAX_TAG,
    TAG_PARENT,
    client,
    environment_tags,
    get_or_create_experiment,
    log_metrics,
    log_params,
    safe_key,
    set_tags,
    truncate,
)

#: Tag holding what made a run fail ("ValueError: ..."); the name lab.workbench.sweep has always used.
TAG_ERROR = "error"
#: Tag naming where a run came from (MLflow's own name; values LOCAL, NOTEBOOK, ...).
TAG_SOURCE_TYPE = "mlflow.source.type"
FINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")


def describe_error(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, or the type alone when the message is empty (``KeyboardInterrupt``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class TrackedRun:
    """A run inside :func:`tracked_run`: its id, the client, and log helpers bound to both.

    ``status``: the status a normal exit ends the run with (None: FINISHED; else FINISHED, FAILED or KILLED);
    ``error``: the ``error`` tag a normal exit sets; ``final_status``: set once the block has exited."""

    def __init__(self, run_id: str, cl, experiment_id: str):
        self.run_id, self.cl, self.experiment_id = run_id, cl, experiment_id
        self._status: str | None = None
        self.error: str | None = None
        self.final_status: str | None = None

    @property
    def status(self) -> str | None:
        return self._status

    @status.setter
    def status(self, value: str | None) -> None:
        if value is not None and value not in FINAL_STATUSES:
            raise ConfigError(f"run status {value!r}: use one of {', '.join(FINAL_STATUSES)}")
        self._status = value

    def __repr__(self) -> str:
        return f"TrackedRun({self.run_id!r}, status={self.status!r}, final_status={self.final_status!r})"

    def fail(self, error: str) -> None:
        """End FAILED with tag ``error`` = ``error`` when the block exits (nothing is raised)."""
        self.status, self.error = "FAILED", error

    def log_params(self, params: Mapping[str, Any], **kwargs) -> dict[str, str]:
        return log_params(self.run_id, params, cl=self.cl, **kwargs)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        log_metrics(self.run_id, metrics, cl=self.cl, step=step)

    def log_metric(self, key: str, value: float, step: int = 0) -> None:
        """One value of a metric history, the name as given (not mapped)."""
        self.cl.log_metric(self.run_id, key, value, step=step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        set_tags(self.run_id, tags, cl=self.cl)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.cl.log_artifact(self.run_id, str(path), artifact_path)


@contextmanager
def tracked_run(experiment: str | None = None, *, experiment_id: str | None = None, run_name: str | None = None,
                tags: Mapping[str, Any] | None = None, tracking_root: str | Path = "mlruns",
                parent_run_id: str | None = None,
                cl=None, environment: bool = False, source_type: str | None = "LOCAL",
                resume_run_id: str | None = None, keep_ended: bool = False) -> Iterator[TrackedRun]:
    """Create (or resume) an MLflow run, yield a :class:`TrackedRun`, and end it as the module docstring says.

    experiment: experiment name (created when absent); experiment_id: an experiment's id instead (one of the two,
    unless resuming). tracking_root: the tracking store (see lab.tracking.store), used when ``cl`` (an MlflowClient)
    is None.
    """
    cl = cl or client(tracking_root)
    if resume_run_id is not None:
        run = cl.get_run(resume_run_id)
        cl.update_run(resume_run_id, status="RUNNING")
        if TAG_ERROR in run.data.tags:
            cl.delete_tag(resume_run_id, TAG_ERROR)
        handle = TrackedRun(resume_run_id, cl, run.info.experiment_id)
    else:
        if experiment_id is None:
            if not experiment:
                raise ConfigError("tracked_run: give experiment (a name) or experiment_id")
            experiment_id = get_or_create_experiment(experiment, tracking_root, cl)
        all_tags: dict[str, Any] = {}
        if source_type is not None:
            all_tags[TAG_SOURCE_TYPE] = source_type
        if parent_run_id is not None:
            all_tags[TAG_PARENT] = parent_run_id
        if environment:
            all_tags.update(environment_tags())
        all_tags.update(tags or {})
        created = cl.create_run(experiment_id, run_name=run_name,
                                tags={safe_key(k): truncate(str(v), MAX_TAG) for k, v in all_tags.items()
                                      if v is not None})
        handle = TrackedRun(created.info.run_id, cl, experiment_id)
    try:
        yield handle
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        try:
            set_tags(handle.run_id, {TAG_ERROR: describe_error(exc)}, cl=cl)
        except Exception:  # noqa: BLE001 - the store may be what failed; the caller gets the first error
            pass
        try:
            handle.final_status = _end(cl, handle.run_id, status, keep_ended)
        except Exception:  # noqa: BLE001 - as above
            pass
        raise
    if handle.error is not None:
        set_tags(handle.run_id, {TAG_ERROR: handle.error}, cl=cl)
    handle.final_status = _end(cl, handle.run_id, handle.status or "FINISHED", keep_ended)


def _end(cl, run_id: str, status: str, keep_ended: bool) -> str:
    """Set ``status`` (unless ``keep_ended`` and the run is no longer RUNNING); returns the run's final status."""
    if keep_ended:
        current = cl.get_run(run_id).info.status
        if current != "RUNNING":
            return current
    cl.set_terminated(run_id, status)
    return status
