"""Building the report: one function per section over a shared ReportPage, the file written, and logged to MLflow."""
from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from lab.analysis.diagnosis import diagnosis_table, precision_ceiling
from lab.analysis.labels import short_labels
from lab.analysis.leaderboard import N_RESAMPLES, leaderboard
from lab.analysis.plots import leaderboard_bars, pareto_front, per_query_distribution, quality_vs_latency
from lab.analysis.ppi import TARGET_HALFWIDTH, add_ppi_to_trust, check_ppi_options, check_recorded_ppi
from lab.analysis.report.html import (
    chart_frame,
    chart_label,
    esc,
    figure_data_uri,
    img_tag,
    page_html,
    render_diagnosis,
    render_leaderboard,
    render_trust,
    render_worst,
    run_name,
    trends_html,
)
from lab.analysis.report.runs import RunData, existing_dataset, runs_from_files, runs_from_mlflow
from lab.analysis.report.tables import pick_reference, query_detail, report_leaderboard, worst_query_ids
from lab.analysis.trends import latest_scheduled_run_ids, schedule_history
from lab.analysis.trust import trust_block
from lab.core.atomic import write_text_atomic
from lab.core.errors import ConfigError, DataError
from lab.data.beir import load_dataset
from lab.data.labels import label_provenance
from lab.tracking.lifecycle import tracked_run

#: Metrics of the report when none are named: the README's headline columns.
DEFAULT_REPORT_METRICS = ("ndcg@10", "recall@100", "mrr@10")
#: Section ids, in page order.
SECTION_IDS = ("overview", "leaderboard", "metric-charts", "quality-latency", "distributions", "worst-queries",
               "diagnosis", "method")
#: Tag marking report runs in MLflow; artifact name of the report.
REPORT_ROLE_TAG = "lab.role"
REPORT_ARTIFACT = "report.html"


@dataclass
class ReportResult:
    """What :func:`build_report` wrote: path, size in bytes, seconds, the leaderboard, the diagnosis table,
    notes, the MLflow run id of the logged report (None when not logged) and the trust object shown above the
    leaderboard (lab.analysis.trust; None when no run had a per-query table)."""

    path: Path
    size: int
    seconds: float
    leaderboard: pd.DataFrame
    diagnosis: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    report_run_id: str | None = None
    trust: dict | None = None


def _load_dataset(run: RunData, override: str | None, notes: list[str]):
    path = existing_dataset(override) if override else run.dataset_path
    if override and not path:
        raise DataError(override, "not a BEIR dataset folder (no queries.jsonl)")
    if not path:
        notes.append(f"worst queries: no dataset for {run.label} (pass --dataset DIR)")
        return None

    return load_dataset(path, splits=[run.split], progress=False)


@dataclass(frozen=True)
class ReportSettings:
    """How :func:`build_report` builds the page: ``reference`` (a run's label or run id; None: the best on the first
    metric), ``dataset`` (a BEIR folder overriding the runs' own, for the worst queries), ``n_worst`` queries shown
    with their top ``depth`` hits, ``alpha``, ``n_resamples`` of the paired tests, ``seed``, ``subtitle`` and
    ``correction`` (none|holm|bh; None: Holm when more than one run is tested, lab.analysis.leaderboard)."""

    title: str = "Retrieval report"
    reference: str | None = None
    dataset: str | None = None
    n_worst: int = 10
    depth: int = 10
    alpha: float = 0.05
    n_resamples: int = N_RESAMPLES
    seed: int = 0
    subtitle: str = ""
    correction: str | None = None


@dataclass
class ReportPage:
    """What the sections of one report share: the runs (copies, per-query means applied), the metrics reported,
    the reference, the leaderboard, the settings, the short run names, the notes gathered so far."""

    runs: list[RunData]
    metrics: list[str]
    ref_i: int
    board: pd.DataFrame
    settings: ReportSettings
    notes: list[str]
    short: dict[str, str]  # label -> name in charts (short label, clipped: chart_label)
    names: dict[str, str]  # label -> short label (lab.analysis.labels), whole
    versions: list[str]

    @property
    def primary(self) -> str:
        return self.metrics[0]

    @property
    def ref(self) -> RunData:
        return self.runs[self.ref_i]

    def tables(self) -> dict[str, pd.DataFrame]:
        """label -> per-query table of the runs that have one."""
        return {r.label: r.per_query for r in self.runs if r.per_query is not None}


