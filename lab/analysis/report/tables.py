"""The report's tables: the leaderboard against a reference run, and the worst queries with their documents."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lab.analysis.leaderboard import CI_RESAMPLES, N_RESAMPLES, TEST_COLUMNS, leaderboard
from lab.analysis.report.runs import RunData
from lab.core.errors import ConfigError
from lab.text.chunking import doc_id_of, parse_chunk_id

#: Metrics of the report when none are named: the README's headline columns.

#: Characters of a document shown in the worst-queries section (relevant / retrieved).
RELEVANT_CHARS = 600
RETRIEVED_CHARS = 280


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
        _, s, e = parse_chunk_id(uid) or (doc, 0, 0)
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


