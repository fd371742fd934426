"""Plots of results: pure functions from tables to matplotlib Figures.

Conventions
- Every function takes a pandas DataFrame (one row per configuration or per query) and returns a new
  :class:`matplotlib.figure.Figure` built without pyplot: no global figure state, safe under the Agg backend,
  displayed by Jupyter as the cell's value, saved with ``fig.savefig(path)`` or ``lab.tracking.store.log_figure``.
- Confidence-interval columns are named ``<metric>_ci_low`` / ``<metric>_ci_high`` (the names lab.tracking.store logs
  and lab.analysis.compare returns); any other names can be passed explicitly. Missing CI columns draw no error bars.
- Quality is higher-is-better, latency lower-is-better; :func:`pareto_front` uses exactly that convention.
- The tables the plots take are built from in-memory Results by :func:`results_table` and
  :func:`results_leaderboard` (lab.analysis.leaderboard.leaderboard: the same columns as
  lab.analysis.compare.experiment_leaderboard, which builds them from MLflow runs).
- In a notebook, figures show once ``%matplotlib inline`` is active (``display(fig)``).
"""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from lab.analysis.labels import SEPARATOR, short_labels
from lab.analysis.leaderboard import leaderboard
from lab.metrics import bootstrap_ci
from lab.metrics.stats import CI_RESAMPLES, N_RESAMPLES
from lab.testset.gates import GATES

if TYPE_CHECKING:  # matplotlib is imported where a figure is made (pyproject: banned-module-level-imports)
    from matplotlib.figure import Figure

#: Colours cycled over series (matplotlib's tab10, fixed so figures do not depend on rcParams).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
#: How a value is printed on a hatched bar: dark text on a white box, so the hatching does not cross it.
VALUE_ON_HATCH = {"color": "#222222", "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "white",
                                                "edgecolor": "none", "alpha": 0.9}}


