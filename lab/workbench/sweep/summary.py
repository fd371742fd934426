"""After a sweep's configs ran: the winner's held-out check, the leaderboard charts, CSV and HTML report logged into
the parent run, and publishing the finished runs' metrics (Prometheus textfile, Pushgateway). Each failure is
reported on the :class:`SweepReport`, never raised: the runs are logged already."""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from lab.analysis.compare import CompareWarning, experiment_leaderboard, plot_leaderboard
from lab.analysis.plots import quality_vs_latency
from lab.analysis.report import build_report, runs_from_mlflow
from lab.core.errors import LabError
from lab.core.paths import resolve_repo_path
from lab.tracking.store import client
from lab.workbench import monitoring
from lab.workbench.monitoring import parse_publish
from lab.workbench.selection import record_selection, selection_line
from lab.workbench.sweep.outcome import SweepReport


def record_winner_check(report: SweepReport, cl, metric: str, tracking_root, fraction: float, seed: int, echo) -> None:
    """The winner's held-out check recorded on the parent (lab.workbench.selection.record_selection); a failure
    is reported in ``report.selection_error``, not raised (the runs are logged)."""
    run_ids = [o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id]
    try:
        report.selection = record_selection(cl, report.parent_run_id, report.experiment, run_ids, metric, tracking_root,
                                            fraction, seed)
        echo(selection_line(report.selection))
    except Exception as exc:  # noqa: BLE001 - reported, the runs stay
        report.selection_error = f"{type(exc).__name__}: {exc}"
        echo(f"held-out check not recorded: {report.selection_error}")


def log_summary(report: SweepReport, metric: str, tracking_root, echo) -> None:
    """Leaderboard charts, CSV and HTML report of the sweep's finished runs, logged into its parent run under
    ``summary/`` (step 5). Failures are reported in ``report.summary_error``, not raised."""
    run_ids = [o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id]
    if not run_ids or not report.parent_run_id:
        return
    cl = client(tracking_root)
    try:
        with tempfile.TemporaryDirectory(prefix="lab-sweep-summary-") as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore", CompareWarning)
            out = Path(tmp)
            df = experiment_leaderboard(report.experiment, metric=metric, tracking_root=tracking_root, run_ids=run_ids)
            if df.empty:
                return
            title = f"{report.name}: {metric}"
            files = [plot_leaderboard(df, out / "leaderboard.png", metric=metric, title=title)]
            quality_vs_latency(df, metric, label="label", title=f"{report.name}: quality vs latency").savefig(
                out / "quality_vs_latency.png", dpi=120)
            df.to_csv(out / "leaderboard.csv", index=False)
            files += [out / "quality_vs_latency.png", out / "leaderboard.csv"]
            notes: list[str] = []
            runs = [r for r in runs_from_mlflow(report.experiment, tracking_root, metric, None,
                                                notes) if r.run_id in run_ids]
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


def publish_report(report: SweepReport, spec, overrides: dict | None, tracking_root, echo=print,
                   extra_samples=()) -> None:
    """Publish the finished runs of the sweep's configs when the spec or ``overrides`` ask (see step 6);
    ``extra_samples`` (lab.workbench.monitoring.Sample) go into the same exposition."""
    _publish(report, spec, overrides, tracking_root, echo or (lambda *a, **k: None), extra_samples)


def _publish(report: SweepReport, spec, overrides: dict | None, tracking_root, echo, extra_samples=()) -> None:
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
            pushgateway=opts.get("pushgateway"), job=opts.get("job", "raglab"), metrics=opts["metrics"],
                                              tracking_root=tracking_root,
            run_ids=run_ids, headers_env=opts.get("headers_env"), extra_samples=extra_samples)
        echo(f"published {len(run_ids)} run(s) of {spec.experiment!r} to {', '.join(report.published)}")
    except LabError as exc:
        report.publish_error = str(exc)
        echo(f"publish failed: {exc}")


