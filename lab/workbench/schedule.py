"""Scheduled sweeps: run a sweep, compare each config with the same config of the previous scheduled sweep, write
the report, publish, and say (exit 1) when retrieval got worse.

Flow of :func:`run_scheduled` (``lab sweep SPEC --scheduled``, one command for a cron line or a CI schedule)
1. The sweep runs with a new parent run tagged ``raglab.scheduled=true``, ``raglab.schedule=<name>`` (default the
   sweep's name) and ``raglab.sequence=<n>`` (1 + the highest sequence of that schedule in the experiment). Configs
   whose finished run still stands (same config, data, models, metrics version: :mod:`lab.workbench.resume`) are
   reused, so an unchanged rerun costs seconds. The parent holds ``schedule.json``: per config its run (run now or
   reused),
   why it ran again, and the dataset fingerprints and model weights that run recorded.
2. A sweep that cannot finish (a dataset folder gone: before anything runs; an endpoint down: the config fails)
   stops here with one line and a non-zero exit: nothing is compared, written or published, its parent is ended
   FAILED (``sweep.ok=false``) and is never a baseline, so the previous scheduled sweep stays the reference.
3. Comparison (:func:`compare_records`) with the latest earlier scheduled sweep of the same name that finished:
   per config (by config hash) and gated metric, the rule of ``lab gate`` (:func:`lab.analysis.gate.run_gate`: drop =
   previous - current, failed when above ``max_drop``, absolute or relative; ``significant_only`` fails only
   significant drops). Paired test (sign-flip randomisation over queries) when both runs scored the same query
   ids; when the test set changed, the plain difference with a note (no pairing, ``significant_only`` not
   applied to that config). A reused run compared with itself is "same run". Configs new in this sweep, or gone
   from it, are listed.
4. Written to ``report_dir`` (default ``results/scheduled/<schedule>/``): ``comparison.txt`` (the table printed),
   ``comparison.json``, ``report.html`` (lab report of this sweep's runs with the comparison and the trends);
   the same files are logged to the parent run.
5. Published (when the spec's ``publish`` key or the command asks) as lab.workbench.monitoring does for any sweep, plus
   ``raglab_scheduled_metric_change`` (current - previous) and ``raglab_scheduled_regression`` (1 when that metric
   failed the rule) per config and metric, and ``raglab_scheduled_sequence``.
6. Exit code: 0 every metric holds (or nothing to compare yet), 1 a metric dropped more than allowed or a config
   failed, 2 bad input (spec, options, a dataset folder gone), as ``lab gate``.

Trends: :func:`lab.analysis.trends.schedule_history` lists each config's headline metric with its CI over the
scheduled sweeps of an experiment, with ``dataset_changed`` / ``model_changed`` set where that config's run saw other
data or weights than
in the sweep before; :func:`lab.analysis.plots.trend_lines` draws it (``lab report`` and notebook 03 show it).
"""
from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from lab.analysis.gate import GateRow, GateWarning, ResultFile, allowed_drop, gate_settings, run_gate
from lab.analysis.report import build_report, esc, runs_from_mlflow, trends_html
from lab.analysis.trends import (  # noqa: F401
    RECORD_ARTIFACT,
    TAG_SCHEDULE,
    TAG_SCHEDULED,
    TAG_SEQUENCE,
    read_record,
    schedule_history,
    scheduled_parents,
)
from lab.core.atomic import write_text_atomic
from lab.core.errors import ConfigError
from lab.core.flat import nan_to_none
from lab.core.paths import resolve_repo_path, results_dir
from lab.metrics.stats import N_RESAMPLES
from lab.tracking.store import client, load_per_query, log_file, set_tags
from lab.workbench.config import load_spec
from lab.workbench.monitoring import Sample
from lab.workbench.resume import recorded_datasets, recorded_models
from lab.workbench.sweep import publish_report, run_sweep

TAG_PREVIOUS = "raglab.schedule.previous"
TAG_REGRESSION = "raglab.schedule.regression"
COMPARISON_JSON = "comparison.json"
COMPARISON_TXT = "comparison.txt"
REPORT_HTML = "report.html"