def new_figure(**kwargs) -> Figure:
    """A :class:`matplotlib.figure.Figure` (no pyplot state); matplotlib is imported on the first figure."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def ci_columns(metric: str) -> tuple[str, str]:
    """Names of the lower and upper CI columns of ``metric``: ("ndcg@10_ci_low", "ndcg@10_ci_high")."""
    return f"{metric}_ci_low", f"{metric}_ci_high"


def pareto_front(quality: Sequence[float], cost: Sequence[float]) -> np.ndarray:
    """Boolean mask of the Pareto-optimal points: higher quality and lower cost are better.

    A point is on the front when no other point is at least as good on both axes and strictly better on one
    (so exact duplicates of a front point are all on the front). NaN in either value: never on the front.
    """
    q = np.asarray(quality, dtype=float)
    c = np.asarray(cost, dtype=float)
    if q.shape != c.shape:
        raise ValueError(f"pareto_front: quality has {q.shape} values and cost {c.shape}")
    valid = ~(np.isnan(q) | np.isnan(c))
    on = valid.copy()
    for i in np.flatnonzero(valid):
        others = valid & (q >= q[i]) & (c <= c[i]) & ((q > q[i]) | (c < c[i]))
        if others.any():
            on[i] = False
    return on


def _ci_err(df: pd.DataFrame, metric: str, ci: tuple[str, str] | None) -> np.ndarray | None:
    """Asymmetric error-bar array (2, n) from CI columns, or None when they are absent."""
    lo, hi = ci or ci_columns(metric)
    if lo not in df or hi not in df:
        return None
    y = df[metric].to_numpy(dtype=float)
    err = np.vstack([y - df[lo].to_numpy(dtype=float), df[hi].to_numpy(dtype=float) - y])
    return np.clip(err, 0, None)


def _labels(df: pd.DataFrame, label: str | None, width: int = 34) -> list[str]:
    """Row labels: sweep labels ("strategy=rerank, params.model=...") shortened to what varies between the rows
    (:func:`lab.analysis.labels.short_labels`), then wrapped at ``width`` characters so they stay inside the figure."""
    values = [str(i) for i in df.index] if label is None or label not in df else [str(v) for v in df[label]]
    return [_wrap(v, width) for v in short_labels(values)]


def _wrap(text: str, width: int) -> str:
    """Wrap at ``width`` characters, breaking between " · " parts where it can, else between words."""
    lines: list[str] = []
    for part in text.split(SEPARATOR):
        if lines and len(lines[-1]) + len(SEPARATOR) + len(part) <= width:
            lines[-1] += SEPARATOR + part
        else:
            lines.extend(textwrap.wrap(part, width) or [part])
    return "\n".join(lines) or text


def place_labels(ax, x: Sequence[float], y: Sequence[float], names: Sequence[str], marker_px: float = 6.0,
                 fontsize="small") -> list:
    """Annotate each point (x, y) of ``ax`` with its name so that no two names overlap, no name covers a point
    or the legend, and every name stays inside the axes (a greedy repel in the spirit of ggrepel / adjustText).

    Points are taken from the best (highest y) down; each name tries positions on rings around its point
    (offsets 6 to 90 points, eight directions) and takes the first free one; a name moved off its first ring
    gets a thin leader line to its point. When nothing is free, the position with the least overlap is used.
    The figure's layout is fixed first (drawn once, then its layout engine is switched off) so display
    positions do not move afterwards. Returns the Annotation artists.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = ax.figure
    if fig.canvas is None or not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    axbox = ax.get_window_extent(renderer)
    pts = ax.transData.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)]))
    scale = fig.dpi / 72.0
    r = marker_px * scale
    point_boxes = [(px - r, py - r, px + r, py + r) for px, py in pts if np.isfinite(px) and np.isfinite(py)]
    if ax.get_legend() is not None:  # the legend is an obstacle too
        lb = ax.get_legend().get_window_extent(renderer)
        point_boxes.append((lb.x0, lb.y0, lb.x1, lb.y1))
    dirs = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    rings = (6, 14, 24, 36, 50, 66, 90)
    placed: list[tuple[float, float, float, float]] = []
    artists = []

    def overlap(a, b) -> float:
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    order = np.argsort(-np.nan_to_num(np.asarray(y, float), nan=-np.inf), kind="stable")
    for i in order:
        if not (np.isfinite(pts[i][0]) and np.isfinite(pts[i][1])):
            continue
        ann = ax.annotate(names[i], (x[i], y[i]), textcoords="offset points", xytext=(6, 6), fontsize=fontsize,
                          ha="left", va="bottom", zorder=4)
        best, best_cost = None, np.inf
        for ring in rings:
            for dx, dy in dirs:
                ann.set_position((dx * ring, dy * ring))
                ann.set_ha({1: "left", -1: "right", 0: "center"}[dx])
                ann.set_va({1: "bottom", -1: "top", 0: "center"}[dy])
                bb = ann.get_window_extent(renderer)
                box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
                outside = max(0.0, axbox.x0 - box[0]) + max(0.0, box[2] - axbox.x1) + \
                    max(0.0, axbox.y0 - box[1]) + max(0.0, box[3] - axbox.y1)
                cost = sum(overlap(box, p) for p in placed) + sum(overlap(box, p) for p in point_boxes) + \
                    1e3 * outside
                if cost < best_cost:
                    best, best_cost = (dx, dy, ring, box), cost
                if cost == 0:
                    break
            if best_cost == 0:
                break
        dx, dy, ring, box = best
        ann.remove()  # the probe; the label is made again with its final position (and a leader line if moved)
        ann = ax.annotate(names[i], (x[i], y[i]), textcoords="offset points", xytext=(dx * ring, dy * ring),
                          fontsize=fontsize, ha={1: "left", -1: "right", 0: "center"}[dx],
                          va={1: "bottom", -1: "top", 0: "center"}[dy], zorder=4,
                          arrowprops={"arrowstyle": "-", "color": "#888888", "lw": 0.6, "shrinkA": 0,
                                      "shrinkB": 4} if ring > rings[0] else None)
        placed.append(box)
        artists.append(ann)
    return artists


