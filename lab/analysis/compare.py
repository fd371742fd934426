"""Leaderboards of MLflow runs: one row per finished run, CIs, latency, paired tests against the best.

Conventions
- Runs: FINISHED runs of the experiment that logged ``metric`` (sweep parent runs excluded), optionally only
  the children of one parent run; one run per config (the newest of the runs with the same ``config_hash``,
  dataset and number of queries; :func:`one_run_per_config`, with a warning naming the runs left out). Metric
  values and CI bounds are read as :mod:`lab.tracking.store` logged them
  (``<metric>`` mean, ``<metric>_ci_low`` / ``<metric>_ci_high``, names mapped back from MLflow's ``_at_``).
- Label: ``key=value`` of the params that differ between the listed runs (``resolved.*`` and
  ``retriever.*`` keys left out), else the run name. The frame and JSON keep it whole; the printed tables show the
  short labels of lab.analysis.labels ("rerank · biencoder MiniLM · α 0.5"; ``long_labels``: the whole label).
- Paired test against the best run (highest mean) and everything after the CI columns come from the one
  leaderboard function :func:`lab.analysis.leaderboard.leaderboard` (its docstring states the conventions):
  per-query values from each run's ``per_query.parquet``, :func:`lab.metrics.paired_test` of (run - best) on the
  queries both scored, ``diff`` < 0 means worse; ``p_value`` is the raw two-sided randomisation (sign-flip)
  p-value, ``p_adjusted`` the p adjusted for the comparisons against the best (``correction``: Holm when more
  than one run is tested, unless one is chosen), ``significant`` is ``p_adjusted < alpha``; ``wins`` / ``ties``
  / ``losses`` count the queries the run scored higher / equal / lower than the best. Runs scored on different
  queries (another dataset or split) get no test (NaN) and a warning.
- Judged@k beside the metric (``judged`` column, k the metric's cut-off, 10 for a bare name): the share of the
  top k that carries a judgement, so a low score from unjudged documents shows; NaN for runs logged before it
  existed. A run evaluated on condensed lists (unjudged documents removed) is marked in the printed table.
- Runs with different ``metrics_version`` tags, or without one, are flagged (:func:`metrics_version_warning`):
  a warning in ``df.attrs["warnings"]`` (printed by ``lab compare`` on stderr and under the table) and, in the
  printed table, a ``metrics v`` column marking with ``!`` each run whose version differs from the best run's.
"""
from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path
from typing import Iterable

import pandas as pd

from lab.analysis.labels import short_labels, table_labels
from lab.analysis.leaderboard import N_RESAMPLES, TEST_COLUMNS, leaderboard, legend_lines
from lab.analysis.plots import leaderboard_bars
from lab.analysis.trust import trust_block
from lab.core.errors import ConfigError
from lab.core.flat import varying_keys
from lab.core.paths import resolve_repo_path
from lab.data.beir import read_queries
from lab.data.labels import from_tags, label_provenance
from lab.data.trec import read_trec_run
from lab.metrics.overlap import JACCARD_K, P, overlap_table
from lab.tracking.results import TAG_SELECTION
from lab.tracking.store import (
    RUN_ARTIFACT,
    TAG_PARENT,
    TAG_ROLE,
    artifact_file,
    client,
    load_per_query,
    mlflow_metric_name,
    search_all_runs,
)

#: Columns of a leaderboard, after ``label``, ``<metric>``, ``<metric>_ci_low``, ``<metric>_ci_high``.
EXTRA_COLUMNS = ("latency_p50_ms", "latency_p95_ms", "index_seconds", "n_queries", "llm_index_calls",
                 "llm_index_tokens", "llm_index_seconds", "llm_index_cold_seconds", "llm_query_calls",
                 "llm_query_tokens",
                 "llm_index_retries", "llm_index_errors", "llm_index_retry_wait_seconds", "llm_query_retries",
                 "llm_query_errors", "llm_query_retry_wait_seconds")