# ---------------------------------------------------------------------------------------------------------------
# records of scheduled sweeps
# ---------------------------------------------------------------------------------------------------------------
def make_record(report, schedule: str, sequence: int, cl) -> dict:
    """The ``schedule.json`` of a finished sweep: per config its run and what that run recorded."""
    configs = []
    for o in report.outcomes:
        entry = {"index": o.index, "config_hash": o.config_hash, "label": o.label, "status": o.status,
                 "run_id": o.run_id if o.status in ("FINISHED", "SKIPPED") else None,
                 "reused": o.status == "SKIPPED", "reason": o.reason, "previous_run_id": o.previous_run_id,
                 "error": o.error}
        if entry["run_id"]:
            tags = cl.get_run(entry["run_id"]).data.tags
            entry["datasets"] = recorded_datasets(tags) or {}
            entry["models"] = {m.get("name") or m.get("identity"): m.get("sha256") or m.get("identity")
                               for m in (recorded_models(tags) or [])}
        configs.append(entry)
    return {"schedule": schedule, "sequence": sequence, "experiment": report.experiment, "sweep": report.name,
            "parent_run_id": report.parent_run_id, "ok": report.ok, "time": time.time(), "configs": configs}


# ---------------------------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ConfigComparison:
    """One config of two scheduled sweeps: the gate rows (lab.analysis.gate.GateRow per metric), whether the test was
    paired, the note (test set changed, same run), and why the config ran again ("" when reused)."""

    config_hash: str
    label: str
    previous_run_id: str
    current_run_id: str
    rows: list = field(default_factory=list)
    paired: bool = False
    same_run: bool = False
    note: str = ""
    reason: str = ""

    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.rows)


@dataclass
class ScheduleComparison:
    """A scheduled sweep against the previous one of its schedule (see the module docstring, step 3)."""

    schedule: str
    experiment: str
    previous: dict
    current: dict
    configs: list[ConfigComparison]
    max_drop: float
    relative: bool
    significant_only: bool
    alpha: float
    new_configs: list[str] = field(default_factory=list)
    gone_configs: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return any(c.failed for c in self.configs)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressed else 0

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule, "experiment": self.experiment, "regressed": self.regressed,
            "previous": {"sequence": self.previous.get("sequence"),
                         "parent_run_id": self.previous.get("parent_run_id")},
            "current": {"sequence": self.current.get("sequence"), "parent_run_id": self.current.get("parent_run_id")},
            "max_drop": self.max_drop, "relative": self.relative, "significant_only": self.significant_only,
            "alpha": self.alpha, "new_configs": self.new_configs, "gone_configs": self.gone_configs,
            "configs": [{"config_hash": c.config_hash, "label": c.label, "previous_run_id": c.previous_run_id,
                         "current_run_id": c.current_run_id, "paired": c.paired, "same_run": c.same_run,
                         "note": c.note, "reason": c.reason, "failed": c.failed,
                         "rows": [{k: nan_to_none(v) for k, v in vars(r).items()} | {"failed": r.failed}
                                  for r in c.rows]}
                        for c in self.configs]}

    def table(self) -> str:
        """The text ``lab sweep --scheduled`` and ``lab compare --previous`` print."""
        allow = f"{self.max_drop:g} of the previous value" if self.relative else f"{self.max_drop:g}"
        p, c = self.previous, self.current
        lines = [f"scheduled sweep {self.schedule!r} #{c.get('sequence')} vs #{p.get('sequence')} (experiment "
                 f"{self.experiment!r}); a metric fails when it drops by more than {allow}"
                 + (f" and significantly (alpha {self.alpha:g})" if self.significant_only else "")]

        def f4(v):
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"

        rows = []
        for cc in self.configs:
            for r in cc.rows:
                rows.append({
                    "config": cc.label[:40], "metric": r.metric,
                    "previous": f"{f4(r.baseline)} ({cc.previous_run_id[:8]})",
                    "current": f"{f4(r.current)} ({cc.current_run_id[:8]})", "diff": f"{r.diff:+.4f}",
                    "paired 95% CI": "-" if math.isnan(r.ci_low) else f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]",
                    "p": "-" if math.isnan(r.p_value) else f"{r.p_value:.2g}",
                    "verdict": "same run" if cc.same_run else r.verdict})
        if rows:
            lines.append(pd.DataFrame(rows).to_string(index=False))
        for cc in self.configs:
            if cc.reason and not cc.same_run:
                lines.append(f"  {cc.label}: ran again: {cc.reason}")
            if cc.note:
                lines.append(f"  {cc.label}: {cc.note}")
        if self.new_configs:
            lines.append(f"new in this sweep (nothing to compare): {', '.join(self.new_configs)}")
        if self.gone_configs:
            lines.append(f"in the previous sweep only: {', '.join(self.gone_configs)}")
        failed = [(cc, r) for cc in self.configs for r in cc.rows if r.failed]
        for cc, r in failed:
            sig = (f", paired p={r.p_value:.2g}, 95% CI [{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
                   if not math.isnan(r.p_value) else ", no paired test")
            lines.append(f"REGRESSION: {cc.label} {r.metric} dropped from {r.baseline:.4f} to {r.current:.4f} "
                         f"({r.diff:+.4f}{sig}); allowed {r.allowed:.4f}")
        if not failed:
            n = sum(len(cc.rows) for cc in self.configs)
            lines.append(f"OK: {n} metric(s) of {len(self.configs)} config(s) hold against the previous "
                         "scheduled sweep")
        return "\n".join(lines)


