"""One self-contained HTML report of a set of runs: leaderboard, charts, worst queries, diagnosis.

Conventions
- Sources: the finished runs of an MLflow experiment (:func:`runs_from_mlflow`; per_query.parquet, run.trec and
  metrics as lab.tracking.store logged them) or result files (:func:`runs_from_files`: summary JSON of
  ``lab run --json`` / ``lab evaluate --json``, per-query tables, TREC runs). Files sharing a name before their
  suffixes (``bm25.json``, ``bm25.per_query.csv``, ``bm25.trec``) are one run labelled ``bm25``.
- Leaderboard (:func:`report_leaderboard`): per metric, the table of :func:`lab.analysis.leaderboard.leaderboard` (the
  one leaderboard function; its docstring states the conventions): the mean, a 95% CI over queries (the CI MLflow
  holds when logged, else :func:`lab.metrics.bootstrap_ci`, 1000 resamples, seeded; Wilson's for 0/1 metrics) and
  the paired test of the run minus the reference run (:func:`lab.metrics.paired_test`, raw sign-flip p-value),
  the p adjusted for the comparisons against the reference on that metric (``correction``: Holm when more than
  one run is tested, unless one is chosen; one family per metric), ``significant`` = p adjusted < alpha whatever
  the sign, and wins / ties / losses over the queries both scored. Reference: the best run on the first metric,
  or the one chosen. Runs scored on other queries than the reference get no test (NaN) and a note.
- Worst queries: the ``n_worst`` lowest queries of the reference run on the first metric (ties by query id), each
  with its text, the relevant documents (grade, text, the rank the run gave them) and the top ``depth`` hits
  (rank, score, grade, text). Needs the dataset (``dataset`` param of the run or ``--dataset``) and the TREC run.
  Chunk ids ``doc@start-end`` are shown as that span of the document, graded by their document.
- Trust (:func:`render_trust`, first in the overview): the trust object of lab.analysis.trust (label provenance,
  smallest detectable difference, queries needed, judged@10, the held-out check, warnings), as ``lab compare``
  computes it for MLflow runs, or from the runs' per-query tables and dataset folders for result files.
- HTML: one file, inline CSS, images as base64 PNG data URIs, no script, no external URL; every piece of text
  from data (queries, documents, labels, params) is escaped with :func:`html.escape`. Sections carry the ids in
  :data:`SECTION_IDS`. Runs are named by their short labels (lab.analysis.labels: only what varies, as in the
  charts), the whole label in a ``title`` tooltip; the leaderboard table wraps its cells to fit the page width.
- Building (:func:`build_report`): one function per section over a shared :class:`ReportPage` (copies of the runs with
  their per-query means applied: the runs and notes passed in are never changed); options as
  :class:`ReportSettings`.
- MLflow: :func:`log_report` logs the HTML as artifact ``report.html`` of a new run in the experiment, tagged
  ``lab.role=report`` with the ids of the runs it covers (it logs no metric, so leaderboards skip it).
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lab.analysis import diagnosis as dg
from lab.analysis.compare import CompareWarning, experiment_leaderboard
from lab.analysis.diagnosis import diagnosis_table, precision_ceiling
from lab.analysis.gate import attach_per_query, looks_like_trec, read_result
from lab.analysis.labels import short_labels
from lab.analysis.leaderboard import CI_RESAMPLES, N_RESAMPLES, TEST_COLUMNS, leaderboard
from lab.analysis.plots import leaderboard_bars, pareto_front, per_query_distribution, quality_vs_latency, trend_lines
from lab.analysis.ppi import TARGET_HALFWIDTH, add_ppi_to_trust, check_ppi_options, ppi_lines
from lab.analysis.trends import latest_scheduled_run_ids, schedule_history
from lab.analysis.trust import trust_block, trust_lines
from lab.core.atomic import write_text_atomic
from lab.core.errors import ConfigError, DataError
from lab.core.paths import resolve_repo_path
from lab.data.beir import load_dataset
from lab.data.labels import label_provenance
from lab.data.trec import read_trec_run
from lab.text.chunking import doc_id_of
from lab.tracking.lifecycle import tracked_run
from lab.tracking.store import (
    RESULT_ARTIFACT,
    RUN_ARTIFACT,
    artifact_file,
    client,
    load_per_query,
    metric_name_from_mlflow,
)

#: Metrics of the report when none are named: the README's headline columns.
DEFAULT_REPORT_METRICS = ("ndcg@10", "recall@100", "mrr@10")
#: Section ids, in page order.
SECTION_IDS = ("overview", "leaderboard", "metric-charts", "quality-latency", "distributions", "worst-queries",
               "diagnosis", "method")
#: Characters of a document shown in the worst-queries section (relevant / retrieved).
RELEVANT_CHARS = 600
RETRIEVED_CHARS = 280
#: Tag marking report runs in MLflow; artifact name of the report.
REPORT_ROLE_TAG = "lab.role"
REPORT_ARTIFACT = "report.html"
#: Suffixes stripped (longest first) to group result files into runs.
FILE_SUFFIXES = (".per_query.parquet", ".per_query.csv", ".per_query.tsv", ".per_query.json", ".trec.gz", ".json",
                 ".trec", ".run", ".parquet", ".csv", ".tsv", ".txt")
CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;
color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.88em}
th,td{border:1px solid #ddd;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.best td{background:#eef7ee}.sig{color:#b00020;font-weight:bold}.muted{color:#777}
.sev-high{color:#b00020;font-weight:bold}.sev-medium{color:#b35c00;font-weight:bold}.sev-low{color:#555}
.sev-info{color:#1f77b4}img{max-width:100%;height:auto;display:block;margin:.5em 0}
.query{border:1px solid #ddd;border-radius:4px;padding:.6em 1em;margin:1em 0;background:#fcfcfc}
.qtext{font-size:1.05em;font-weight:bold}.rel td{background:#eef7ee}.doc{white-space:pre-wrap;font-size:.92em}
.notes li{color:#8a5a00}code{background:#f3f3f3;padding:0 .2em}
nav a{margin-right:1em}
.table-wrap{max-width:100%;overflow-x:auto}
table.leaderboard{width:100%;font-size:.8em}table.leaderboard th,table.leaderboard td{padding:.2em .3em}
table.leaderboard td:nth-child(2){min-width:9em;max-width:22em;overflow-wrap:anywhere}
"""