def report_settings(settings: ReportSettings | None, options: Mapping) -> ReportSettings:
    """``settings`` with ``options`` (fields of :class:`ReportSettings` by name) applied; ConfigError naming an
    unknown option."""
    names = set(ReportSettings.__dataclass_fields__)
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(f"build_report: unknown option {', '.join(unknown)}; options: {', '.join(sorted(names))}")
    return replace(settings or ReportSettings(), **options)


def report_metrics(runs: Sequence[RunData], metrics: Sequence[str] | None, notes: list[str]) -> list[str]:
    """The metrics asked for (default :data:`DEFAULT_REPORT_METRICS`) that some run has; those none has are noted;
    ConfigError when no run has any."""
    wanted = list(dict.fromkeys(metrics or DEFAULT_REPORT_METRICS))
    have = [m for m in wanted if any(m in r.figures or (r.per_query is not None and m in r.per_query) for r in runs)]
    if not have:
        raise ConfigError(f"no run has any of {', '.join(wanted)}")
    missing = [m for m in wanted if m not in have]
    if missing:
        notes.append(f"no run has {', '.join(missing)}; left out")
    return have


def with_per_query_means(run: RunData) -> RunData:
    """A copy of ``run`` whose figures hold its per-query means (the truth where a per-query table exists); the
    run given is left as it was."""
    if run.per_query is None:
        return replace(run, figures=dict(run.figures))
    means = {m: float(run.per_query[m].mean()) for m in run.per_query.columns}
    return replace(run, figures={**run.figures, **means})


def short_names(labels: Sequence[str]) -> dict[str, str]:
    """label -> the run's name in charts: its short label (lab.analysis.labels), "#rank ..." when long."""
    return {lbl: chart_label(s, i + 1) for i, (lbl, s) in enumerate(zip(labels, short_labels(labels), strict=True))}


def plan_page(runs: Sequence[RunData], metrics: Sequence[str] | None, settings: ReportSettings,
              notes: Sequence[str]) -> ReportPage:
    """The shared state of a report: copies of the runs, the metrics, the reference and the leaderboard."""
    if not runs:
        raise ConfigError("nothing to report: no runs (an experiment without finished runs, or no files)")
    page_notes = list(notes)
    copies = [with_per_query_means(r) for r in runs]
    have = report_metrics(copies, metrics, page_notes)
    ref_i = pick_reference(copies, have[0], settings.reference)
    board = report_leaderboard(copies, have, ref_i, settings.alpha, settings.n_resamples, settings.seed, page_notes,
                               correction=settings.correction)
    versions = sorted({r.metrics_version for r in copies if r.metrics_version})
    if len(versions) > 1:
        page_notes.append(f"runs carry different metrics versions ({', '.join(versions)}): not comparable")
    labels = [str(v) for v in board["label"]]
    return ReportPage(copies, have, ref_i, board, settings, page_notes, short_names(labels),
                 dict(zip(labels, short_labels(labels), strict=True)), versions)


def metric_charts_html(page: ReportPage) -> str:
    """Per metric: bars with 95% CIs, runs significantly below the reference hatched."""
    charts = []
    for m in page.metrics:
        d = chart_frame(page.board, m)
        shown = page.board[page.board[m].notna()]  # hatched: significantly below the reference (p adjusted, diff < 0)
        sig = (shown[f"{m}_significant"].to_numpy(dtype=bool) & (shown[f"{m}_diff"].to_numpy(dtype=float) < 0))
        charts.append(f"<h3>{esc(m)}</h3>" + img_tag(figure_data_uri(leaderboard_bars(
            d, m, label="label", highlight=sig, title=f"{m} (95% CI), hatched: significantly below the reference")),
            f"bar chart of {m} with 95% confidence intervals"))
    return "\n".join(charts)


def quality_latency_html(page: ReportPage) -> str:
    """The first metric against P50 latency, with the Pareto front named under the chart."""
    lat = chart_frame(page.board, page.primary)
    lat = lat[lat["latency_p50_ms"].notna()]
    if not len(lat):
        return "<p>No run recorded latency (summary JSON of <code>lab run --json</code> or MLflow runs do).</p>"
    front = pareto_front(lat[page.primary].to_numpy(), lat["latency_p50_ms"].to_numpy())
    return (img_tag(figure_data_uri(quality_vs_latency(lat, page.primary, label="label")),
                 f"{page.primary} against P50 latency with the Pareto front")
            + "<p>Pareto front (no other run is both better and faster): " + ", ".join(
                f"<b>{esc(lbl)}</b> ({v:.4f}, {t:.2f} ms)" for lbl, v, t, on in
                zip(lat["label"], lat[page.primary], lat["latency_p50_ms"], front, strict=True) if on) + ".</p>")


