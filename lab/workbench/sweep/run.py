"""The sweep itself, a short list of named steps: plan (load, expand, check, identify the configs), resume
decisions, the parent run, executing what needs it, recording on the parent, the summary and publishing."""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from lab.analysis.labels import short_labels
from lab.core.errors import ConfigError
from lab.core.flat import config_hash, flatten, varying_keys
from lab.core.paths import resolve_repo_path, results_dir
from lab.core.progress import progress as bar
from lab.tracking.faults import check_server
from lab.tracking.lifecycle import tracked_run
from lab.tracking.store import (
    TAG_ROLE,
    client,
    environment_tags,
    get_or_create_experiment,
    is_uri,
    log_metrics,
    log_params,
    root_path,
    set_tags,
    storage_fault,
    tracking_uri,
)
from lab.tracking.ui import DEFAULT_METRICS, set_runs_view
from lab.workbench.config import SweepSpec, expand, label, load_spec
from lab.workbench.phase_watch import watch_phases
from lab.workbench.resume import TAG_REASON, Decision, RunIdentity, decide, run_identity
from lab.workbench.selection import check_holdout, holdout_decisions, holdout_tags
from lab.workbench.sweep.local import run_local
from lab.workbench.sweep.options import SweepOptions, sweep_options
from lab.workbench.sweep.outcome import TAG_NAME, TAG_SPEC_HASH, ConfigOutcome, SweepReport, SweepTask
from lab.workbench.sweep.ray_executor import run_ray
from lab.workbench.sweep.stale import mark_stale, reusable_parent, reused_parent, sweep_lock
from lab.workbench.sweep.summary import log_summary, publish_report, record_winner_check
from lab.workbench.sweep_check import validate_sweep


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


def run_sweep(spec_path: str | Path, options: SweepOptions | None = None, **given: Any) -> SweepReport:
    """Run every config of the sweep spec at ``spec_path`` (see :mod:`lab.workbench.sweep`); returns a SweepReport.

    The options are :class:`lab.workbench.sweep.options.SweepOptions`: pass one as ``options``, or its fields as
    keywords (``jobs=2, tracking_root="mlruns"``), or both (the keywords win). An unknown keyword is a ConfigError.
    """
    opts = sweep_options(options, **given)
    tracking_root, dry_run = opts.tracking_root, opts.dry_run
    t0 = time.perf_counter()
    plan = _plan(spec_path, opts)
    cl = client(tracking_root)
    report = SweepReport(plan.spec.name, plan.spec.experiment, None, None, plan.out_dir, dry_run=dry_run)
    if dry_run:
        return _dry_run(plan, opts, cl, report)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    lock = sweep_lock(tracking_root, plan.out_dir, plan.spec.name, plan.spec.experiment)
    try:
        return _sweep(plan, opts, cl, report, t0)
    finally:
        lock.release()


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
    return SweepPlan(spec, configs, hashes, keys, labels, identities, fraction, out_dir,
                     tracking_uri(opts.tracking_root))


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
    exp_id = get_or_create_experiment(plan.spec.experiment, opts.tracking_root, cl)
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
    report.parent_run_id = reused_parent(cl, [o.run_id for o in report.outcomes])
    opts.echo(f"nothing to run: all {len(plan.configs)} configs have finished runs in {plan.spec.experiment!r} "
              f"(same config, data, models and metrics version; parent run {report.parent_run_id})")
    if not opts.defer_publish:
        publish_report(report, plan.spec, opts.publish, opts.tracking_root, opts.echo)
    return report