def metric_vs_param(
    df: pd.DataFrame,
    x: str,
    metrics: str | Sequence[str],
    ci: Mapping[str, tuple[str, str]] | None = None,
    hue: str | Sequence[str] | None = None,
    logx: bool | None = None,
    title: str = "",
) -> Figure:
    """One panel per metric: metric against parameter ``x`` (e.g. chunk size), one line per ``hue`` group
    (e.g. chunker and overlap), with shaded CI bands from ``ci[metric]`` (default: ``ci_columns(metric)``).

    logx: log2 x axis; default True when every x is positive and max/min >= 8 (chunk sizes 64..1024).
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    _require(df, [x, *metrics], "metric_vs_param")
    hue_cols = [hue] if isinstance(hue, str) else list(hue or [])
    xs = df[x].to_numpy(dtype=float)
    if logx is None:
        logx = bool(len(xs)) and bool((xs > 0).all()) and xs.max() / xs.min() >= 8
    fig = new_figure(figsize=(5.0 * len(metrics), 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    groups = list(df.groupby(hue_cols, sort=True)) if hue_cols else [((), df)]
    for ax, metric in zip(axes, metrics, strict=True):
        for i, (key, g) in enumerate(groups):
            g = g.sort_values(x)
            color = COLORS[i % len(COLORS)]
            name = ", ".join(f"{c}={v}" for c, v in zip(hue_cols, key if isinstance(key, tuple) else (key,),
                                                        strict=True))
            ax.plot(g[x], g[metric], marker="o", color=color, label=name or None)
            lo, hi = (ci or {}).get(metric, ci_columns(metric))
            if lo in g and hi in g:
                ax.fill_between(g[x].to_numpy(dtype=float), g[lo].to_numpy(dtype=float),
                                g[hi].to_numpy(dtype=float), color=color, alpha=0.15, linewidth=0)
        if logx:
            ax.set_xscale("log", base=2)
            ticks = np.unique(xs)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        if hue_cols:
            ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def leaderboard_bars(
    df: pd.DataFrame,
    metric: str,
    label: str | None = "strategy",
    ci: tuple[str, str] | None = None,
    highlight: Sequence[bool] | None = None,
    title: str = "",
) -> Figure:
    """Horizontal bars of ``metric`` per row (best on top), with CI error bars when the CI columns exist.

    label: column naming each row (default "strategy"; the index when absent). highlight: optional boolean
    per row (e.g. "significantly worse than the best") drawn hatched and named in the legend; the value printed
    on a hatched bar sits on a white box (:data:`VALUE_ON_HATCH`) so it stays readable.
    """
    _require(df, [metric], "leaderboard_bars")
    order = np.argsort(-df[metric].to_numpy(dtype=float), kind="stable")
    d = df.iloc[order]
    names = _labels(d, label)
    err = _ci_err(d, metric, ci)
    y = np.arange(len(d))[::-1]
    lines = sum(n.count("\n") + 1 for n in names)
    fig = new_figure(figsize=(8.5, 0.3 * lines + 0.25 * len(d) + 1.4), layout="constrained")
    ax = fig.subplots()
    bars = ax.barh(y, d[metric].to_numpy(dtype=float), xerr=err, color=COLORS[0], alpha=0.85, capsize=3,
                   error_kw={"elinewidth": 1, "ecolor": "#333333"})
    if highlight is not None:
        flags = np.asarray(highlight, dtype=bool)[order]
        for bar, flag in zip(bars, flags, strict=True):
            if flag:
                bar.set_hatch("//")
                bar.set_alpha(0.45)
        if flags.any():
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(facecolor=COLORS[0], alpha=0.45, hatch="//", label="significantly below best")],
                      fontsize="small", loc="lower right")
    hi = d[metric].to_numpy(dtype=float) + (err[1] if err is not None else 0.0)
    top = float(np.nanmax(hi)) if len(d) and np.isfinite(hi).any() else 1.0
    ax.set_xlim(0, max(top * 1.1, 1e-9))
    hatched = (np.asarray(highlight, dtype=bool)[order] if highlight is not None
               else np.zeros(len(d), dtype=bool))
    for yi, v, flag in zip(y, d[metric].to_numpy(dtype=float), hatched,
                           strict=True):  # value at the bar's base, clear of the error bar
        ax.text(top * 0.01, yi, f"{v:.3f}", va="center", ha="left", fontsize="small", fontweight="bold",
                **(VALUE_ON_HATCH if flag else {"color": "white"}))
    ax.set_yticks(y, names)
    ax.set_xlabel(metric + (" (95% CI)" if err is not None else ""))
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


def quality_vs_latency(
    df: pd.DataFrame,
    metric: str,
    latency: str = "latency_p50_ms",
    label: str | None = "strategy",
    ci: tuple[str, str] | None = None,
    logx: bool | None = None,
    title: str = "",
) -> Figure:
    """Scatter of quality (``metric``, up is better) against ``latency`` (left is better), each point named,
    with the Pareto front (see :func:`pareto_front`) drawn as a step line and its points filled.

    logx: log x axis; default True when every latency is positive and they span a factor of 50 or more
    (BM25 at ~1 ms next to a reranker at ~1 s)."""
    _require(df, [metric, latency], "quality_vs_latency")
    q = df[metric].to_numpy(dtype=float)
    c = df[latency].to_numpy(dtype=float)
    front = pareto_front(q, c)
    fig = new_figure(figsize=(6.5, 4.5) if len(df) <= 6 else (8.5, 6.0), layout="constrained")
    ax = fig.subplots()
    err = _ci_err(df, metric, ci)
    if err is not None:
        ax.errorbar(c, q, yerr=err, fmt="none", ecolor="#999999", elinewidth=1, capsize=2, zorder=1)
    ax.scatter(c[~front], q[~front], s=45, facecolors="white", edgecolors=COLORS[0], zorder=2, label="dominated")
    ax.scatter(c[front], q[front], s=55, color=COLORS[3], zorder=3, label="Pareto front")
    idx = np.flatnonzero(front)
    idx = idx[np.argsort(c[idx], kind="stable")]
    if len(idx) > 1:
        ax.step(c[idx], q[idx], where="post", color=COLORS[3], alpha=0.6, zorder=2)
    finite = c[np.isfinite(c)]
    if logx is None:
        logx = bool(len(finite)) and bool((finite > 0).all()) and finite.max() / finite.min() >= 50
    if logx:
        ax.set_xscale("log")
    ax.margins(x=0.2, y=0.12)
    ax.set_xlabel(f"{latency} (lower is better" + (", log scale)" if logx else ")"))
    ax.set_ylabel(f"{metric} (higher is better)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    if title:
        ax.set_title(title)
    place_labels(ax, c, q, _labels(df, label, width=28))  # last: needs the final axes limits and layout
    return fig


def per_query_distribution(
    per_query: pd.DataFrame | pd.Series | Mapping[str, pd.DataFrame | pd.Series],
    metric: str,
    title: str = "",
    seed: int = 0,
) -> Figure:
    """Distribution of one metric over queries: a box plot per system with the per-query points jittered on top.

    per_query: one Evaluation.per_query table (index query_id, one column per metric), a Series of values, or a
    mapping system name -> such a table/Series. Jitter is seeded (``seed``) so the figure is reproducible.
    """
    if isinstance(per_query, (pd.DataFrame, pd.Series)):
        per_query = {metric: per_query}
    names, values = [], []
    for name, table in per_query.items():
        s = table if isinstance(table, pd.Series) else _require(table, [metric], "per_query_distribution")[metric]
        names.append(str(name))
        values.append(s.dropna().to_numpy(dtype=float))
    fig = new_figure(figsize=(max(4.0, 1.3 * len(names) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    ax.boxplot(values, showmeans=True, showfliers=False, widths=0.5, medianprops={"color": COLORS[1]},
               meanprops={"marker": "D", "markerfacecolor": COLORS[3], "markeredgecolor": COLORS[3]})
    rng = np.random.default_rng(seed)
    for i, v in enumerate(values, start=1):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(v)), v, s=8, alpha=0.35, color=COLORS[0], zorder=3)
    long = max((len(n) for n in names), default=0) > 14
    ax.set_xticks(range(1, len(names) + 1), [f"{n}\n(n={len(v)})" for n, v in zip(names, values, strict=True)],
                  rotation=30 if long else 0, ha="right" if long else "center", fontsize="small" if long else None)
    ax.set_ylabel(metric)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title or f"{metric} per query (box: quartiles, diamond: mean)")
    return fig


def histogram(values: Sequence[float] | pd.Series, xlabel: str, bins: int | Sequence[float] = 20,
              discrete: bool = False, title: str = "") -> Figure:
    """Histogram of ``values``; ``discrete=True`` draws one bar per distinct integer value (grades, counts)."""
    v = np.asarray(pd.Series(values).dropna(), dtype=float)
    fig = new_figure(figsize=(5.0, 3.5), layout="constrained")
    ax = fig.subplots()
    if discrete and len(v):
        vals, counts = np.unique(v, return_counts=True)
        ax.bar(vals, counts, width=0.8, color=COLORS[0])
        ax.set_xticks(vals, [f"{x:g}" for x in vals])
    else:
        ax.hist(v, bins=bins, color=COLORS[0], alpha=0.85)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


def gate_funnel(report, title: str = "") -> Figure:
    """The quality-gate funnel of a generated test set (a :class:`lab.testset.gates.GateReport`): per gate, in
    the order they are applied, the candidates dropped there (bar) and those still remaining after it (line)."""
    dropped = [int(report.dropped_at[g]) for g in GATES]
    remaining = list(np.int64(report.candidates) - np.cumsum(dropped))
    fig = new_figure(figsize=(7.0, 3.6), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(GATES))
    ax.bar(x, dropped, color=COLORS[3 % len(COLORS)], alpha=0.85, label="dropped at this gate")
    ax.plot(x, remaining, "o-", color=COLORS[0], label="remaining after it")
    ax.set_xticks(x, [g.replace("_", " ") for g in GATES], rotation=30, ha="right")
    ax.set_ylabel("candidates")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or f"gates: {report.candidates} candidates -> {report.accepted} accepted "
                          f"({report.yield_rate:.0%})")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Tables the plots take, built from lab.experiment.run.Result values (columns as
# lab.analysis.compare.experiment_leaderboard names them)
# ---------------------------------------------------------------------------------------------------------------
#: Figures copied from each Result next to the metrics (latency in ms, seconds for index and search).
RESULT_COLUMNS = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "index_seconds", "search_seconds",
                  "llm_index_calls", "llm_index_tokens", "llm_index_seconds", "llm_index_cold_seconds",
                  "llm_query_calls", "llm_query_tokens", "llm_query_seconds")


def results_table(
    results: Mapping[str, object] | Sequence[tuple[Mapping, object]],
    metrics: Sequence[str] | None = None,
    n_resamples: int = CI_RESAMPLES,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per Result, in the order given: ``label``, the label fields, then for each metric its mean and
    percentile-bootstrap CI (``<metric>``, ``<metric>_ci_low``, ``<metric>_ci_high``; lab.metrics.bootstrap_ci,
    seeded), then latency / index / search figures, n_queries, n_excluded, n_units and relevance_mode.

    results: {label: Result}, or a sequence of ({field: value}, Result) whose fields become columns and whose
    label is "field=value, ...". metrics: the metrics to tabulate (default: every metric the Results scored).
    """
    items = [({}, r, str(k)) for k, r in results.items()] if isinstance(results, Mapping) else \
        [(dict(f), r, ", ".join(f"{k}={v}" for k, v in f.items())) for f, r in results]
    rows = []
    for fields, res, label in items:
        ev = res.evaluation
        cols = list(metrics) if metrics is not None else list(ev.per_query.columns)
        missing = [m for m in cols if m not in ev.per_query.columns]
        if missing:
            raise KeyError(f"results_table: {label!r} has no metric {missing}; it has {list(ev.per_query.columns)}")
        row = {"label": label, **fields}
        ci = bootstrap_ci(ev.per_query[cols], n_resamples=n_resamples, seed=seed).set_index("metric")
        for m in cols:
            row[m] = float(ev.means[m])
            row[f"{m}_ci_low"], row[f"{m}_ci_high"] = float(ci.loc[m, "ci_low"]), float(ci.loc[m, "ci_high"])
        summary = res.summary()
        row.update({c: float(summary[c]) for c in RESULT_COLUMNS if c in summary})
        info = getattr(res, "info", {}) or {}
        row.update(n_queries=int(ev.n_queries), n_excluded=len(ev.excluded), n_units=info.get("n_units"),
                   relevance_mode=info.get("relevance_mode"))
        rows.append(row)
    return pd.DataFrame(rows)


