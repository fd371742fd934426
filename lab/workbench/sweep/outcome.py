"""What a sweep hands around: one config's task (:class:`SweepTask`, pickled to workers), what happened to it
(:class:`ConfigOutcome`) and the whole sweep's :class:`SweepReport`; the tags a sweep writes on its runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

#: Tags written by the sweep (TAG_PARENT and TAG_ROLE are defined in lab.tracking.store, TAG_ERROR in
#: lab.tracking.lifecycle, which every layer above tracking reads).
TAG_HASH = "config_hash"
TAG_NAME = "sweep.name"
TAG_SPEC_HASH = "sweep.spec_hash"
NOTEBOOK_ARTIFACT_DIR = "notebook"
ERROR_ARTIFACT = "error.txt"


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


