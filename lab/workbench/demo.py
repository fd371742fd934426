"""`make demo` / `lab demo`: the strategy-comparison sweep on SciFact, its leaderboard, a chart, and where to browse.

What it does, in order (each step is a call into the package, nothing is recomputed here):
1. :func:`lab.workbench.sweep.run_sweep` on ``params/strategy_comparison.yaml``: one execution of
   notebooks/03_strategy_comparison.ipynb and one MLflow run per strategy. Finished configs are skipped, so a
   second ``make demo`` only prints (resume by config hash).
2. :func:`lab.analysis.compare.experiment_leaderboard` of the sweep's runs (finished now or earlier): nDCG@10 with
   95% CIs and a paired test of each strategy against the best (p adjusted for the comparisons: Holm), printed as a
   table under
   its trust lines (lab.analysis.trust: where the labels came from, what the query set can detect, warnings).
3. Charts in ``results/demo/``: ``leaderboard.png`` (bars with CI error bars, strategies significantly below the
   best hatched) and ``quality_vs_latency.png`` (Pareto front marked), plus ``leaderboard.csv``.
4. The command that opens the runs in the MLflow UI (sqlite store, 127.0.0.1, one worker).
"""
from __future__ import annotations

import math
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lab.analysis.compare import (
    CompareWarning,
    experiment_leaderboard,
    experiment_runs,
    format_leaderboard,
    plot_leaderboard,
)
from lab.analysis.leaderboard import correction_note
from lab.analysis.plots import quality_vs_latency
from lab.analysis.trust import trust_lines
from lab.core.paths import resolve_repo_path
from lab.tracking.store import client, mlflow_metric_name
from lab.tracking.ui import UI_ENV, base_url, runs_url, ui_command
from lab.workbench.sweep import run_sweep

DEFAULT_SPEC = "params/strategy_comparison.yaml"
DEFAULT_OUT = "results/demo"


@dataclass
class DemoResult:
    """What :func:`run_demo` produced: the sweep report, the leaderboard of its runs and the files written."""

    report: object  # lab.workbench.sweep.SweepReport
    leaderboard: object  # pandas DataFrame (lab.analysis.compare.experiment_leaderboard columns)
    files: dict[str, Path] = field(default_factory=dict)
    ui_command: str = ""

    @property
    def ok(self) -> bool:
        """True when every config of the sweep has a finished run."""
        return bool(self.report.ok)


def sweep_leaderboard(report, metric: str = "ndcg@10", tracking_root="mlruns", seed: int = 0,
                      correction: str | None = None):
    """:func:`lab.analysis.compare.experiment_leaderboard` of this sweep's runs (finished now or skipped as finished
    earlier).

    The paired tests are those of lab.analysis.compare against the best of these runs, and the correction for
    multiple comparisons counts exactly the rows shown (lab.analysis.leaderboard). When the experiment's best run
    is not one of this sweep's (an older run of another config), the table would test against a run that is not
    the experiment's best: the tests are set to NaN and a warning is added to ``df.attrs["warnings"]`` (use
    ``lab compare``).
    """
    keep = {o.run_id for o in report.outcomes if o.status in ("FINISHED", "SKIPPED") and o.run_id}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)  # kept in df.attrs and printed with the table
        df = experiment_leaderboard(report.experiment, metric=metric, tracking_root=tracking_root, seed=seed,
                                    run_ids=keep,
                                    correction=correction)
    if df.empty:
        return df
    cl = client(tracking_root)
    exp = cl.get_experiment_by_name(report.experiment)
    mkey = mlflow_metric_name(metric)
    logged = [r for r in experiment_runs(cl, exp.experiment_id) if mkey in r.data.metrics]
    best = max(logged, key=lambda r: r.data.metrics[mkey]) if logged else None  # oldest of the highest, as compare
    if best is not None and best.info.run_id not in keep:
        attrs = dict(df.attrs)
        notes = list(attrs.get("warnings", []))
        notes.append(f"the best {metric} in experiment {report.experiment!r} is run {best.info.run_id[:8]}, not "
                     "one of this sweep's; paired tests left out here (see `lab compare`)")
        df[["diff", "diff_ci_low", "diff_ci_high", "p_value", "p_adjusted"]] = math.nan
        df["significant"] = False
        df[["wins", "ties", "losses"]] = pd.NA
        df["correction"] = "none"
        attrs.update(warnings=notes, correction="none", n_comparisons=0, correction_note=correction_note("none", 0))
        df.attrs.update(attrs)
    return df


def write_charts(df, out_dir: str | Path, metric: str = "ndcg@10", title: str = "") -> dict[str, Path]:
    """leaderboard.png, quality_vs_latency.png and leaderboard.csv of a leaderboard in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"leaderboard": plot_leaderboard(df, out / "leaderboard.png", metric=metric, title=title)}
    fig = quality_vs_latency(df, metric, latency="latency_p50_ms", label="label", title=title)
    fig.savefig(out / "quality_vs_latency.png", dpi=120)
    files["quality_vs_latency"] = out / "quality_vs_latency.png"
    df.to_csv(out / "leaderboard.csv", index=False)
    files["csv"] = out / "leaderboard.csv"
    return files


def ui_hint(tracking_root="mlruns", experiment_id: str | None = None) -> str:
    """How to browse the store: the `mlflow ui` command line (as `lab ui --print` gives it) and the URL."""
    line = " ".join(f"{k}={v}" for k, v in UI_ENV.items()) + " " + shlex.join(ui_command(tracking_root))
    url = runs_url(experiment_id, cl=client(tracking_root)) if experiment_id else base_url()
    return (f"Browse the runs in the MLflow UI: `make ui` (or `lab ui`), i.e.\n  {line}\nthen open {url}")


def run_demo(spec: str | Path = DEFAULT_SPEC, tracking_root="mlruns", out_dir: str | Path = DEFAULT_OUT,
             metric: str = "ndcg@10", jobs: int = 1, progress: bool = True, echo=print) -> DemoResult:
    """Run the demo (see the module docstring). Relative ``spec`` and ``out_dir`` are relative to the repo root."""
    spec_path = resolve_repo_path(spec)
    echo(f"raglab demo: sweep {spec_path.name} (one notebook execution and MLflow run per config; "
         "finished configs are skipped)")
    report = run_sweep(spec_path, jobs=jobs, tracking_root=tracking_root, progress=progress, echo=echo)
    echo(report.summary())
    for o in report.outcomes:
        if o.status not in ("FINISHED", "SKIPPED"):
            echo(f"  failed: [{o.index}] {o.label}: {o.error}\n          executed notebook: {o.notebook}")
    df = sweep_leaderboard(report, metric=metric, tracking_root=tracking_root)
    result = DemoResult(report, df)
    if df.empty:
        echo(f"no finished run with {metric}: nothing to compare")
        return result
    dataset = df["dataset"].iloc[0] if "dataset" in df else ""
    echo(f"\nLeaderboard: {report.experiment} on {dataset}, by {metric} (95% percentile-bootstrap CIs over queries)")
    if df.attrs.get("trust"):  # label provenance, power, held-out check (lab.analysis.trust)
        echo("\n".join(trust_lines(df.attrs["trust"], metric)))
    echo(format_leaderboard(df))
    out = resolve_repo_path(out_dir)
    result.files = write_charts(df, out, metric, title=f"{report.experiment} on {dataset}: {metric}")
    echo("\n" + "\n".join(f"{name}: {path}" for name, path in result.files.items()))
    result.ui_command = ui_hint(tracking_root, report.experiment_id)
    echo("\n" + result.ui_command)
    return result