def _result(run_id: str, cl, tracking_root):
    """A lab.analysis.gate.ResultFile of a run: its per-query table, metrics version and dataset fingerprint."""
    run = cl.get_run(run_id)
    pq = load_per_query(run_id, tracking_root, cl)
    pq.index.name = "query_id"
    tags = run.data.tags
    means = {str(m): float(pq[m].mean()) for m in pq.columns}
    meta = {"dataset_fingerprint": tags.get("dataset_fingerprint"), "n_queries": len(pq)}
    return ResultFile(Path(f"run {run_id[:8]}"), "per_query", means, pq, dict(means), tags.get("metrics_version"), meta)


def compare_records(previous: dict, current: dict, metrics: Sequence[str] = ("ndcg@10",), max_drop: float = 0.02,
                    relative: bool = False, significant_only: bool = False, alpha: float = 0.05,
                    n_resamples: int = N_RESAMPLES, seed: int = 0, tracking_root="mlruns",
                    cl=None) -> ScheduleComparison:
    """Compare two scheduled sweeps (their ``schedule.json`` records) config by config (module docstring, step 3)."""
    cl = cl or client(tracking_root)
    metrics = list(dict.fromkeys(metrics))
    prev = {c["config_hash"]: c for c in previous.get("configs", []) if c.get("run_id")}
    cur = {c["config_hash"]: c for c in current.get("configs", []) if c.get("run_id")}
    out = []
    for h, c in cur.items():
        if h not in prev:
            continue
        p = prev[h]
        cc = ConfigComparison(h, c["label"], p["run_id"], c["run_id"], reason=c.get("reason") or "")
        if p["run_id"] == c["run_id"]:
            m = cl.get_run(c["run_id"]).data.metrics
            for name in metrics:
                v = m.get(name.replace("@", "_at_"), math.nan)
                cc.rows.append(GateRow(name, v, v, 0.0, allowed_drop(v, max_drop, relative), False))
            cc.same_run, cc.note = True, "same run reused: nothing that decides its numbers changed"
            out.append(cc)
            continue
        base, now = _result(p["run_id"], cl, tracking_root), _result(c["run_id"], cl, tracking_root)
        sig_only = significant_only
        if set(base.per_query.index) == set(now.per_query.index):
            cc.paired = True
        else:
            nb, nn = len(base.per_query), len(now.per_query)
            common = len(base.per_query.index.intersection(now.per_query.index))
            cc.note = (f"the test set changed ({nb} queries before, {nn} now, {common} in common): plain difference of "
                       "the means, no paired test" + ("; --significant-only not applied" if significant_only else ""))
            base.per_query = now.per_query = None
            sig_only = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GateWarning)
            g = run_gate(base, now, metrics, max_drop=max_drop, relative=relative, significant_only=sig_only,
                         alpha=alpha, n_resamples=n_resamples, seed=seed)
        cc.rows = g.rows
        extra = [w for w in g.warnings if not w.startswith("dataset fingerprints differ")]
        if extra:
            cc.note = "; ".join([cc.note, *extra]) if cc.note else "; ".join(extra)
        out.append(cc)
    return ScheduleComparison(
        current.get("schedule", ""), current.get("experiment", ""), previous, current, out, abs(max_drop), relative,
        significant_only, alpha,
        new_configs=[cur[h]["label"] for h in cur if h not in prev],
        gone_configs=[prev[h]["label"] for h in prev if h not in cur])