class CompareWarning(UserWarning):
    """Runs that should not be compared as they are (metrics_version or query sets differ)."""


def metrics_version_warning(versions: Iterable[str | None], current: str | None = None) -> str | None:
    """One warning line when results should not be compared as they are, else None.

    versions: the metrics version of each result (``lab.METRICS_VERSION`` as logged; None or "" when the result
    records none). Warns when the recorded versions differ, or when some results record none (logged before
    versions were recorded, or by another tool). current: optionally the running lab's version, to also warn
    when results were computed under another version than the one that would recompute them."""
    vs = ["" if v is None else str(v).strip() for v in versions]
    recorded = sorted({v for v in vs if v})
    missing = sum(not v for v in vs)
    parts = []
    if len(recorded) > 1:
        counts = ", ".join(f"{v}: {sum(x == v for x in vs)} run{'s' if sum(x == v for x in vs) > 1 else ''}"
                           for v in recorded)
        parts.append(f"runs carry different metrics_version tags ({counts}); their numbers are not comparable")
    if missing and vs:
        parts.append(f"{missing} of {len(vs)} runs carry no metrics_version tag (logged before versions were "
                     "recorded, or by another tool), so their metric conventions are unknown")
    if current is not None and recorded and any(v != str(current) for v in recorded):
        parts.append(f"this lab computes metrics version {current}, the runs carry {', '.join(recorded)}")
    if not parts:
        return None
    return "; ".join(parts) + ": re-run the older ones (or re-evaluate their run.trec with `lab evaluate`)"


def latest_experiment(tracking_root="mlruns") -> str:
    """Name of the experiment holding the most recently started run (ConfigError when the store has none)."""
    cl = client(tracking_root)
    best, when = None, -1
    for e in cl.search_experiments():
        runs = cl.search_runs([e.experiment_id], max_results=1, order_by=["attributes.start_time DESC"])
        if runs and runs[0].info.start_time > when:
            best, when = e.name, runs[0].info.start_time
    if best is None:
        raise ConfigError(f"no runs in the store at {tracking_root}; run `lab sweep params/<spec>.yaml` first")
    return best


def experiment_runs(cl, experiment_id: str, parent_run_id: str | None = None) -> list:
    """The FINISHED runs of an experiment, sweep parent runs left out (only the children of ``parent_run_id``
    when given), oldest first."""
    runs = search_all_runs(cl, experiment_id, "attributes.status = 'FINISHED'")
    runs = [r for r in runs if r.data.tags.get(TAG_ROLE) != "parent"]
    if parent_run_id:
        runs = [r for r in runs if r.data.tags.get(TAG_PARENT) == parent_run_id]
    return sorted(runs, key=lambda r: r.info.start_time)


def one_run_per_config(runs) -> tuple[list, list]:
    """``(kept, dropped)``: one run per config, the newest (latest start): runs with the same ``config_hash`` tag,
    dataset fingerprint and number of queries scored are the same measurement (two sweeps that ran the same
    config, or a config run again); runs without the tag are all kept. Order of ``runs`` is kept."""
    def key(r):
        h = r.data.tags.get("config_hash")
        return (h, r.data.tags.get("dataset_fingerprint"), r.data.metrics.get("n_queries")) if h else None

    newest: dict = {}
    for r in runs:
        k = key(r)
        if k and (k not in newest or (r.info.start_time, r.info.run_id) > (newest[k].info.start_time,
                                                                           newest[k].info.run_id)):
            newest[k] = r
    kept = [r for r in runs if key(r) is None or newest[key(r)] is r]
    ids = {r.info.run_id for r in kept}
    return kept, [r for r in runs if r.info.run_id not in ids]


def duplicates_note(dropped) -> str:
    """The line saying which older runs :func:`one_run_per_config` left out."""
    ids = ", ".join(r.info.run_id[:8] for r in dropped[:5]) + (", ..." if len(dropped) > 5 else "")
    return (f"{len(dropped)} older finished run(s) of a config listed once already (same config_hash, dataset and "
            f"queries) left out, the newest of each kept: {ids}")