def results_leaderboard(
    results: Mapping[str, object],
    metric: str = "ndcg@10",
    metrics: Sequence[str] | None = None,
    alpha: float = 0.05,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    correction: str | None = None,
) -> pd.DataFrame:
    """:func:`results_table` of {label: Result}, best ``metric`` first, with a paired test of each row against
    the best one, built by the one leaderboard function :func:`lab.analysis.leaderboard.leaderboard` (the same
    columns as lab.analysis.compare.experiment_leaderboard and lab report): ``diff``, ``diff_ci_low``, ``diff_ci_high``,
    ``p_value`` (raw two-sided sign-flip randomisation test, row minus best), ``p_adjusted`` (``correction``:
    none|holm|bh, default Holm when more than one row is tested), ``significant`` (p_adjusted < alpha), ``wins``,
    ``ties``, ``losses`` and ``correction``. CIs are results_table's (min(n_resamples, CI_RESAMPLES) resamples). As in
    lab.metrics.compare, Evaluations scored on other queries are paired on the union of the queries, a query one
    of them did not score counting 0 there.
    """
    for attr, what in (("metrics_version", "re-evaluate them with the same raglab version"),
                       ("rel_threshold", "re-evaluate them with one rel_threshold")):
        seen = {str(getattr(r.evaluation, attr, None)) for r in results.values()}
        if len(seen) > 1:
            raise ValueError(f"results_leaderboard: the results carry different {attr} ({', '.join(sorted(seen))}); "
                             f"{what}")
    cols = list(dict.fromkeys([metric, *(metrics or [])]))
    table = results_table(results, cols, n_resamples=min(n_resamples, CI_RESAMPLES), seed=seed)
    scores = [results[k].evaluation.per_query[metric] for k in results]
    board = leaderboard(scores, metric, labels=table["label"], extra=table, alpha=alpha, correction=correction,
                        n_resamples=n_resamples, seed=seed, fill_missing=0.0)
    attrs = dict(board.attrs)
    board = board[[*table.columns, *(c for c in board.columns if c not in table.columns)]]
    board.attrs.update(attrs)
    return board