def previous_pair(cl, experiment: str, schedule: str | None = None) -> tuple[dict, dict]:
    """The records of the latest finished scheduled sweep of ``experiment`` (of ``schedule``; default the schedule
    of the latest one) and of the finished one before it; ConfigError when there are fewer than two."""
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        raise ConfigError(f"no experiment {experiment!r} in the store; run `lab sweep SPEC --scheduled` first")
    parents = [r for r in scheduled_parents(cl, exp.experiment_id, schedule) if r.data.tags.get("sweep.ok") == "true"]
    if schedule is None and parents:
        schedule = parents[-1].data.tags.get(TAG_SCHEDULE)
        parents = [r for r in parents if r.data.tags.get(TAG_SCHEDULE) == schedule]
    records = [rec for rec in (read_record(cl, r.info.run_id) for r in parents) if rec]
    if len(records) < 2:
        raise ConfigError(f"experiment {experiment!r} has {len(records)} finished scheduled sweep(s)"
                          + (f" of schedule {schedule!r}" if schedule else "")
                          + "; comparing with the previous one needs two (lab sweep SPEC --scheduled)")
    return records[-2], records[-1]


# ---------------------------------------------------------------------------------------------------------------
# trends
# ---------------------------------------------------------------------------------------------------------------
def comparison_html(comp: ScheduleComparison) -> str:
    return f"<pre>{esc(comp.table())}</pre>"


# ---------------------------------------------------------------------------------------------------------------
# the scheduled sweep
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ScheduledOutcome:
    """What :func:`run_scheduled` did: the sweep, its record, the comparison (None: first sweep or it failed),
    the files written, the exit code and a one-line message."""

    sweep: object
    record: dict | None
    comparison: ScheduleComparison | None
    files: list[str]
    exit_code: int
    message: str


def comparison_samples(comp: ScheduleComparison):
    """Prometheus samples of a comparison (lab.workbench.monitoring.Sample): metric change and regression flag per
    config."""
    help_change = "Change of a retrieval metric (current - previous) against the previous scheduled sweep."
    help_reg = "1 when the metric dropped by more than allowed against the previous scheduled sweep, else 0."
    out = []
    for cc in comp.configs:
        for r in cc.rows:
            labels = (("experiment", comp.experiment), ("schedule", comp.schedule), ("config", cc.label),
                      ("metric", r.metric))
            out.append(Sample("raglab_scheduled_metric_change", labels, r.diff, help_change))
            out.append(Sample("raglab_scheduled_regression", labels, 1.0 if r.failed else 0.0, help_reg))
    return out


