"""The leaderboard: one row per system, its metric with a CI, and a paired test of each row against a reference.

One pure function, :func:`leaderboard`, over per-query score tables; ``lab compare`` (lab.analysis.compare, runs
read from MLflow), ``lab report`` (lab.analysis.report), the notebooks (lab.analysis.plots.results_leaderboard) and
``lab demo`` (lab.workbench.demo) all build their tables with it, so the numbers and column names agree.

Conventions
- Input: per row a label and the per-query values of the metric (a Series indexed by query id; None when the
  per-query table is unknown). NaN values are queries the row did not score. ``extra``: columns passed through
  unchanged (latency, run ids, other metrics...). When ``extra`` holds ``<metric>``, ``<metric>_ci_low`` or
  ``<metric>_ci_high`` (e.g. the values a run logged to MLflow), a non-NaN value is used as given; otherwise the
  mean of the scored queries and a CI from :func:`lab.metrics.stats.bootstrap_ci` (percentile bootstrap over
  queries, ``ci_resamples`` resamples, seeded; Wilson's score interval when every value is 0 or 1) are computed.
- Order: best first (``<metric>`` descending, stable, NaN last). Reference: the best row, or the one chosen.
- Paired test of each row against the reference (:func:`lab.metrics.stats.paired_test`, row minus reference):
  ``diff`` (mean difference; < 0: below the reference), ``diff_ci_low`` / ``diff_ci_high`` (percentile bootstrap
  of the mean difference) and ``p_value``, the raw two-sided sign-flip randomisation p-value, add-one rule. It
  pairs the queries in the reference's order and needs both rows to have scored the same queries; a row that
  scored other queries gets NaN and a note. With ``fill_missing`` a number (lab.metrics.stats.compare's rule) the
  test instead runs on the union of the queries, in the row's order then the reference's, a query missing on
  one side counting as that number there. The reference row: diff 0, p NaN.
- Multiple comparisons: the tested rows (finite ``p_value``) are one family of m comparisons against the
  reference. ``correction`` None (the default) applies Holm when m > 1 and nothing when m <= 1; "none", "holm"
  or "bh" force one (:func:`lab.metrics.stats.adjust_pvalues`). ``p_adjusted`` holds the adjusted p (the raw
  one under "none"), ``correction`` the method applied, and ``df.attrs["correction_note"]`` the line every
  output prints ("p adjusted: Holm over 9 comparisons").
- ``significant``: ``p_adjusted < alpha``, whatever the sign of ``diff`` (a row significantly above a chosen
  reference is significant too; ``diff`` gives the direction). Rows without a test are not significant.
- ``wins`` / ``ties`` / ``losses``: on the queries both the row and the reference scored, how many the row
  scored higher / equal (within 1e-12) / lower; they sum to the number of common queries. The reference row
  ties with itself on every query; rows without per-query values get <NA>.
- Resamples: :data:`N_RESAMPLES` (10,000) for the paired tests unless a caller passes fewer for speed;
  :data:`CI_RESAMPLES` (1,000, what lab.tracking.store logs CIs with) for a CI computed here.

Columns, in order: label, ``<metric>``, ``<metric>_ci_low``, ``<metric>_ci_high``, the ``extra`` columns, then
:data:`TEST_COLUMNS`. ``df.attrs``: metric, alpha, reference (label), reference_position (row in the input),
correction, n_comparisons, correction_note, notes.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lab.metrics.stats import CI_RESAMPLES, CORRECTIONS, N_RESAMPLES, adjust_pvalues, bootstrap_ci, paired_test

#: Columns after the metric, its CI and the extra columns, in this order.
TEST_COLUMNS = ("diff", "diff_ci_low", "diff_ci_high", "p_value", "p_adjusted", "significant", "wins", "ties",
                "losses", "correction")
#: Two per-query values closer than this are a tie in wins / ties / losses.
TIE_TOLERANCE = 1e-12
#: Names of the corrections in printed lines.
CORRECTION_NAMES = {"none": "none", "holm": "Holm", "bh": "Benjamini-Hochberg"}


def check_correction(correction: str | None) -> str | None:
    """``correction`` lower-cased when it is one of none|holm|bh, None (automatic) as it is; ValueError naming
    the accepted values otherwise."""
    if correction is None:
        return None
    c = str(correction).strip().lower()
    if c not in CORRECTIONS:
        raise ValueError(f"correction={correction!r}: must be one of {'|'.join(CORRECTIONS)} (or None: Holm when "
                         "more than one row is tested against the reference, none otherwise)")
    return c


def correction_method(correction: str | None, n_comparisons: int) -> str:
    """The method applied: ``correction`` when given, else Holm for more than one comparison, none otherwise."""
    c = check_correction(correction)
    if c is not None:
        return c
    return "holm" if n_comparisons > 1 else "none"


def correction_note(method: str, n_comparisons: int) -> str:
    """The line naming the correction: "p adjusted: Holm over 9 comparisons", "p not adjusted (1 comparison)"."""
    what = f"{n_comparisons} comparison{'' if n_comparisons == 1 else 's'}"
    if method == "none":
        return f"p not adjusted for multiple comparisons ({what})"
    return f"p adjusted: {CORRECTION_NAMES[method]} over {what}"


def _as_series(values) -> pd.Series | None:
    if values is None:
        return None
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    s = pd.to_numeric(s, errors="coerce").astype(np.float64)
    s.index = s.index.astype(str)
    return s.dropna()


def _extra_frame(extra, n: int) -> pd.DataFrame:
    if extra is None:
        return pd.DataFrame(index=range(n))
    df = extra.reset_index(drop=True) if isinstance(extra, pd.DataFrame) else pd.DataFrame(list(extra))
    if len(df) != n:
        raise ValueError(f"extra: {len(df)} rows for {n} scores; give one row of extra columns per row")
    return df


def _given(df: pd.DataFrame, col: str, i: int) -> float:
    if col not in df:
        return math.nan
    try:
        v = float(df[col].iloc[i])
    except (TypeError, ValueError):
        return math.nan
    return v


def win_tie_loss(row: pd.Series, ref: pd.Series) -> tuple[int, int, int]:
    """(wins, ties, losses) of ``row`` against ``ref`` on the queries both scored (see the module docstring)."""
    common = row.index.intersection(ref.index)
    d = row.loc[common].to_numpy(dtype=np.float64) - ref.loc[common].to_numpy(dtype=np.float64)
    tie = np.abs(d) <= TIE_TOLERANCE
    return int(np.count_nonzero((d > 0) & ~tie)), int(np.count_nonzero(tie)), int(np.count_nonzero((d < 0) & ~tie))


def leaderboard(
    scores: Sequence[pd.Series | Mapping | None],
    metric: str,
    labels: Sequence[str] | None = None,
    extra: pd.DataFrame | Sequence[Mapping] | None = None,
    reference: int | None = None,
    alpha: float = 0.05,
    correction: str | None = None,
    n_resamples: int = N_RESAMPLES,
    ci_resamples: int = CI_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    fill_missing: float | None = None,
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The leaderboard of ``scores`` on ``metric`` (see the module docstring for every convention).

    scores: per row, the per-query values of ``metric`` (Series indexed by query id, a {query: value} mapping, or
    None when unknown). labels: one per row (default "0", "1", ...). extra: one row of pass-through columns per
    row (may carry the metric's mean and CI as logged). reference: position in ``scores`` of the reference row
    (default: the best). correction: None (Holm when more than one row is tested, else none), "none", "holm" or
    "bh". fill_missing: None (rows scored on other queries than the reference get no test) or the value a query
    missing on one side counts as. names: how notes name the rows (default the labels).
    """
    n = len(scores)
    check_correction(correction)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: the significance level must lie strictly between 0 and 1, e.g. 0.05")
    if n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples}: must be a positive number of resamples, e.g. {N_RESAMPLES}")
    labels = [str(i) for i in range(n)] if labels is None else [str(v) for v in labels]
    if len(labels) != n:
        raise ValueError(f"labels: {len(labels)} labels for {n} scores; give one label per row")
    names = labels if names is None else [str(v) for v in names]
    if len(names) != n:
        raise ValueError(f"names: {len(names)} names for {n} scores; give one name per row")
    ex = _extra_frame(extra, n)
    lo_col, hi_col = f"{metric}_ci_low", f"{metric}_ci_high"
    series = [_as_series(s) for s in scores]

    means, los, his = [], [], []
    for i, s in enumerate(series):
        mean, lo, hi = _given(ex, metric, i), _given(ex, lo_col, i), _given(ex, hi_col, i)
        if s is not None and len(s):
            if math.isnan(mean):
                mean = float(s.mean())
            if math.isnan(lo) or math.isnan(hi):
                ci = bootstrap_ci(s, n_resamples=ci_resamples, confidence=confidence, seed=seed).iloc[0]
                lo, hi = float(ci.ci_low), float(ci.ci_high)
        means.append(mean)
        los.append(lo)
        his.append(hi)

    if reference is None:
        vals = np.array(means, dtype=np.float64)
        ref = int(np.nanargmax(vals)) if n and not np.isnan(vals).all() else (0 if n else None)
    else:
        if not 0 <= int(reference) < n:
            raise ValueError(f"reference={reference}: must be the position of a row, 0 to {n - 1}")
        ref = int(reference)

    notes: list[str] = []
    stats = []
    ref_s = series[ref] if ref is not None else None
    for i, s in enumerate(series):
        if i == ref:
            k = len(s) if s is not None else None
            stats.append((0.0, 0.0, 0.0, math.nan, (0, k, 0) if k is not None else None))
            continue
        if s is None or ref_s is None:
            stats.append((math.nan,) * 4 + (None,))
            continue
        wtl = win_tie_loss(s, ref_s)
        if fill_missing is None:
            if set(s.index) != set(ref_s.index):
                notes.append(f"{names[i]} scored other queries than the reference {names[ref]} ({len(s)} vs "
                             f"{len(ref_s)} queries, {sum(wtl)} in common); no paired test")
                stats.append((math.nan,) * 4 + (wtl,))
                continue
            a, b = s.loc[ref_s.index].to_numpy(), ref_s.to_numpy()
        else:
            union = s.index.union(ref_s.index, sort=False)
            a = s.reindex(union, fill_value=fill_missing).to_numpy()
            b = ref_s.reindex(union, fill_value=fill_missing).to_numpy()
        if a.size == 0:
            stats.append((math.nan,) * 4 + (wtl,))
            continue
        t = paired_test(a, b, n_resamples=n_resamples, seed=seed, confidence=confidence)
        stats.append((t["diff"], t["ci_low"], t["ci_high"], t["p_permutation"], wtl))

    p = np.array([st[3] for st in stats], dtype=np.float64)
    m = int(np.count_nonzero(~np.isnan(p)))
    method = correction_method(correction, m)
    p_adj = adjust_pvalues(p, method) if n else p

    out = pd.DataFrame({"label": labels, metric: means, lo_col: los, hi_col: his})
    for c in ex.columns:
        if c not in (metric, lo_col, hi_col, "label") and c not in TEST_COLUMNS:
            out[c] = ex[c].reset_index(drop=True)
    out["diff"] = [st[0] for st in stats]
    out["diff_ci_low"] = [st[1] for st in stats]
    out["diff_ci_high"] = [st[2] for st in stats]
    out["p_value"] = p
    out["p_adjusted"] = p_adj
    out["significant"] = np.nan_to_num(p_adj, nan=1.0) < alpha
    for j, c in enumerate(("wins", "ties", "losses")):
        out[c] = pd.array([st[4][j] if st[4] is not None else pd.NA for st in stats], dtype="Int64")
    out["correction"] = method
    out["_position"] = range(n)
    out = out.sort_values(metric, ascending=False, kind="stable", na_position="last").reset_index(drop=True)
    position = out.pop("_position").to_list()
    out.attrs.update(metric=metric, alpha=alpha, reference=labels[ref] if ref is not None else None,
                     reference_position=ref, positions=position, correction=method, n_comparisons=m,
                     correction_note=correction_note(method, m), notes=notes)
    return out