def _require(df: pd.DataFrame, cols: Sequence[str], where: str) -> pd.DataFrame:
    missing = [c for c in cols if c not in df]
    if missing:
        raise KeyError(f"{where}: column(s) {missing} missing; available: {list(df.columns)}")
    return df


def trend_lines(history: pd.DataFrame, metric: str, label: str = "label", title: str = "") -> Figure:
    """A metric over scheduled sweeps: one line per configuration (x = the sweep's sequence number), the CI as
    error bars, and markers where the dataset (triangle) or a model (square) changed since that configuration's
    previous sweep. ``history``: one row per (sweep, configuration) with columns ``sequence``, ``label``,
    ``<metric>``, the CI columns, ``dataset_changed`` and ``model_changed`` (as lab.analysis.trends.schedule_history
    returns it)."""
    _require(history, ["sequence", label, metric], "trend_lines")
    fig = new_figure(figsize=(8.5, 4.2), layout="constrained")
    ax = fig.subplots()
    lo, hi = ci_columns(metric)
    marked = {"dataset": False, "model": False}
    for i, (name, d) in enumerate(history.sort_values("sequence").groupby(label, sort=False)):
        color = COLORS[i % len(COLORS)]
        x = d["sequence"].to_numpy(dtype=float)
        y = d[metric].to_numpy(dtype=float)
        err = None
        if lo in d and hi in d:
            err = np.vstack([np.clip(y - d[lo].to_numpy(dtype=float), 0, None),
                             np.clip(d[hi].to_numpy(dtype=float) - y, 0, None)])
            err = np.nan_to_num(err)
        ax.errorbar(x, y, yerr=err, color=color, marker="o", ms=4, capsize=3, lw=1.4, label=str(name)[:40])
        for col, mk, key in (("dataset_changed", "^", "dataset"), ("model_changed", "s", "model")):
            if col in d:
                flags = d[col].fillna(False).to_numpy(dtype=bool)
                if flags.any():
                    ax.scatter(x[flags], y[flags], marker=mk, s=90, facecolors="none", edgecolors="#d62728",
                               linewidths=1.6, zorder=5, label=None if marked[key] else f"{key} changed")
                    marked[key] = True
    ax.set_xlabel("scheduled sweep (sequence)")
    ax.set_ylabel(metric)
    seqs = sorted(history["sequence"].unique())
    ax.set_xticks(seqs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or f"{metric} over scheduled sweeps (95% CI)")
    return fig