def run_labels(runs) -> list[str]:
    """One label per run: ``key=value`` of the params that differ between the runs (``resolved.*`` and
    ``retriever.*`` left out), else the run name, else the first 8 characters of the run id."""
    def plain(params):
        return {k: v for k, v in params.items() if not k.startswith(("resolved.", "retriever."))}

    flats = [plain(r.data.params) for r in runs]
    keys = varying_keys(flats) if len(runs) > 1 else []
    out = []
    for r, f in zip(runs, flats, strict=True):
        lab = ", ".join(f"{k}={f[k]}" for k in keys if k in f and f[k] != "{}")
        out.append(lab or r.info.run_name or r.info.run_id[:8])
    return out


def experiment_leaderboard(experiment: str, metric: str = "ndcg@10", tracking_root="mlruns",
                           parent_run_id: str | None = None,
                alpha: float = 0.05, n_resamples: int = N_RESAMPLES, seed: int = 0,
                run_ids: Iterable[str] | None = None, correction: str | None = None) -> pd.DataFrame:
    """One row per finished run of ``experiment`` with ``metric``, best first (see the module docstring).

    parent_run_id: only the children of that sweep parent. run_ids: only these runs (e.g. the run ids of a
    SweepReport's outcomes); the paired tests are then against the best of them. correction: none|holm|bh, or
    None for Holm when more than one run is tested against the best (lab.analysis.leaderboard).

    Columns: label, ``metric``, ``metric_ci_low``, ``metric_ci_high``, latency and LLM figures
    (:data:`EXTRA_COLUMNS`), diff, diff_ci_low, diff_ci_high, p_value, p_adjusted, significant, wins, ties,
    losses, correction, strategy, dataset, metrics_version, config_hash, run_id, run_name, judged, condensed.
    ``df.attrs``: metric, experiment, best_run_id, warnings, alpha, metrics_version_warning, correction,
    n_comparisons, correction_note, trust (lab.analysis.trust: label provenance, power, held-out check).
    """
    cl = client(tracking_root)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(sorted(e.name for e in cl.search_experiments())) or "none"
        raise ConfigError(f"no experiment {experiment!r} in the store at {tracking_root}; experiments: {names}")
    mkey = mlflow_metric_name(metric)
    keep = None if run_ids is None else set(run_ids)
    runs = [r for r in experiment_runs(cl, exp.experiment_id, parent_run_id) if mkey in r.data.metrics
            and (keep is None or r.info.run_id in keep)]
    runs, dropped = one_run_per_config(runs)
    lo, hi = f"{metric}_ci_low", f"{metric}_ci_high"
    judged = judged_metric(metric)
    tail = ["strategy", "dataset", "metrics_version", "config_hash", "run_id", "run_name", "judged", "condensed"]
    cols = ["label", metric, lo, hi, *EXTRA_COLUMNS, *TEST_COLUMNS, *tail]
    if not runs:
        df = pd.DataFrame(columns=cols)
        df.attrs.update(metric=metric, experiment=experiment, best_run_id=None, warnings=[], alpha=alpha,
                        metrics_version_warning=None, correction="none", n_comparisons=0,
                        correction_note="p not adjusted for multiple comparisons (0 comparisons)", trust=None)
        return df

    rows, scores = [], []
    for r in runs:
        m, t, p = r.data.metrics, r.data.tags, r.data.params
        rows.append({
            metric: m[mkey], lo: m.get(mlflow_metric_name(lo), math.nan), hi: m.get(mlflow_metric_name(hi), math.nan),
            **{c: m.get(c, math.nan) for c in EXTRA_COLUMNS},
            "strategy": p.get("strategy", t.get("strategy", "")), "dataset": t.get("dataset", p.get("dataset", "")),
            "metrics_version": t.get("metrics_version", ""), "config_hash": t.get("config_hash", ""),
            "run_id": r.info.run_id, "run_name": r.info.run_name,
            "judged": m.get(mlflow_metric_name(judged), math.nan),
            "condensed": str(p.get("condensed", "False")).lower() == "true",
        })
        try:
            scores.append(load_per_query(r.info.run_id, tracking_root, cl)[metric])
        except Exception:  # noqa: BLE001 - a run without the artifact is listed without a test
            scores.append(None)
    df = leaderboard(scores, metric, labels=run_labels(runs), extra=rows, alpha=alpha,
                               correction=correction, n_resamples=n_resamples, seed=seed,
                               names=[f"run {r.info.run_id[:8]}" for r in runs])
    trust = runs_trust(cl, runs, scores, df, parent_run_id, alpha)
    notes = [duplicates_note(dropped)] if dropped else []
    version_note = metrics_version_warning(df["metrics_version"])
    if version_note:
        notes.append(version_note)
    notes.extend(df.attrs["notes"])
    for n in notes:
        warnings.warn(n, CompareWarning, stacklevel=2)
    attrs = dict(df.attrs)
    df = df[cols]
    df.attrs.update(attrs, experiment=experiment, best_run_id=df.loc[0, "run_id"], warnings=notes,
                    metrics_version_warning=version_note, trust=trust)
    return df


