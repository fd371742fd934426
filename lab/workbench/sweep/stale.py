"""What an interrupted sweep left behind: runs left RUNNING by a dead process (marked KILLED so their configs run
again), a parent run to reuse, and the lock that makes RUNNING mean dead."""
from __future__ import annotations

import hashlib
from pathlib import Path

from filelock import FileLock, Timeout

from lab.core.errors import ConfigError
from lab.tracking import claims
from lab.tracking.lifecycle import TAG_ERROR
from lab.tracking.store import TAG_ROLE, is_uri, root_path, search_all_runs, set_tags
from lab.workbench.sweep.outcome import TAG_NAME, TAG_SPEC_HASH


def mark_stale(cl, experiment_id: str, sweep_name: str) -> list[str]:
    """End as KILLED the runs of sweep ``sweep_name`` left RUNNING (their process died): child runs get an
    ``error`` tag and their configs run again; parents stay reusable. Returns the child run ids.
    Only call while holding the sweep's lock (see :func:`sweep_lock`): then no live process owns such a run."""
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


def reusable_parent(cl, experiment_id: str, sweep_name: str, spec_hash: str) -> str | None:
    """Latest parent run of this sweep (same spec hash) that did not finish, or None."""
    runs = [r for r in search_all_runs(cl, experiment_id, f"tags.`{TAG_ROLE}` = 'parent'")
            if r.data.tags.get(TAG_NAME) == sweep_name and r.data.tags.get(TAG_SPEC_HASH) == spec_hash
            and r.info.status != "FINISHED"]
    runs.sort(key=lambda r: r.info.start_time, reverse=True)
    return runs[0].info.run_id if runs else None


def reused_parent(cl, run_ids: list[str | None]) -> str | None:
    """The sweep parent run of the latest of ``run_ids`` that has one: what a sweep that skipped every config
    reused (None when no run has a parent)."""
    runs = sorted((cl.get_run(r) for r in run_ids if r), key=lambda r: r.info.start_time, reverse=True)
    return next((r.data.tags["mlflow.parentRunId"] for r in runs if r.data.tags.get("mlflow.parentRunId")), None)


def sweep_lock(tracking_root, output_dir: Path, name: str, experiment: str):
    """An exclusive, non-blocking file lock for (store, experiment, sweep name); released when the process dies."""
    folder = output_dir if is_uri(tracking_root) else root_path(tracking_root) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{experiment}\0{name}".encode()).hexdigest()[:12]
    lock = FileLock(str(folder / f"sweep-{key}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(f"sweep {name!r} of experiment {experiment!r} is already running (lock {lock.lock_file}); "
                          "wait for it to end, or end it first") from None
    return lock