# ---------------------------------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class RunData:
    """One run of the report. ``figures``: flat numbers (metric means, ``<metric>_ci_low/high``, latency_p50_ms,
    ...); ``per_query``: queries x metrics (None when unknown); ``load_run``: returns the retrieved lists (Run)."""

    label: str
    figures: dict[str, float]
    per_query: pd.DataFrame | None = None
    source: str = ""
    run_id: str | None = None
    strategy: str = ""
    dataset: str = ""
    dataset_path: str | None = None
    split: str = "test"
    metrics_version: str | None = None
    load_run: Callable[[], object] | None = None


def _existing_dataset(path: str | None) -> str | None:
    """``path`` resolved against the repository root when it is a dataset folder, else None."""
    if not path:
        return None

    try:
        p = resolve_repo_path(path)
    except ConfigError:
        p = Path(path)
    return str(p) if (p / "queries.jsonl").exists() or (p / "queries.jsonl.gz").exists() else None


def _logged_dataset_path(run_id: str, root, cl) -> str | None:
    """``info.dataset_path`` of a run's result.json artifact when it is a dataset folder here, else None."""
    try:
        with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
            doc = json.loads(artifact_file(run_id, RESULT_ARTIFACT, tmp, root, cl).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - no artifact: the caller notes the missing dataset
        return None
    return _existing_dataset((doc.get("info") or {}).get("dataset_path"))


def runs_from_mlflow(experiment: str, root="mlruns", metric: str = "ndcg@10", parent_run_id: str | None = None,
                     notes: list[str] | None = None, run_ids: Sequence[str] | None = None,
                     trust: list | None = None) -> list[RunData]:
    """The finished runs of ``experiment`` that logged ``metric`` (labels as lab.analysis.compare names them); only
    ``run_ids`` when given. ``trust``: a list the leaderboard's trust object (lab.analysis.trust) is appended to."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        board = experiment_leaderboard(experiment, metric=metric, root=root, parent_run_id=parent_run_id,
                                       n_resamples=200, run_ids=run_ids)
    if notes is not None:
        notes.extend(board.attrs.get("warnings", []))
    if trust is not None and board.attrs.get("trust"):
        trust.append(board.attrs["trust"])
    cl = client(root)
    out = []
    for row in board.to_dict("records"):
        rid, label = row["run_id"], str(row["label"])
        r = cl.get_run(rid)
        figures = {metric_name_from_mlflow(k): float(v) for k, v in r.data.metrics.items()}
        try:
            pq = load_per_query(row["run_id"], root, cl)
        except Exception as exc:  # noqa: BLE001 - a run without the artifact is shown without per-query parts
            pq = None
            if notes is not None:
                notes.append(f"run {rid[:8]} ({label}): no per-query table ({type(exc).__name__})")

        def load(run_id=row["run_id"]):
            with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
                return read_trec_run(artifact_file(run_id, RUN_ARTIFACT, tmp, root, cl))

        params = r.data.params
        ds_path = _existing_dataset(params.get("dataset")) or _logged_dataset_path(rid, root, cl)
        out.append(RunData(
            label=label, figures=figures, per_query=pq, source=f"mlflow run {rid}",
            run_id=row["run_id"], strategy=str(row["strategy"]), dataset=str(row["dataset"]),
            dataset_path=ds_path, split=params.get("split", "test"),
            metrics_version=str(row["metrics_version"]) or None, load_run=load))
    return out


def file_group(path: str | Path) -> str:
    """The run a result file belongs to: its name without the suffixes of :data:`FILE_SUFFIXES`
    ("bm25.per_query.csv" -> "bm25")."""
    name = Path(path).name
    for suffix in FILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def runs_from_files(paths: Sequence[str | Path], qrels=None, dataset: str | None = None, split: str = "test",
                    metrics: Sequence[str] | None = None, notes: list[str] | None = None) -> list[RunData]:
    """Runs from result files, grouped by :func:`file_group`. A TREC run is read for the worst queries and, when
    its group has no per-query table, evaluated against ``qrels`` (a path) or the split's qrels of ``dataset``."""
    groups: dict[str, list[Path]] = {}
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise DataError(p, "no such file")
        groups.setdefault(file_group(p), []).append(p)
    out = []
    for label, files in groups.items():
        summary, table, trec = None, None, None
        for p in files:
            if p.suffix not in (".json", ".csv", ".tsv", ".parquet") and looks_like_trec(p):
                trec = p
                continue
            res = read_result(p, companion=False)
            if res.kind == "summary":
                summary = res
            else:
                table = res
        if summary is not None and table is not None:
            summary = attach_per_query(summary, table.path)
        res = summary or table
        meta = res.meta if res is not None else {}
        ds_path = _existing_dataset(dataset) or _existing_dataset(meta.get("dataset_path"))
        run_split = split if dataset else str(meta.get("split") or split)
        per_query = res.per_query if res is not None else None
        figures = dict(res.figures) if res is not None else {}
        version = res.metrics_version if res is not None else None
        load = None
        if trec is not None:
            def load(t=trec):
                return read_trec_run(t)
            if per_query is None:
                qr = qrels
                if qr is None and ds_path:
                    qr = load_dataset(ds_path, splits=[run_split], progress=False).split(run_split)[1]
                if qr is None:
                    raise DataError(trec, "is a TREC run without a per-query table: pass --qrels or --dataset to "
                                    "evaluate it")
                ev = read_result(trec, qrels=qr, metrics=metrics)
                per_query, version = ev.per_query, ev.metrics_version
                figures = {**ev.figures, **figures}
        if per_query is None and not figures:
            raise DataError(files[0], "nothing to report in this file")
        if per_query is None and notes is not None:
            notes.append(f"{label}: means only (no per-query table): no CI, test or distribution")
        out.append(RunData(label=label, figures=figures, per_query=per_query,
                           source=", ".join(str(f) for f in files),
                           strategy=str((meta.get("config") or {}).get("strategy", "")) if meta else "",
                           dataset=str(meta.get("dataset", "")) if meta else "", dataset_path=ds_path,
                           split=run_split, metrics_version=version, load_run=load))
    return out


# ---------------------------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------------------------
def pick_reference(runs: Sequence[RunData], metric: str, reference: str | None = None) -> int:
    """Index of the reference run: the one whose label, run id or run id prefix (>= 6 chars) is ``reference``,
    else the highest ``metric`` (first on ties). ConfigError when ``reference`` names no run."""
    if reference:
        for i, r in enumerate(runs):
            if reference == r.label or (r.run_id and (reference == r.run_id or
                                                       (len(reference) >= 6 and r.run_id.startswith(reference)))):
                return i
        raise ConfigError(f"--baseline {reference!r}: no run has that label or run id; runs: "
                          + ", ".join(r.label for r in runs))
    values = [r.figures.get(metric, math.nan) for r in runs]
    if all(math.isnan(v) for v in values):
        raise ConfigError(f"no run has {metric}; metrics present: "
                          + ", ".join(sorted({k for r in runs for k in r.figures if "@" in k})[:20]))
    return int(np.nanargmax(values))


def report_leaderboard(runs: Sequence[RunData], metrics: Sequence[str], reference: int = 0, alpha: float = 0.05,
                      n_resamples: int = N_RESAMPLES, seed: int = 0, notes: list[str] | None = None,
                      correction: str | None = None) -> pd.DataFrame:
    """One row per run, best first on ``metrics[0]`` (see the module docstring), built by
    :func:`lab.analysis.leaderboard.leaderboard` once per metric (one family of comparisons per metric).

    Columns: label, for each metric ``m``: ``m``, ``m_ci_low``, ``m_ci_high``, ``m_diff``, ``m_diff_ci_low``,
    ``m_diff_ci_high``, ``m_p`` (raw p), ``m_p_adjusted``, ``m_significant`` (``m_p_adjusted < alpha``),
    ``m_wins``, ``m_ties``, ``m_losses``; then the leaderboard's columns for ``metrics[0]`` unprefixed (diff,
    diff_ci_low, diff_ci_high, p_value, p_adjusted, significant, wins, ties, losses, correction), latency_p50_ms,
    latency_p95_ms, index_seconds, n_queries, is_reference, strategy, run_id, source. ``df.attrs``: metrics,
    alpha, reference, correction, n_comparisons, correction_note (of ``metrics[0]``) and corrections
    ({metric: note})."""

    labels = [r.label for r in runs]
    base = pd.DataFrame([{
        **{c: r.figures.get(c, math.nan) for c in ("latency_p50_ms", "latency_p95_ms", "index_seconds")},
        "n_queries": len(r.per_query) if r.per_query is not None else r.figures.get("n_queries", math.nan),
        "is_reference": i == reference, "strategy": r.strategy, "run_id": r.run_id or "", "source": r.source,
        "_index": i} for i, r in enumerate(runs)])
    per_metric, corrections, primary = {}, {}, None
    for m in metrics:
        scores, extra = [], []
        for i, r in enumerate(runs):
            has = r.per_query is not None and m in r.per_query
            scores.append(r.per_query[m] if has else None)
            extra.append({m: float(r.per_query[m].mean()) if has else r.figures.get(m, math.nan),
                          f"{m}_ci_low": r.figures.get(f"{m}_ci_low", math.nan),
                          f"{m}_ci_high": r.figures.get(f"{m}_ci_high", math.nan), "_index": i})
        b = leaderboard(scores, m, labels=labels, extra=extra, reference=reference, alpha=alpha,
                        correction=correction, n_resamples=n_resamples, ci_resamples=CI_RESAMPLES, seed=seed)
        if notes is not None and m == metrics[0]:
            notes.extend(b.attrs["notes"])
        corrections[m] = b.attrs["correction_note"]
        if primary is None:
            primary = b
        renamed = b[[m, f"{m}_ci_low", f"{m}_ci_high", "_index"]].copy()
        for c, new in (("diff", "diff"), ("diff_ci_low", "diff_ci_low"), ("diff_ci_high", "diff_ci_high"),
                       ("p_value", "p"), ("p_adjusted", "p_adjusted"), ("significant", "significant"),
                       ("wins", "wins"), ("ties", "ties"), ("losses", "losses")):
            renamed[f"{m}_{new}"] = b[c]
        per_metric[m] = renamed.set_index("_index")
    df = primary[["label", "_index"]].copy()
    for m in metrics:
        df = df.join(per_metric[m], on="_index")
    for c in TEST_COLUMNS:
        df[c] = primary[c]
    df = df.join(base.set_index("_index"), on="_index")
    df = df[[c for c in df.columns if c != "_index"] + ["_index"]].reset_index(drop=True)
    df.attrs.update(metrics=list(metrics), alpha=alpha, reference=runs[reference].label,
                    correction=primary.attrs["correction"], n_comparisons=primary.attrs["n_comparisons"],
                    correction_note=primary.attrs["correction_note"], corrections=corrections)
    return df


def worst_query_ids(values: pd.Series, n: int) -> list[str]:
    """The ``n`` query ids with the lowest values, ties broken by query id (ascending)."""
    s = pd.Series(values.to_numpy(dtype=float), index=[str(q) for q in values.index])
    order = sorted(s.index, key=lambda q: (s[q], q))
    return order[:n]


def _unit_doc(uid: str, corpus) -> str:
    """The corpus document a retrieved unit belongs to: itself, or the document of a chunk id doc@start-end."""
    if uid in corpus:
        return uid

    try:
        return doc_id_of(uid)
    except ValueError:
        return uid


def _unit_text(uid: str, corpus) -> str:
    """Text of a retrieved unit: the document (title + text), or the span a chunk id names; "" when unknown."""
    if uid in corpus:
        d = corpus[uid]
        return (d.title + "\n" if d.title else "") + d.text
    doc = _unit_doc(uid, corpus)
    if doc in corpus and "@" in uid:
        s, e = (int(x) for x in uid.rpartition("@")[2].split("-"))
        return corpus[doc].text[s:e]
    return ""


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "\u2026"


def query_detail(qid: str, query_text: str, relevant: Mapping[str, int], hits: Sequence[tuple[str, float]],
                 corpus, depth: int = 10) -> dict:
    """Everything shown for one worst query: text, relevant documents (id, grade, text, the first rank at which
    the run retrieved them or None), and the top ``depth`` hits (rank, id, score, grade of their document, text)."""
    first_rank: dict[str, int] = {}
    for rank, (uid, _) in enumerate(hits, start=1):
        first_rank.setdefault(_unit_doc(uid, corpus), rank)
    rel = [{"doc_id": d, "grade": int(g), "rank": first_rank.get(d), "text": _clip(_unit_text(d, corpus),
                                                                                    RELEVANT_CHARS),
            "in_corpus": d in corpus}
           for d, g in sorted(relevant.items(), key=lambda kv: (-kv[1], kv[0])) if g > 0]
    top = [{"rank": i, "doc_id": uid, "score": float(score), "grade": int(relevant.get(_unit_doc(uid, corpus), 0)),
            "text": _clip(_unit_text(uid, corpus), RETRIEVED_CHARS)}
           for i, (uid, score) in enumerate(hits[:depth], start=1)]
    return {"query_id": qid, "text": query_text, "relevant": rel, "retrieved": top, "n_retrieved": len(hits)}


# ---------------------------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------------------------
def figure_data_uri(fig, dpi: int = 100) -> str:
    """A matplotlib Figure as a ``data:image/png;base64,...`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


#: Longest run label drawn in a chart as it is; longer ones become "#<rank> <start>..." (the leaderboard's # column).
CHART_LABEL_MAX = 24


def chart_label(label: str, rank: int, width: int = CHART_LABEL_MAX) -> str:
    """A run's name in charts: the label when short, else "#rank" and its first characters (rank from 1, as in
    the leaderboard's # column). Charts pass labels shortened to what varies
    (lab.analysis.labels.short_labels) first."""
    return label if len(label) <= width else f"#{rank} {label[: width - 4 - len(str(rank))]}\u2026"


def _chart_frame(board: pd.DataFrame, metric: str) -> pd.DataFrame:
    d = board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "latency_p50_ms"]].copy()
    d["label"] = [chart_label(lbl, i + 1) for i, lbl in enumerate(short_labels([str(v) for v in d["label"]]))]
    return d[d[metric].notna()].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------------------
def esc(value) -> str:
    """Escaped text of any value (quotes too, so it is safe in attributes)."""
    return html.escape(str(value), quote=True)


def _num(v, fmt="{:.4f}") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return esc(v)
    return "-" if math.isnan(f) else fmt.format(f)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], row_classes: Sequence[str] | None = None,
           num_cols: Sequence[int] = (), table_class: str = "") -> str:
    """An HTML table; ``rows`` hold already-escaped HTML cells."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        cells = "".join(f'<td class="num">{c}</td>' if j in num_cols else f"<td>{c}</td>" for j, c in enumerate(r))
        body.append(f"<tr{cls}>{cells}</tr>")
    cls = f' class="{table_class}"' if table_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def run_name(label: str, names: Mapping[str, str], bold: bool = True) -> str:
    """A run's name in the page (escaped): its short label (``names``: label -> short label), the whole label in
    the ``title`` tooltip when they differ."""
    short = names.get(label, label)
    tip = f' title="{esc(label)}"' if short != label else ""
    tag = "b" if bold else "span"
    return f"<{tag}{tip}>{esc(short)}</{tag}>"


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{esc(alt)}">'


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>\n{body}\n</section>'


def render_leaderboard(board: pd.DataFrame) -> str:
    """The leaderboard table of the report (escaped): per metric the mean, CI, difference to the reference, raw
    and adjusted p; wins / ties / losses on the first metric; the correction named under the table."""
    metrics, alpha = board.attrs["metrics"], board.attrs["alpha"]
    primary = metrics[0]
    headers = ["#", "run"]
    for m in metrics:
        headers += [m, "95% CI", "\u0394 vs ref", "p", "p adj"]
        if m == primary:
            headers += ["W/T/L"]
    headers += ["P50 ms", "P95 ms", "index s", "queries"]
    rows, classes = [], []
    names = dict(zip(board["label"], short_labels([str(v) for v in board["label"]]), strict=True))
    for i, r in board.iterrows():
        cells = [str(i + 1), run_name(r["label"], names, bold=False)
                 + (' <span class="muted">(reference)</span>' if r["is_reference"] else "")]
        for m in metrics:
            lo, hi = r[f"{m}_ci_low"], r[f"{m}_ci_high"]
            p, padj = r[f"{m}_p"], r.get(f"{m}_p_adjusted", r[f"{m}_p"])
            sig = r[f"{m}_significant"]
            cells += [_num(r[m]), "-" if (math.isnan(lo) or math.isnan(hi)) else f"[{lo:.4f}, {hi:.4f}]",
                      "ref" if r["is_reference"] else _num(r[f"{m}_diff"], "{:+.4f}"),
                      "" if math.isnan(p) else f"{p:.3g}",
                      "" if math.isnan(padj) else (f'<span class="sig">{padj:.3g} *</span>' if sig else f"{padj:.3g}")]
            if m == primary:
                w, t, lo_ = (r.get(f"{m}_{c}", pd.NA) for c in ("wins", "ties", "losses"))
                cells.append("-" if pd.isna(w) or pd.isna(t) or pd.isna(lo_) else f"{int(w)}/{int(t)}/{int(lo_)}")
        cells += [_num(r["latency_p50_ms"], "{:.2f}"), _num(r["latency_p95_ms"], "{:.2f}"),
                  _num(r["index_seconds"], "{:.2f}"), _num(r["n_queries"], "{:.0f}")]
        rows.append(cells)
        classes.append("best" if r["is_reference"] else "")
    num_cols = [j for j, h in enumerate(headers) if j >= 2 and h not in ("95% CI", "W/T/L")]
    corrections = board.attrs.get("corrections") or {}
    named = "; ".join(f"{esc(m)}: {esc(n)}" for m, n in corrections.items()) or "p not adjusted"
    foot = (f'<p class="muted">Reference: {run_name(board.attrs["reference"], names)}. Runs are named by what '
            "differs between them; hover a name for its whole config. \u0394 = run minus reference, "
            "paired on the same queries; p: two-sided sign-flip randomisation test (raw); p adj: adjusted for the "
            f"comparisons against the reference, one family per metric ({named}); <span class=\"sig\">*</span> "
            f"significantly different from the reference (p adj &lt; {alpha:g}; \u0394 gives the direction). "
            f"W/T/L ({esc(primary)}): queries the run scored higher / equal / lower than the reference. "
            "CIs: 95% percentile bootstrap over queries (Wilson's interval for 0/1 metrics).</p>")
    return '<div class="table-wrap">' + _table(headers, rows, classes, num_cols, "leaderboard") + "</div>" + foot


def render_worst(details: Sequence[dict], metric: str, others: pd.DataFrame | None) -> str:
    parts = []
    for d in details:
        qid = d["query_id"]
        score = ""
        if others is not None and qid in others.index:
            score = ", ".join(f"{esc(c)}: {_num(v, '{:.3f}')}" for c, v in others.loc[qid].items())
        rel_rows = [[esc(r["doc_id"]), str(r["grade"]), "not retrieved" if r["rank"] is None else str(r["rank"]),
                     f'<div class="doc">{esc(r["text"]) if r["in_corpus"] else "<i>not in the corpus</i>"}</div>']
                    for r in d["relevant"]]
        hit_rows = [[str(h["rank"]), esc(h["doc_id"]), f'{h["score"]:.4g}', str(h["grade"]),
                     f'<div class="doc">{esc(h["text"])}</div>'] for h in d["retrieved"]]
        parts.append(
            f'<div class="query" id="q-{esc(qid)}"><div class="qtext">{esc(d["text"])}</div>'
            f'<div class="muted">query {esc(qid)}; {esc(metric)} per run: {score}; {d["n_retrieved"]} hits</div>'
            "<h3>Relevant documents</h3>"
            + _table(["doc", "grade", "rank in run", "text"], rel_rows, num_cols=[1, 2])
            + f"<h3>Retrieved (top {len(d['retrieved'])})</h3>"
            + _table(["rank", "doc", "score", "grade", "text"], hit_rows,
                     ["rel" if h["grade"] > 0 else "" for h in d["retrieved"]], num_cols=[0, 2, 3])
            + "</div>")
    return "\n".join(parts)


def render_diagnosis(table: pd.DataFrame, names: Mapping[str, str] | None = None) -> str:
    """The diagnosis grouped by rule: severity, rule, the runs it fired for with their value, the finding (of the
    first run listed, i.e. the best ranked), likely cause and next step. ``names``: shorter run names to show."""
    if table.empty:
        return "<p>No rule fired: every checked metric is above its threshold.</p>"
    rows = []
    order = sorted(dict.fromkeys(table["rule"]), key=lambda r: (dg.SEVERITIES.index(
        table.loc[table["rule"] == r, "severity"].iloc[0]), list(table["rule"]).index(r)))
    for rule in order:
        g = table[table["rule"] == rule]
        first = g.iloc[0]
        runs = "<br>".join(f"{esc((names or {}).get(r.run, r.run))}: {r.value:.3g}" for r in g.itertuples(index=False))
        rows.append([f'<span class="sev-{esc(first.severity)}">{esc(first.severity)}</span>', esc(rule),
                     f"{esc(first.metric)}<br>{runs}", esc(first.symptom), esc(first.cause), esc(first.action)])
    consts = ", ".join(f"{n}={getattr(dg, n):g}" for n in ("RECALL_AT_DEPTH_MIN", "RECALL_AT_3_MIN", "MRR_MIN",
                                                          "MAP_MIN", "HIT_RATE_AT_3_MIN", "NDCG_AT_3_MIN",
                                                          "PRECISION_AT_3_MIN", "LATENCY_P95_MAX_MS", "CI_WIDTH_MAX",
                                                          "SPEEDUP_MIN"))
    return (_table(["severity", "rule", "runs (value)", "finding (first run listed)", "likely cause", "next step"],
                   rows)
            + '<p class="muted">Rules: symptom, likely cause, next step (lab/analysis/diagnosis.py), applied to every '
              f"run; thresholds {esc(consts)}.</p>")


# ---------------------------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------------------------
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
    path = _existing_dataset(override) if override else run.dataset_path
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
        d = _chart_frame(page.board, m)
        shown = page.board[page.board[m].notna()]  # hatched: significantly below the reference (p adjusted, diff < 0)
        sig = (shown[f"{m}_significant"].to_numpy(dtype=bool) & (shown[f"{m}_diff"].to_numpy(dtype=float) < 0))
        charts.append(f"<h3>{esc(m)}</h3>" + _img(figure_data_uri(leaderboard_bars(
            d, m, label="label", highlight=sig, title=f"{m} (95% CI), hatched: significantly below the reference")),
            f"bar chart of {m} with 95% confidence intervals"))
    return "\n".join(charts)


def quality_latency_html(page: ReportPage) -> str:
    """The first metric against P50 latency, with the Pareto front named under the chart."""
    lat = _chart_frame(page.board, page.primary)
    lat = lat[lat["latency_p50_ms"].notna()]
    if not len(lat):
        return "<p>No run recorded latency (summary JSON of <code>lab run --json</code> or MLflow runs do).</p>"
    front = pareto_front(lat[page.primary].to_numpy(), lat["latency_p50_ms"].to_numpy())
    return (_img(figure_data_uri(quality_vs_latency(lat, page.primary, label="label")),
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
            dists.append(f"<h3>{esc(m)}</h3>" + _img(figure_data_uri(per_query_distribution(
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


def page_html(title: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole HTML document: head (inline CSS), the title, a navigation bar and the (id, title, body) sections."""
    nav = "<nav>" + "".join(f'<a href="#{sid}">{esc(sid)}</a>' for sid, _, _ in sections) + "</nav>"
    body = "\n".join(_section(sid, heading, html_body) for sid, heading, html_body in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n<h1>{esc(title)}</h1>\n{nav}\n{body}\n"
            f'<p class="muted">Generated by raglab (lab report) on {time.strftime("%Y-%m-%d %H:%M")}.</p>\n'
            "</body></html>\n")


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


def render_trust(trust: Mapping | None, metric: str) -> str:
    """The trust object as HTML above the leaderboard: its lines, warnings in the notes' colour."""
    if not trust:
        return ""

    lines = trust_lines(trust, metric)
    facts = [line for line in lines if not line.startswith("warning: ")]
    warns = [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")]
    ppi = "<pre>" + esc("\n".join(ppi_lines(trust["ppi"]))) + "</pre>" if trust.get("ppi") else ""
    return ('<div class="trust"><h3>How far to trust this leaderboard</h3><ul>'
            + "".join(f"<li>{esc(line)}</li>" for line in facts) + "</ul>" + ppi
            + ('<ul class="notes">' + "".join(f"<li>warning: {esc(w)}</li>" for w in warns) + "</ul>" if warns else "")
            + "</div>")


def log_report(path: str | Path, experiment: str, root="mlruns", run_ids: Sequence[str] = (),
               metrics: Sequence[str] = ()) -> str:
    """Log the file at ``path`` as artifact ``report.html`` (whatever its name) of a new FINISHED run in ``experiment``
    (tag lab.role=report, ``report.runs`` = the covered run ids, ``report.metrics``); returns its run id."""
    with tracked_run(experiment, run_name=f"report ({', '.join(metrics)})" if metrics else "report",
                     root=root) as run:
        run.set_tags({REPORT_ROLE_TAG: "report", "report.runs": ",".join(run_ids), "report.metrics": ",".join(metrics)})
        with tempfile.TemporaryDirectory(prefix="lab-report-") as tmp:
            copy = Path(tmp) / REPORT_ARTIFACT
            copy.write_bytes(Path(path).read_bytes())
            run.log_artifact(copy)
    return run.run_id


def report_experiment(experiment: str, root="mlruns", out: str | Path = "report.html",
                      metrics: Sequence[str] | None = None, parent_run_id: str | None = None, log: bool = True,
                      **kwargs) -> ReportResult:
    """:func:`build_report` of an MLflow experiment's finished runs, logged back into it when ``log``."""
    metrics = list(metrics or DEFAULT_REPORT_METRICS)
    notes: list[str] = []
    t0 = time.perf_counter()
    history = schedule_history(experiment, root, metrics[0])
    run_ids = None
    if len(history) and parent_run_id is None:  # scheduled sweeps: the latest one's runs, and the trends
        run_ids, seq = latest_scheduled_run_ids(history)
        notes.append(f"the experiment has scheduled sweeps: the leaderboard shows the runs of the latest (#{seq}); "
                     "the trends section shows them all")
    trust: list = []
    human_qrels, halfwidth = kwargs.pop("human_qrels", None), kwargs.pop("target_halfwidth", TARGET_HALFWIDTH)
    if human_qrels:  # checked before any work
        check_ppi_options(human_qrels, halfwidth)
    runs = runs_from_mlflow(experiment, root, metrics[0], parent_run_id, notes, run_ids=run_ids, trust=trust)
    if not runs:
        raise ConfigError(f"experiment {experiment!r} has no finished run with {metrics[0]}")
    if human_qrels and trust:  # the prediction-powered leaderboard joins the trust block (lab.analysis.ppi)
        add_ppi_to_trust(trust[0], [r.run_id for r in runs], [r.label for r in runs], metrics[0], human_qrels, root,
                         kwargs.get("dataset"), halfwidth)
    extra = [("trends", "Trends over the scheduled sweeps", trends_html(history, metrics[0]))] if len(history) else []
    res = build_report(runs, out, metrics, title=kwargs.pop("title", None) or f"Retrieval report: {experiment}",
                       notes=notes, extra_sections=extra, trust=trust[0] if trust else None, **kwargs)
    res.seconds = time.perf_counter() - t0
    if log:
        res.report_run_id = log_report(res.path, experiment, root, [r.run_id for r in runs if r.run_id], metrics)
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


def trends_html(history: pd.DataFrame, metric: str) -> str:
    """The trends section of the HTML report: the chart and a table (escaped)."""

    if history.empty:
        return "<p>No scheduled sweeps yet.</p>"
    img = (f'<img src="{figure_data_uri(trend_lines(history, metric))}" alt="{esc(metric)} over the scheduled '
           'sweeps, per config, with 95% CIs">')
    head = "".join(f"<th>{esc(h)}</th>" for h in ("#", "config", metric, "95% CI", "run", "changed", "why it ran"))
    body = []
    for r in history.to_dict("records"):
        changed = ", ".join(k for k in ("dataset", "model") if r[f"{k}_changed"]) or ""
        ci = ("-" if math.isnan(r[f"{metric}_ci_low"])
              else f"[{r[f'{metric}_ci_low']:.4f}, {r[f'{metric}_ci_high']:.4f}]")
        body.append("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in (
            r["sequence"], r["label"], f"{r[metric]:.4f}", ci, r["run_id"][:8] + (" (reused)" if r["reused"] else ""),
            changed, r["reason"])) + "</tr>")
    return (img + "<p>Triangles: the dataset changed since that config's previous scheduled sweep; squares: a model "
            "changed.</p><table><tr>" + head + "</tr>" + "".join(body) + "</table>")