def runs_provenance(runs) -> tuple[list, str | None]:
    """The label provenance of each run (lab.data.labels) as it logged it; for a run logged before labels were
    recorded, read from its dataset folder now (when that folder is still there; else None), with a note saying
    so."""
    out, read_now = [], 0
    for r in runs:
        prov = from_tags(r.data.tags)
        if prov is None:
            path = r.data.params.get("dataset", "")
            try:
                folder = resolve_repo_path(path) if path else None
            except Exception:  # noqa: BLE001 - no folder to read: provenance unknown
                folder = None
            if folder is not None and Path(folder).is_dir():
                prov = label_provenance(folder, r.data.params.get("split", "test"))
                read_now += 1
        out.append(prov)
    note = (f"{read_now} of {len(runs)} runs predate label provenance: read from their dataset folder now"
            if read_now else None)
    return out, note


def run_selection(cl, runs, parent_run_id: str | None = None) -> dict | None:
    """The held-out check (lab.analysis.trust.selection_record) recorded on ``parent_run_id``, else on the latest
    parent of the listed runs whose winner is among them; None when there is none."""
    ids = {r.info.run_id for r in runs}
    parents = [parent_run_id] if parent_run_id else list(dict.fromkeys(
        r.data.tags.get(TAG_PARENT) for r in sorted(runs, key=lambda r: -r.info.start_time)
        if r.data.tags.get(TAG_PARENT)))
    for pid in parents:
        try:
            raw = cl.get_run(pid).data.tags.get(TAG_SELECTION)
        except Exception:  # noqa: BLE001 - a parent deleted since: no selection from it
            continue
        if raw:
            sel = json.loads(raw)
            if parent_run_id or sel.get("winner_run") in ids:
                return sel
    return None


def runs_trust(cl, runs, scores, df: pd.DataFrame, parent_run_id: str | None = None, alpha: float = 0.05) -> dict:
    """The trust object (lab.analysis.trust.trust_block) of a leaderboard of MLflow runs: provenance from their
    tags, judged@10 from their metrics, the selection from their sweep parent."""
    by_id = {r.info.run_id: (r, s) for r, s in zip(runs, scores, strict=True)}
    ranked = [by_id[rid][0] for rid in df["run_id"]]
    provs, note = runs_provenance(ranked)
    judged = [r.data.metrics.get(mlflow_metric_name("judged@10"), math.nan) for r in ranked]
    per_query = {rid: (None if s is None else s.dropna().rename(index=str)) for rid, (_, s) in by_id.items()}
    return trust_block(df, per_query, provs, judged, run_selection(cl, runs, parent_run_id), alpha=alpha,
                       labels_note=note)


