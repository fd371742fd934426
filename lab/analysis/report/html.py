"""HTML pieces of the report: escaping, tables, images as data URIs, the sections' renderers and the page
around them."""
from __future__ import annotations

import base64
import html
import io
import math
import time
from collections.abc import Mapping, Sequence

import pandas as pd

from lab.analysis import diagnosis as dg
from lab.analysis.labels import short_labels
from lab.analysis.plots import trend_lines
from lab.analysis.ppi import ppi_lines
from lab.analysis.trust import trust_lines

#: Metrics of the report when none are named: the README's headline columns.

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


def chart_frame(board: pd.DataFrame, metric: str) -> pd.DataFrame:
    d = board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "latency_p50_ms"]].copy()
    d["label"] = [chart_label(lbl, i + 1) for i, lbl in enumerate(short_labels([str(v) for v in d["label"]]))]
    return d[d[metric].notna()].reset_index(drop=True)




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


def img_tag(uri: str, alt: str) -> str:
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




def page_html(title: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole HTML document: head (inline CSS), the title, a navigation bar and the (id, title, body) sections."""
    nav = "<nav>" + "".join(f'<a href="#{sid}">{esc(sid)}</a>' for sid, _, _ in sections) + "</nav>"
    body = "\n".join(_section(sid, heading, html_body) for sid, heading, html_body in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n<h1>{esc(title)}</h1>\n{nav}\n{body}\n"
            f'<p class="muted">Generated by raglab (lab report) on {time.strftime("%Y-%m-%d %H:%M")}.</p>\n'
            "</body></html>\n")




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