def distributions_html(page: ReportPage) -> str:
    """Per metric: the per-query distribution of every run with a per-query table."""
    dists = []
    for m in page.metrics:
        sub = {page.short[lbl]: t[m] for lbl, t in page.tables().items() if m in t}
        if sub:
            dists.append(f"<h3>{esc(m)}</h3>" + img_tag(figure_data_uri(per_query_distribution(
                sub, m, seed=page.settings.seed)), f"distribution of {m} over queries per run"))
    return "\n".join(dists) or "<p>No per-query tables: distributions need them.</p>"


def reference_dataset(page: ReportPage):
    """The reference run's dataset (the settings' override first), None when unknown or unreadable (noted);
    DataError when the override is not a dataset folder."""
    ref = page.ref
    if ref.per_query is None or page.primary not in ref.per_query:
        return None
    try:
        return _load_dataset(ref, page.settings.dataset, page.notes)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - the rest of the report is still useful
        page.notes.append(f"worst queries: cannot load the dataset ({exc})")
        return None


def worst_queries_html(page: ReportPage, ds) -> str:
    """The ``n_worst`` lowest queries of the reference run with their relevant documents and top hits."""
    ref, primary = page.ref, page.primary
    if ref.per_query is None or primary not in ref.per_query:
        return f"<p>The reference run has no per-query {esc(primary)}.</p>"
    run_obj = None
    if ds is not None and ref.load_run is not None:
        try:
            run_obj = ref.load_run()
        except Exception as exc:  # noqa: BLE001 - as above: noted, the rest of the report stays
            page.notes.append(f"worst queries: cannot read the run of {ref.label} ({exc})")
    if ds is None or run_obj is None:
        if ds is None and ref.load_run is None:
            page.notes.append(f"worst queries: no TREC run for {ref.label}")
        return ("<p>Showing the worst queries needs the dataset and the retrieved lists "
                "(MLflow artifact run.trec, or a .trec file beside the result); see the notes.</p>")
    queries, qrels = ds.split(ref.split)
    ids = worst_query_ids(ref.per_query[primary], page.settings.n_worst)
    details = [query_detail(q, queries.texts.get(q, ""), qrels.qrels.get(q, {}),
                            run_obj.ranked(q) if q in run_obj else [], ds.corpus, page.settings.depth) for q in ids]
    others = pd.DataFrame({page.short[lbl]: t[primary] for lbl, t in page.tables().items() if primary in t})
    return (f"<p>The {len(ids)} lowest queries of the reference run {run_name(ref.label, page.names)} on "
            f"{esc(primary)} (dataset {esc(ds.name)}, split {esc(ref.split)}). Relevant rows are "
            "shaded; grade is the qrels grade of the hit's document.</p>" + render_worst(details, primary, others))


def diagnosis_inputs(page: ReportPage, ds) -> list[tuple[str, dict]]:
    """(label, figures) per leaderboard row for :func:`lab.analysis.diagnosis.diagnosis_table`: the run's figures
    with the leaderboard's CIs, its test against the reference and the precision@3 ceiling of its dataset."""
    ref, primary = page.ref, page.primary
    ceiling = None
    if ds is not None:
        _, qr = ds.split(ref.split)
        qids = [q for q in ref.per_query.index if q in qr] if ref.per_query is not None else qr.query_ids
        counts = [n for n in (len(qr.relevant(q)) for q in qids) if n]
        ceiling = precision_ceiling(counts, 3) if counts else None
    ref_lat = ref.figures.get("latency_p50_ms", math.nan)
    out = []
    for d in page.board.to_dict("records"):
        r = page.runs[d["_index"]]
        fig = dict(r.figures)
        for m in page.metrics:
            fig[f"{m}_ci_low"], fig[f"{m}_ci_high"] = d[f"{m}_ci_low"], d[f"{m}_ci_high"]
        if not d["is_reference"]:
            fig.update(p_value=d[f"{primary}_p"], diff=d[f"{primary}_diff"], reference_latency_p50_ms=ref_lat)
        if ceiling is not None and r.dataset_path == ref.dataset_path:
            fig["precision@3_ceiling"] = ceiling
        out.append((r.label, fig))
    return out