def runs_overlap(df: pd.DataFrame, tracking_root="mlruns", p: float | None = None,
                 k: int | None = None) -> pd.DataFrame:
    """Rank-biased overlap and top-k Jaccard between each pair of the leaderboard's runs (lab.metrics.overlap;
    rankings read from each run's run.trec), named by their short labels (lab.analysis.labels); needs no relevance
    labels. Pairs with the most different rankings first."""
    cl = client(tracking_root)
    runs = {}
    for label, rid in zip(short_labels(list(df["label"].astype(str))), df["run_id"], strict=True):
        with tempfile.TemporaryDirectory(prefix="lab-overlap-") as tmp:
            runs[f"{label} ({rid[:8]})" if label in runs else label] = read_trec_run(
                artifact_file(rid, RUN_ARTIFACT, tmp, tracking_root, cl))
    return overlap_table(runs, P if p is None else p, JACCARD_K if k is None else k)


def judged_metric(metric: str) -> str:
    """The judged@k shown beside ``metric``: k = its cut-off, 10 for a metric without one."""
    _, sep, k = metric.partition("@")
    return f"judged@{k if sep and k.isdigit() else 10}"


def format_leaderboard(df: pd.DataFrame, max_label: int = 60, long_labels: bool = False) -> str:
    """The leaderboard as a fixed-width text table (what ``lab compare``, ``lab sweep`` and ``lab demo`` print),
    rows named by their short labels (:func:`lab.analysis.labels.table_labels`; ``long_labels``: the whole
    ``key=value`` label), cut to ``max_label`` characters."""
    metric = df.attrs.get("metric") or df.columns[1]
    if df.empty:
        return f"no finished runs with {metric}"
    show = pd.DataFrame({
        "#": range(1, len(df) + 1),
        "config": table_labels(list(df["label"].astype(str)), long_labels, max_label),
        metric: df[metric].map("{:.4f}".format),
        "95% CI": [f"[{a:.4f}, {b:.4f}]" if not (math.isnan(a) or math.isnan(b)) else "-"
                   for a, b in zip(df[f"{metric}_ci_low"], df[f"{metric}_ci_high"], strict=True)],
        "diff": ["best" if i == 0 else ("-" if math.isnan(d) else f"{d:+.4f}") for i, d in enumerate(df["diff"])],
        "p": ["" if math.isnan(p) else f"{p:.3g}" for p in df["p_value"]],
        "p adj": ["" if math.isnan(p) else f"{p:.3g}" + (" *" if s else "")
                  for p, s in zip(df.get("p_adjusted", df["p_value"]), df["significant"], strict=True)],
        "W/T/L": ["" if i == 0 else x for i, x in enumerate(_wtl(df))],  # row 0 is the reference itself
        "P50 ms": df["latency_p50_ms"].map(lambda v: "-" if math.isnan(v) else f"{v:.2f}"),
        "P95 ms": df["latency_p95_ms"].map(lambda v: "-" if math.isnan(v) else f"{v:.2f}"),
        "index s": df["index_seconds"].map(lambda v: "-" if math.isnan(v) else f"{v:.2f}"),
        "run": df["run_id"].str[:8],
    })
    if "judged" in df and df["judged"].notna().any():
        show.insert(4, judged_metric(metric), [("-" if math.isnan(v) else f"{v:.3f}") + (" c" if c else "")
                                               for v, c in zip(df["judged"], df.get("condensed", [False] * len(df)),
                                                               strict=True)])
    if "llm_index_calls" in df and df[["llm_index_calls", "llm_query_calls"]].notna().any().any():
        # index-time and query-time LLM cost: calls / tokens generated (cached answers cost nothing)
        def cost(calls, tokens):
            return ["-" if math.isnan(c) else f"{c:.0f} / {0 if math.isnan(t) else t:.0f}"
                    for c, t in zip(calls, tokens, strict=True)]

        show.insert(len(show.columns) - 1, "LLM index calls/tok", cost(df["llm_index_calls"], df["llm_index_tokens"]))
        show.insert(len(show.columns) - 1, "LLM query calls/tok", cost(df["llm_query_calls"], df["llm_query_tokens"]))
        faults = [f"llm_{ph}_{c}" for ph in ("index", "query") for c in ("retries", "errors", "retry_wait_seconds")]
        if any(c in df and (df[c].fillna(0) > 0).any() for c in faults):
            # LLM faults per phase: retries / errors / seconds slept before retries (not counted in latency)
            def faults_of(phase):
                cols = [df.get(f"llm_{phase}_{c}", pd.Series(math.nan, index=df.index))
                        for c in ("retries", "errors", "retry_wait_seconds")]
                return ["-" if math.isnan(r) else f"{r:.0f} / {0 if math.isnan(e) else e:.0f} / "
                        f"{0 if math.isnan(w) else w:.1f}" for r, e, w in zip(*cols, strict=True)]

            show.insert(len(show.columns) - 1, "LLM index retry/err/wait s", faults_of("index"))
            show.insert(len(show.columns) - 1, "LLM query retry/err/wait s", faults_of("query"))
        if "llm_index_cold_seconds" in df and df["llm_index_cold_seconds"].notna().any():
            # what index-time generation cost when it was generated (cache hits included): the cold-run cost
            show.insert(len(show.columns) - 1, "LLM index cold s",
                        df["llm_index_cold_seconds"].map(lambda v: "-" if math.isnan(v) else f"{v:.0f}"))
    if df.attrs.get("metrics_version_warning"):  # flag the runs whose version differs from the best run's
        ref = str(df["metrics_version"].iloc[0] or "")
        show.insert(len(show.columns) - 1, "metrics v",
                    [(str(v) or "none") + ("" if str(v or "") == ref and ref else " !") for v in df["metrics_version"]])
    text = show.to_string(index=False)
    text += "\n" + "\n".join(legend_lines(df, "the best"))
    if "condensed" in df and df["condensed"].any():
        text += "\nc: scored on condensed lists (unjudged documents removed before scoring, trec_eval -J)"
    for n in df.attrs.get("warnings", []):
        text += f"\nwarning: {n}"
    return text