def legend_lines(df: pd.DataFrame, reference: str = "the best") -> list[str]:
    """The lines printed under a leaderboard: what p, p adj, * and W/T/L mean, the correction named."""
    alpha = df.attrs.get("alpha", 0.05)
    note = df.attrs.get("correction_note")
    if not note:
        method = str(df["correction"].iloc[0]) if "correction" in df and len(df) else "none"
        note = correction_note(method, int(df["p_value"].notna().sum()) if "p_value" in df else 0)
    return [f"p: two-sided paired randomisation test (sign flips) against {reference}; {note}",
            f"* significantly different from {reference}: p adjusted < {alpha:g} (diff gives the direction)",
            f"W/T/L: queries scored higher / equal / lower than {reference} (queries both scored)"]


def to_records(df: pd.DataFrame) -> list[dict]:
    """The rows as JSON-ready dicts: NaN and <NA> as None, numpy scalars as Python numbers and bools."""
    out = []
    for row in df.to_dict("records"):
        rec = {}
        for k, v in row.items():
            if v is pd.NA or v is None or (isinstance(v, float) and math.isnan(v)):
                v = None
            elif isinstance(v, np.bool_):
                v = bool(v)
            elif isinstance(v, np.integer):
                v = int(v)
            elif isinstance(v, np.floating):
                v = None if math.isnan(float(v)) else float(v)
            rec[str(k)] = v
        out.append(rec)
    return out