@contextlib.contextmanager
def _parent_run(plan: SweepPlan, opts: SweepOptions, cl, exp_id: str) -> Iterator:
    """Step 3: the sweep's parent run, a new one or the reused unfinished one set RUNNING again; the caller sets its
    status (FINISHED when every config finished, else FAILED); something raising inside ends it FAILED (KILLED on
    KeyboardInterrupt) with tag error, re-raised (lab.tracking.lifecycle.tracked_run)."""
    spec, spec_hash = plan.spec, plan.spec_hash()
    reused = None if opts.new_parent else reusable_parent(cl, exp_id, spec.name, spec_hash)
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
    spec, root = plan.spec, opts.tracking_root
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
            stream = run_ray(tasks, opts.jobs, opts.ray_address, opts.warm_kernels)
        elif tasks:
            stream = run_local(tasks, opts.jobs, opts.warm_kernels)
        pbar = bar(stream, desc=f"sweep {plan.spec.name}", total=len(tasks), enabled=opts.progress and bool(tasks),
                   unit="config")
        watch.bar = pbar
        _collect_outcomes(pbar, decisions, outcomes, opts.echo, opts.tracking_root)
    return [outcomes[i] for i in range(len(plan.configs))]


def _record_on_parent(report: SweepReport, plan: SweepPlan, opts: SweepOptions, cl, n_run_now: int) -> None:
    """The parent run's counts and times, tag ``sweep.ok`` and, with a holdout, the winner's held-out check."""
    parent = report.parent_run_id
    log_metrics(parent, {"n_configs": len(plan.configs), "n_finished": report.n_finished + report.n_skipped,
                         "n_failed": report.n_failed, "n_run_now": n_run_now, "seconds": report.seconds}, cl=cl)
    set_tags(parent, {"sweep.ok": str(report.ok).lower()}, cl=cl)
    if plan.fraction is not None:
        record_winner_check(report, cl, plan.metric, opts.tracking_root, plan.fraction, plan.seed, opts.echo)


def _summarise(report: SweepReport, plan: SweepPlan, opts: SweepOptions) -> None:
    """Steps 5 and 6: the summary artifacts of the parent run (unless ``summary`` is off) and publishing (unless
    deferred)."""
    if opts.summary:
        log_summary(report, plan.metric, opts.tracking_root, opts.echo)
    if not opts.defer_publish:
        publish_report(report, plan.spec, opts.publish, opts.tracking_root, opts.echo)


def _collect_outcomes(pbar, decisions: list[Decision], outcomes: dict[int, ConfigOutcome], echo,
                      tracking_root=None) -> None:
    """Each config's outcome as the executor yields its result (``pbar``, the progress bar over the stream), into
    ``outcomes`` by index, with its decision's reason unless a claim gave one; skips and failures are written on the
    bar (through ``echo`` without one) and the bar shows the count of failures. After a failure, a tracking server
    (``root``) that no longer answers stops the sweep with one line (lab.tracking.faults.check_server)."""
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
            check_server(tracking_root or "", f"running config {o.index} ({o.label})")
        if hasattr(pbar, "set_postfix"):
            pbar.set_postfix(failed=failed)


def _holdout_decisions(cl, decisions: list[Decision], plan: SweepPlan) -> list[Decision]:
    """Decisions with runs scored under another holdout not reused (lab.workbench.selection.holdout_decisions)."""
    return holdout_decisions(cl, decisions, plan.fraction, plan.seed)


def _holdout_tags(plan: SweepPlan) -> dict:
    return {} if plan.fraction is None else holdout_tags(plan.fraction, plan.seed)


def sweep_metric(configs: list[dict], default: str = "ndcg@10") -> str:
    """The metric a sweep ranks by: its configs' ``metric`` param when they set one (notebooks 02-04 take it),
    else ``default``."""
    values = {c.get("metric") for c in configs if isinstance(c.get("metric"), str)}
    return values.pop() if len(values) == 1 else default


def _check_configs(spec, configs: list[dict], labels: list[str]) -> None:
    """Refuse to start (dry run included) when a config has a problem: one ConfigError line per problem
    (:func:`lab.workbench.sweep_check.validate_sweep`)."""
    problems = validate_sweep(spec, configs, labels)
    if len(problems) == 1:  # one problem, one line
        raise ConfigError(f"{problems[0]}; sweep {spec.name!r} not started: fix it and run again")
    if problems:
        raise ConfigError("\n".join(problems + [f"sweep {spec.name!r} not started: {len(problems)} problem(s) in "
                                                 f"{spec.path}; fix them and run again"]))