def _wtl(df: pd.DataFrame) -> list[str]:
    """wins/ties/losses per row as "w/t/l" ("-" where unknown; "" for a frame without the columns)."""
    if not {"wins", "ties", "losses"} <= set(df.columns):
        return [""] * len(df)
    return ["-" if pd.isna(w) or pd.isna(t) or pd.isna(lo) else f"{int(w)}/{int(t)}/{int(lo)}"
            for w, t, lo in zip(df["wins"], df["ties"], df["losses"], strict=True)]


def plot_leaderboard(df: pd.DataFrame, path: str | Path, metric: str | None = None, title: str = "") -> Path:
    """Bar chart of the leaderboard (best on top) with CI error bars, runs significantly below the best hatched;
    written to ``path`` as PNG (Agg, no pyplot state). Returns the path."""
    metric = metric or df.attrs.get("metric") or "ndcg@10"
    if df.empty:
        raise ConfigError(f"nothing to plot: no finished runs with {metric}")
    fig = leaderboard_bars(df, metric, label="label", highlight=df["significant"].to_numpy(dtype=bool),
                           title=title or f"{df.attrs.get('experiment', '')}: {metric}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


# ------------------------------------------------------------------------------------------------ by query group
#: ``lab compare --by``: the query metadata key each grouping reads, and its groups in display order (None: sorted).
GROUPINGS = {"tier": ("difficulty", ("easy", "medium", "hard")), "type": ("question_type", None)}
#: What a reader of a grouped table must know; printed under it.
GROUPING_NOTES = {"tier": "tiers come from BM25's rank of each question's source (hard: not in BM25's top 10), so a "
                          "BM25 row is high on easy and near 0 on hard by construction; read the other rows across "
                          "tiers"}


def query_groups(dataset: str | Path, by: str = "tier") -> dict[str, str]:
    """query id -> group of the dataset folder's queries (``GROUPINGS[by]``'s metadata key, e.g. the difficulty
    tier ``lab testset generate`` records); ConfigError when no query carries it."""
    if by not in GROUPINGS:
        raise ConfigError(f"--by {by!r}: use one of {', '.join(GROUPINGS)}")
    key = GROUPINGS[by][0]
    path = Path(dataset) / "queries.jsonl"
    if not path.is_file():
        raise ConfigError(f"{dataset}: no queries.jsonl; pass --dataset with the test set the runs were scored on")
    queries = read_queries(path, progress=False)
    out = {q: str(m[key]) for q, m in queries.metadata.items() if isinstance(m, dict) and m.get(key) is not None}
    if not out:
        raise ConfigError(f"{path}: no query has metadata field '{key}' (sets from `lab testset generate` have it); "
                          "pass --dataset with such a set")
    return out


def group_means(scores: dict[str, pd.Series], groups: dict[str, str], by: str = "tier",
                metric: str = "") -> pd.DataFrame:
    """Per label (``scores``: label -> per-query values), the mean over each group of queries (``groups``: query
    id -> group): columns label, then per group ``<group>`` (mean; NaN when no query of it was scored) and
    ``<group> n``, then ``all`` (every scored query). Groups in ``GROUPINGS[by]``'s order, else sorted."""
    order = GROUPINGS.get(by, (None, None))[1] or tuple(sorted(set(groups.values())))
    names = [g for g in order if g in set(groups.values())]
    rows = []
    for label, values in scores.items():
        row: dict = {"label": label}
        for g in names:
            part = values[[q for q in values.index if groups.get(str(q)) == g]]
            row[g], row[f"{g} n"] = (float(part.mean()) if len(part) else math.nan), int(len(part))
        row["all"] = float(values.mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(metric=metric, by=by, groups=names)
    return out


def leaderboard_by(df: pd.DataFrame, groups: dict[str, str], by: str = "tier", tracking_root="mlruns") -> pd.DataFrame:
    """:func:`group_means` of the runs of the leaderboard ``df`` (:func:`leaderboard`; its row order kept, each
    run's per-query values of its metric from MLflow), with their ``run_id``."""
    metric = df.attrs.get("metric") or df.columns[1]
    scores = {f"{i}": load_per_query(run_id, tracking_root)[metric] for i, run_id in enumerate(df["run_id"])}
    out = group_means(scores, groups, by, metric)
    out["label"], out["run_id"] = list(df["label"]), list(df["run_id"])
    return out


def format_leaderboard_by(table: pd.DataFrame, max_label: int = 60, long_labels: bool = False) -> str:
    """:func:`leaderboard_by` as a fixed-width text table: one column per group, "mean (n)"; rows named as in
    :func:`format_leaderboard`."""
    metric, names = table.attrs["metric"], table.attrs["groups"]
    show = pd.DataFrame({"#": range(1, len(table) + 1),
                         "config": table_labels(list(table["label"].astype(str)), long_labels, max_label)})
    for g in names:
        show[g] = [("-" if math.isnan(m) else f"{m:.4f}") + f" ({n})"
                   for m, n in zip(table[g], table[f"{g} n"], strict=True)]
    show["all"] = table["all"].map("{:.4f}".format)
    if "run_id" in table:
        show["run"] = table["run_id"].str[:8]
    note = GROUPING_NOTES.get(table.attrs["by"])
    return (f"{metric} by {table.attrs['by']} (mean over the queries of each group, (n) queries)\n"
            + show.to_string(index=False) + (f"\nnote: {note}" if note else ""))