def overview_html(page: ReportPage, trust: Mapping | None, sources: Sequence[str]) -> str:
    """Trust first, then the runs, metrics, reference, settings, sources and notes (all of them: built last)."""
    s = page.settings
    return (render_trust(trust, page.primary)
            + f"<p>{len(page.runs)} run(s); metrics {', '.join(esc(m) for m in page.metrics)}; reference "
            f"{run_name(page.ref.label, page.names)} ({'chosen' if s.reference else 'best on ' + esc(page.primary)}); "
            f"alpha {s.alpha:g}; seed {s.seed}; {esc(page.board.attrs['correction_note'])} ({esc(page.primary)}).</p>"
            + (f"<p>{esc(s.subtitle)}</p>" if s.subtitle else "")
            + "<details><summary>Sources</summary><ul>" + "".join(f"<li>{esc(x)}</li>" for x in sources)
            + "</ul></details>"
            + ('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in dict.fromkeys(page.notes)) + "</ul>"
               if page.notes else ""))


def method_html(page: ReportPage) -> str:
    """How the figures were computed: metrics version, CIs, tests and their correction, latency."""
    return ("<ul><li>Metrics as trec_eval / ranx (README, metrics version "
            + esc(", ".join(page.versions) or "unknown") + "): relevant means grade &ge; 1; ties broken by document "
            "id.</li><li>CIs: 95% percentile bootstrap over queries (1000 resamples, seeded; Wilson's interval "
            f"for 0/1 metrics). Paired tests: {page.settings.n_resamples} sign flips of the per-query differences, "
            "add-one p-value; " + esc("; ".join(f"{m}: {n}" for m, n in page.board.attrs["corrections"].items()))
            + " (one family per metric: the runs tested against the reference).</li>"
            "<li>Latency: per query searched alone, in milliseconds.</li></ul>")




def build_report(runs: Sequence[RunData], out: str | Path = "report.html", metrics: Sequence[str] | None = None,
                 settings: ReportSettings | None = None, *, notes: Sequence[str] | None = None,
                 extra_sections: Sequence[tuple[str, str, str]] = (), trust: Mapping | None = None,
                 **options) -> ReportResult:
    """Write the HTML report of ``runs`` to ``out`` (see the module docstring) and return a ReportResult; the
    runs and notes passed in are left as they are.

    ``settings`` / ``options``: a :class:`ReportSettings`, or its fields by name (``title=..., n_worst=...``),
    applied over it. ``trust``: the trust object shown above the leaderboard (lab.analysis.trust; what
    ``lab compare`` computed for MLflow runs), None to compute it here from the runs' per-query tables and dataset
    folders. ``extra_sections``: (id, title, HTML body) appended after the standard sections (bodies already
    escaped)."""
    t0 = time.perf_counter()
    s = report_settings(settings, options)
    page = plan_page(runs, metrics, s, notes or [])
    shown_trust = trust if trust is not None else runs_trust(page.runs, page.primary, s.alpha, s.seed)
    ds = reference_dataset(page)
    diag = diagnosis_table(diagnosis_inputs(page, ds))
    sections = [
        ("leaderboard", "Leaderboard", render_leaderboard(page.board)),
        ("metric-charts", "Metrics with 95% confidence intervals", metric_charts_html(page)),
        ("quality-latency", f"Quality vs latency: {page.primary}", quality_latency_html(page)),
        ("distributions", "Per-query distributions", distributions_html(page)),
        ("worst-queries", f"Worst queries ({page.primary})", worst_queries_html(page, ds)),
        ("diagnosis", "Diagnosis", render_diagnosis(diag, page.short)),
        ("method", "Method", method_html(page)),
    ]
    overview = ("overview", "Overview", overview_html(page, shown_trust, sorted({r.source for r in page.runs})))
    path = write_text_atomic(out, page_html(s.title, [overview, *sections, *extra_sections]))
    return ReportResult(path, path.stat().st_size, time.perf_counter() - t0, page.board, diag,
                        list(dict.fromkeys(page.notes)), trust=shown_trust)


def runs_trust(runs: Sequence[RunData], metric: str, alpha: float = 0.05, seed: int = 0) -> dict | None:
    """The trust object (lab.analysis.trust) of runs read from files: the leaderboard of their per-query ``metric``,
    label provenance from each run's dataset folder (None: unknown); None when no run has a per-query table."""
    keep = [r for r in runs if r.per_query is not None and metric in r.per_query]
    if not keep:
        return None
    keys = [r.run_id or f"{i}:{r.label}" for i, r in enumerate(keep)]
    scores = {k: r.per_query[metric].dropna().rename(index=str) for k, r in zip(keys, keep, strict=True)}
    df = leaderboard(list(scores.values()), metric, labels=[r.label for r in keep],
                     extra=[{"run_id": k} for k in keys], alpha=alpha, n_resamples=2000, seed=seed)
    by_key = dict(zip(keys, keep, strict=True))
    ranked = [by_key[k] for k in df["run_id"]]
    provs = [label_provenance(r.dataset_path, r.split) if r.dataset_path else None for r in ranked]
    judged = [r.figures.get("judged@10", math.nan) for r in ranked]
    return trust_block(df, scores, provs, judged, alpha=alpha)




