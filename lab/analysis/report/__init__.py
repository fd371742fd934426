"""One self-contained HTML report of a set of runs: leaderboard, charts, worst queries, diagnosis.

Modules: :mod:`.runs` (where the runs come from), :mod:`.tables` (leaderboard, worst queries), :mod:`.html`
(escaping and the sections' renderers), :mod:`.build` (the page, section by section; writing and logging it).

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

from lab.analysis.report.build import (
    DEFAULT_REPORT_METRICS,
    REPORT_ARTIFACT,
    REPORT_ROLE_TAG,
    SECTION_IDS,
    ReportPage,
    ReportResult,
    ReportSettings,
    build_report,
    log_report,
    report_experiment,
    report_files,
    runs_trust,
)
from lab.analysis.report.html import chart_label, esc, render_trust, trends_html
from lab.analysis.report.runs import RunData, file_group, runs_from_files, runs_from_mlflow
from lab.analysis.report.tables import pick_reference, query_detail, report_leaderboard, worst_query_ids

__all__ = ["DEFAULT_REPORT_METRICS", "REPORT_ARTIFACT", "REPORT_ROLE_TAG", "SECTION_IDS", "ReportPage", "ReportResult",
           "ReportSettings", "RunData", "build_report", "chart_label", "esc", "file_group", "log_report",
           "pick_reference", "query_detail", "render_trust", "report_experiment", "report_files",
           "report_leaderboard", "runs_from_files", "runs_from_mlflow", "runs_trust", "trends_html",
           "worst_query_ids"]