def run_scheduled(spec_path: str | Path, schedule: str | None = None, metrics: Sequence[str] | None = None,
                  max_drop: float = 0.02, relative: bool = False, significant_only: bool = False, alpha: float = 0.05,
                  report_dir: str | Path | None = None, tracking_root: str | Path = "mlruns",
                  publish: dict | None = None,
                  echo=print, n_resamples: int = N_RESAMPLES, seed: int = 0, **sweep_kwargs) -> ScheduledOutcome:
    """One scheduled sweep (see the module docstring). ``sweep_kwargs`` go to :func:`lab.workbench.sweep.run_sweep`
    (jobs, executor, output_dir, progress, rerun_on_code_change, ...)."""
    echo = echo or (lambda *a, **k: None)
    metrics = gate_settings(metrics, max_drop, relative, alpha)
    spec = load_spec(spec_path)
    schedule = schedule or spec.name
    if not schedule.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(f"--schedule {schedule!r}: use letters, digits, '-', '_' and '.'")
    cl = client(tracking_root)
    exp = cl.get_experiment_by_name(spec.experiment)
    parents = scheduled_parents(cl, exp.experiment_id, schedule) if exp else []
    sequence = 1 + max([int(p.data.tags.get(TAG_SEQUENCE, "0") or 0) for p in parents], default=0)
    previous = next((rec for rec in (read_record(cl, p.info.run_id) for p in reversed(parents)
                     if p.data.tags.get("sweep.ok") == "true") if rec), None)

    rep = run_sweep(spec_path, tracking_root=tracking_root, echo=echo, publish=publish, new_parent=True,
                    defer_publish=True,
                    parent_tags={TAG_SCHEDULED: "true", TAG_SCHEDULE: schedule, TAG_SEQUENCE: str(sequence)},
                    **sweep_kwargs)
    if not rep.ok:
        bad = [o for o in rep.outcomes if o.status not in ("FINISHED", "SKIPPED")]
        first = bad[0]
        msg = (f"scheduled sweep {schedule!r} #{sequence} did not finish: {len(bad)} of {len(rep.outcomes)} configs "
               f"failed (config {first.index} ({first.label}): "
               f"{first.error.splitlines()[0] if first.error else first.status}); "
               "nothing compared or published, the previous scheduled sweep stays the reference")
        return ScheduledOutcome(rep, None, None, [], 1, msg)

    record = make_record(rep, schedule, sequence, cl)
    out_dir = (resolve_repo_path(report_dir, spec.repo_root) if report_dir is not None
               else results_dir("scheduled", schedule, root=spec.repo_root))
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    write_text_atomic(out_dir / RECORD_ARTIFACT, json.dumps(record, indent=1))
    log_file(rep.parent_run_id, out_dir / RECORD_ARTIFACT, tracking_root=tracking_root)

    comp = None
    if previous is not None:
        comp = compare_records(previous, record, metrics, max_drop, relative, significant_only, alpha, n_resamples,
                               seed, tracking_root, cl)
        text = comp.table()
        write_text_atomic(out_dir / COMPARISON_TXT, text + "\n")
        write_text_atomic(out_dir / COMPARISON_JSON, json.dumps(comp.to_dict(), indent=1))
        files += [str(out_dir / COMPARISON_TXT), str(out_dir / COMPARISON_JSON)]
        set_tags(rep.parent_run_id, {TAG_PREVIOUS: previous.get("parent_run_id"),
                                     TAG_REGRESSION: str(comp.regressed).lower()}, cl=cl)
        echo(text)
    else:
        echo(f"first scheduled sweep of {schedule!r} in {spec.experiment!r}: nothing to compare with yet")

    html = _write_report(rep, record, comp, metrics[0], out_dir / REPORT_HTML, tracking_root, cl, schedule)
    if html:
        files.append(str(html))
    for f in files:
        log_file(rep.parent_run_id, f, tracking_root=tracking_root)

    extra = comparison_samples(comp) if comp else []
    _publish(rep, spec, publish, tracking_root, echo, extra, sequence, schedule)
    if rep.publish_error:
        return ScheduledOutcome(rep, record, comp, files, 1, f"publishing failed: {rep.publish_error}")
    if comp is None:
        return ScheduledOutcome(rep, record, None, files, 0,
                                f"scheduled sweep {schedule!r} #{sequence}: baseline recorded")
    failed = [(cc, r) for cc in comp.configs for r in cc.rows if r.failed]
    if failed:
        cc, r = failed[0]
        msg = (f"retrieval got worse: {len(failed)} metric(s) dropped more than allowed against scheduled sweep "
               f"#{previous.get('sequence')} (first: {cc.label} {r.metric} {r.baseline:.4f} -> {r.current:.4f})")
        return ScheduledOutcome(rep, record, comp, files, 1, msg)
    return ScheduledOutcome(rep, record, comp, files, 0,
                            f"scheduled sweep {schedule!r} #{sequence}: every metric holds")


def _write_report(rep, record: dict, comp, metric: str, path: Path, tracking_root, cl, schedule: str) -> Path | None:
    """report.html of this sweep's runs with the comparison and the trends sections."""
    run_ids = [c["run_id"] for c in record["configs"] if c.get("run_id")]
    notes: list[str] = []
    runs = runs_from_mlflow(rep.experiment, tracking_root, metric, notes=notes, run_ids=run_ids)
    if not runs:
        return None
    history = schedule_history(rep.experiment, tracking_root, metric, schedule, cl)
    sections = [("trends", "Trends over the scheduled sweeps", trends_html(history, metric))]  # lab.analysis.report
    if comp is not None:
        sections.insert(0, ("scheduled-comparison", "Against the previous scheduled sweep", comparison_html(comp)))
    res = build_report(runs, path, [metric, *[m for m in ("recall@100", "mrr@10") if m != metric]],
                       title=f"Scheduled sweep {schedule!r} #{record['sequence']}: {rep.experiment}", notes=notes,
                       extra_sections=sections)
    return res.path


def _publish(rep, spec, overrides, tracking_root, echo, extra, sequence: int, schedule: str) -> None:
    samples = [*extra, Sample("raglab_scheduled_sequence", (("experiment", rep.experiment), ("schedule", schedule)),
                              float(sequence), "Sequence number of the latest scheduled sweep.")]
    publish_report(rep, spec, overrides, tracking_root, echo, extra_samples=samples)