def log_report(path: str | Path, experiment: str, tracking_root="mlruns", run_ids: Sequence[str] = (),
               metrics: Sequence[str] = ()) -> str:
    """Log the file at ``path`` as artifact ``report.html`` (whatever its name) of a new FINISHED run in ``experiment``
    (tag lab.role=report, ``report.runs`` = the covered run ids, ``report.metrics``); returns its run id."""
    with tracked_run(experiment, run_name=f"report ({', '.join(metrics)})" if metrics else "report",
                     tracking_root=tracking_root) as run:
        run.set_tags({REPORT_ROLE_TAG: "report", "report.runs": ",".join(run_ids), "report.metrics": ",".join(metrics)})
        with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
            copy = Path(tmp) / REPORT_ARTIFACT
            copy.write_bytes(Path(path).read_bytes())
            run.log_artifact(copy)
    return run.run_id


def report_experiment(experiment: str, tracking_root="mlruns", out: str | Path = "report.html",
                      metrics: Sequence[str] | None = None, parent_run_id: str | None = None,
                      log_to_mlflow: bool = True,
                      **kwargs) -> ReportResult:
    """:func:`build_report` of an MLflow experiment's finished runs, logged back into it when ``log_to_mlflow``."""
    metrics = list(metrics or DEFAULT_REPORT_METRICS)
    notes: list[str] = []
    t0 = time.perf_counter()
    history = schedule_history(experiment, tracking_root, metrics[0])
    run_ids = None
    if len(history) and parent_run_id is None:  # scheduled sweeps: the latest one's runs, and the trends
        run_ids, seq = latest_scheduled_run_ids(history)
        notes.append(f"the experiment has scheduled sweeps: the leaderboard shows the runs of the latest (#{seq}); "
                     "the trends section shows them all")
    trust: list = []
    human_qrels, halfwidth = kwargs.pop("human_qrels", None), kwargs.pop("target_halfwidth", TARGET_HALFWIDTH)
    if human_qrels:  # checked before any work
        check_ppi_options(human_qrels, halfwidth)
    kept = None if human_qrels else check_recorded_ppi(kwargs.get("dataset"), halfwidth)  # the set's own grades
    runs = runs_from_mlflow(experiment, tracking_root, metrics[0], parent_run_id, notes, run_ids=run_ids, trust=trust)
    if not runs:
        raise ConfigError(f"experiment {experiment!r} has no finished run with {metrics[0]}")
    if (human_qrels or kept is not None) and trust:  # the prediction-powered leaderboard joins the trust block
        add_ppi_to_trust(trust[0], [r.run_id for r in runs], [r.label for r in runs], metrics[0], human_qrels,
                         tracking_root,
                         kwargs.get("dataset"), halfwidth)
    extra = [("trends", "Trends over the scheduled sweeps", trends_html(history, metrics[0]))] if len(history) else []
    res = build_report(runs, out, metrics, title=kwargs.pop("title", None) or f"Retrieval report: {experiment}",
                       notes=notes, extra_sections=extra, trust=trust[0] if trust else None, **kwargs)
    res.seconds = time.perf_counter() - t0
    if log_to_mlflow:
        res.report_run_id = log_report(res.path, experiment, tracking_root, [r.run_id for r in runs if r.run_id],
                                       metrics)
    return res


def report_files(paths: Sequence[str | Path], out: str | Path = "report.html", metrics: Sequence[str] | None = None,
                 qrels=None, dataset: str | None = None, split: str = "test", **kwargs) -> ReportResult:
    """:func:`build_report` of result files (see :func:`runs_from_files`); nothing is logged to MLflow."""
    notes: list[str] = []
    t0 = time.perf_counter()
    runs = runs_from_files(paths, qrels=qrels, dataset=dataset, split=split, metrics=metrics, notes=notes)
    res = build_report(runs, out, metrics, title=kwargs.pop("title", None) or "Retrieval report",
                       dataset=dataset, notes=notes, **kwargs)
    res.seconds = time.perf_counter() - t0
    return res


