"""lab.analysis.plots: the Pareto computation, and that every figure renders to a real PNG under Agg."""
from __future__ import annotations

import io
import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from lab.analysis import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    data = buf.getvalue()
    assert data.startswith(PNG_MAGIC) and len(data) > 2000, "not a PNG with content"
    return data


def _brute_front(q, c):
    """Reference: i is on the front iff no j dominates it (>= on quality, <= on cost, one strict)."""
    out = []
    for i in range(len(q)):
        out.append(not any(q[j] >= q[i] and c[j] <= c[i] and (q[j] > q[i] or c[j] < c[i]) for j in range(len(q))))
    return np.array(out)


def test_pareto_front_small_known_case():
    # (quality, latency): a fast-weak, b slow-strong, c dominated by b, d fastest but worst
    q = [0.60, 0.70, 0.65, 0.50]
    c = [2.0, 10.0, 12.0, 1.0]
    assert plots.pareto_front(q, c).tolist() == [True, True, False, True]


def test_pareto_front_duplicates_and_nan():
    q = [0.7, 0.7, 0.6, np.nan, 0.8]
    c = [5.0, 5.0, 5.0, 1.0, np.nan]
    # the two identical best-at-cost-5 points are both on the front; NaN rows never are
    assert plots.pareto_front(q, c).tolist() == [True, True, False, False, False]


def test_pareto_front_matches_brute_force_on_random_points():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        q = np.round(rng.uniform(0, 1, n), 1)  # rounding forces ties
        c = np.round(rng.uniform(0, 10, n), 0)
        assert plots.pareto_front(q, c).tolist() == _brute_front(q, c).tolist()


def test_pareto_front_is_monotone_after_sorting_by_cost():
    rng = np.random.default_rng(1)
    q, c = rng.uniform(size=40), rng.uniform(size=40)
    front = plots.pareto_front(q, c)
    order = np.argsort(c[front])
    assert np.all(np.diff(q[front][order]) > 0), "on the front, more cost must buy more quality"


def test_pareto_front_shape_mismatch():
    with pytest.raises(ValueError, match="quality has"):
        plots.pareto_front([1, 2], [1])


def _grid_table():
    rows = []
    for chunker, size in itertools.product(["recursive", "fixed"], [64, 128, 256, 512, 1024]):
        m = 0.5 + 0.05 * np.log2(size / 64) - (0.03 if chunker == "fixed" else 0)
        rows.append({"chunker": chunker, "size": size, "ndcg@10": m, "ndcg@10_ci_low": m - 0.04,
                     "ndcg@10_ci_high": m + 0.04, "recall@10": m + 0.1})
    return pd.DataFrame(rows)


def test_metric_vs_param_renders_with_ci_bands_and_log_axis():
    fig = plots.metric_vs_param(_grid_table(), "size", ["recall@10", "ndcg@10"], hue="chunker")
    axes = fig.get_axes()
    assert len(axes) == 2
    assert axes[0].get_xscale() == "log"
    assert len(axes[1].lines) == 2 and len(axes[1].collections) == 2  # one band per chunker where CIs exist
    assert len(axes[0].collections) == 0  # recall@10 has no CI columns: no band
    _png(fig)


def test_metric_vs_param_missing_column_names_it():
    with pytest.raises(KeyError, match="ndcg@5"):
        plots.metric_vs_param(_grid_table(), "size", "ndcg@5")


def _board():
    return pd.DataFrame({
        "strategy": ["bm25", "dense", "hybrid"],
        "ndcg@10": [0.66, 0.64, 0.70],
        "ndcg@10_ci_low": [0.62, 0.60, 0.66],
        "ndcg@10_ci_high": [0.70, 0.68, 0.74],
        "latency_p50_ms": [1.0, 8.0, 9.0],
    })


def test_leaderboard_bars_sorted_best_first_with_error_bars():
    fig = plots.leaderboard_bars(_board(), "ndcg@10", highlight=[False, True, False])
    ax = fig.get_axes()[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    ys = [t.get_position()[1] for t in ax.get_yticklabels()]
    assert [lab for _, lab in sorted(zip(ys, labels, strict=False), reverse=True)] == ["hybrid", "bm25", "dense"]
    assert ax.get_legend() is not None  # the hatched "significantly below best" entry
    _png(fig)


def test_leaderboard_bars_value_on_a_hatched_bar_sits_on_a_white_box():
    """The value printed on a hatched bar (significantly below the best) gets an opaque white box and dark text, so
    the hatching does not cross it; values on plain bars stay white text without a box."""
    from matplotlib.colors import to_rgba

    fig = plots.leaderboard_bars(_board(), "ndcg@10", highlight=[False, True, False])
    ax = fig.get_axes()[0]
    values = {t.get_text(): t for t in ax.texts}
    assert set(values) == {"0.700", "0.660", "0.640"}
    hatched = values["0.640"]  # dense, the highlighted row
    box = hatched.get_bbox_patch()
    assert box is not None and to_rgba(box.get_facecolor())[:3] == (1.0, 1.0, 1.0)
    assert to_rgba(hatched.get_color())[:3] != (1.0, 1.0, 1.0)
    for plain in (values["0.700"], values["0.660"]):
        assert plain.get_bbox_patch() is None and to_rgba(plain.get_color()) == (1.0, 1.0, 1.0, 1.0)
    _png(fig)


def test_leaderboard_bars_without_ci_columns():
    _png(plots.leaderboard_bars(_board()[["strategy", "ndcg@10"]], "ndcg@10"))


def test_quality_vs_latency_marks_the_front():
    fig = plots.quality_vs_latency(_board(), "ndcg@10")
    ax = fig.get_axes()[0]
    front = [c for c in ax.collections if c.get_label() == "Pareto front"][0]
    # bm25 (fast) and hybrid (best) are on the front, dense is dominated by bm25
    assert sorted(map(tuple, front.get_offsets().tolist())) == [(1.0, 0.66), (9.0, 0.70)]
    _png(fig)


def test_per_query_distribution_single_and_many():
    rng = np.random.default_rng(0)
    a = pd.DataFrame({"ndcg@10": rng.uniform(size=30)}, index=[f"q{i}" for i in range(30)])
    b = pd.DataFrame({"ndcg@10": rng.uniform(size=30)}, index=a.index)
    _png(plots.per_query_distribution(a, "ndcg@10"))
    fig = plots.per_query_distribution({"bm25": a, "dense": b["ndcg@10"]}, "ndcg@10")
    assert [t.get_text() for t in fig.get_axes()[0].get_xticklabels()] == ["bm25\n(n=30)", "dense\n(n=30)"]
    _png(fig)


def test_histogram_discrete_and_continuous():
    _png(plots.histogram([1, 1, 2, 2, 2, 3], "grade", discrete=True))
    _png(plots.histogram(np.random.default_rng(0).normal(10, 2, 200), "query length (words)"))


# ---------------------------------------------------------------------------------------------------------------
# tables built from Result values
# ---------------------------------------------------------------------------------------------------------------
def _result(name: str, hits_of, n_queries: int = 40, latency_ms: float = 1.0):
    """A real Result: a Run scored by lab.metrics.evaluate against qrels with one relevant doc per query."""
    from lab.data.types import Qrels, Run
    from lab.experiment.run import Result
    from lab.metrics import evaluate, latency_summary

    qids = [f"q{i:02d}" for i in range(n_queries)]
    qrels = Qrels({q: {f"{q}-rel": 1} for q in qids})
    run = Run({q: hits_of(i, q) for i, q in enumerate(qids)}, name=name,
              latency={q: latency_ms / 1000 for q in qids})
    ev = evaluate(qrels, run, ["ndcg@10", "recall@10"])
    return Result({"strategy": name}, run, ev, latency_summary(run.latency), 2.0, 0.1,
                  {"n_units": 100, "relevance_mode": "doc"})


def _rank(pos):
    """Hits with the relevant doc at rank ``pos`` (1-based), or absent when pos is None."""
    def hits(i, q):
        docs = {f"{q}-d{j}": 1.0 - j / 100 for j in range(20)}
        if pos is not None:
            docs[f"{q}-rel"] = 1.0 - (pos - 1.5) / 100
        return docs
    return hits


def test_results_table_means_and_cis():
    good = _result("good", _rank(1))
    mixed = _result("mixed", lambda i, q: _rank(1 if i % 2 else None)(i, q))
    t = plots.results_table({"good": good, "mixed": mixed}, ["ndcg@10"])
    assert list(t["label"]) == ["good", "mixed"]
    assert t.loc[0, "ndcg@10"] == pytest.approx(1.0) and t.loc[1, "ndcg@10"] == pytest.approx(0.5)
    # every query scores 1: a 0/1 column, so the interval is Wilson's (it does not collapse to [1, 1] on 40 hits)
    assert t.loc[0, "ndcg@10_ci_high"] == pytest.approx(1.0)
    assert t.loc[0, "ndcg@10_ci_low"] == pytest.approx(40 / (40 + 1.959964 ** 2), abs=1e-4)
    assert t.loc[1, "ndcg@10_ci_low"] < 0.5 < t.loc[1, "ndcg@10_ci_high"]
    assert "recall@10" not in t and t.loc[0, "latency_p50_ms"] == pytest.approx(1.0)
    assert t.loc[0, "n_queries"] == 40 and t.loc[0, "n_units"] == 100
    rows = plots.results_table([({"size": 64, "chunker": "fixed"}, mixed)])
    assert rows.loc[0, "label"] == "size=64, chunker=fixed" and rows.loc[0, "size"] == 64
    assert {"ndcg@10", "recall@10_ci_high"} <= set(rows.columns)  # default: every metric scored
    with pytest.raises(KeyError, match="map@10"):
        plots.results_table({"good": good}, ["map@10"])


def test_results_leaderboard_orders_and_tests_against_the_best():
    best = _result("best", _rank(1))
    close = _result("close", lambda i, q: _rank(2 if i == 0 else 1)(i, q))  # one query slightly worse
    bad = _result("bad", lambda i, q: _rank(1 if i % 3 == 0 else None)(i, q))
    t = plots.results_leaderboard({"bad": bad, "close": close, "best": best}, "ndcg@10", ["recall@10"], seed=0)
    assert list(t["label"]) == ["best", "close", "bad"]
    assert t.loc[0, "diff"] == 0.0 and not t.loc[0, "significant"]
    assert t.loc[1, "diff"] == pytest.approx(close.evaluation.means["ndcg@10"] - 1.0)
    assert not t.loc[1, "significant"] and t.loc[1, "p_value"] > 0.5  # one query of 40 differs
    assert t.loc[2, "significant"] and t.loc[2, "p_value"] < 0.001
    assert t.loc[2, "diff_ci_low"] <= t.loc[2, "diff"] <= t.loc[2, "diff_ci_high"] < 0
    assert "recall@10_ci_low" in t and t.attrs["metric"] == "ndcg@10"
    _png(plots.leaderboard_bars(t, "ndcg@10", label="label", highlight=t["significant"]))
    _png(plots.quality_vs_latency(t, "ndcg@10", label="label"))


# ---------------------------------------------------------------------------------------------------------------
# readable labels, never overlapping, with twelve strategies
# ---------------------------------------------------------------------------------------------------------------
TWELVE = {  # label -> (nDCG@10, P50 ms): clusters on purpose (dense / dense_ft / raptor / qna, the two rerankers)
    "strategy=bm25": (0.680, 0.23), "strategy=dense": (0.645, 66), "strategy=hybrid": (0.715, 69),
    "strategy=rerank, params.reranker=biencoder, params.model=all-MiniLM-L6-v2, params.alpha=0.5, params.top_n=50":
        (0.7255, 250),
    "strategy=hybrid_rerank, params.reranker=biencoder, params.model=all-MiniLM-L6-v2, params.alpha=0.5, "
    "params.top_n=50": (0.7180, 260),
    "strategy=hyde": (0.62, 900), "strategy=qna": (0.64, 70), "strategy=kg": (0.66, 12), "strategy=raptor": (0.64, 75),
    "strategy=multi_query": (0.70, 1800), "strategy=step_back": (0.69, 1700), "strategy=dense_ft": (0.684, 66.5),
}


def _twelve():
    import pandas as pd

    df = pd.DataFrame([{"label": k, "ndcg@10": q, "latency_p50_ms": c} for k, (q, c) in TWELVE.items()])
    df["ndcg@10_ci_low"], df["ndcg@10_ci_high"] = df["ndcg@10"] - 0.03, df["ndcg@10"] + 0.03
    return df


def _text_boxes(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig) if not hasattr(fig.canvas, "get_renderer") else fig.canvas
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    from matplotlib.text import Text

    # the text's own box (Annotation.get_window_extent would add its leader line)
    return ax, renderer, [(t.get_text(), Text.get_window_extent(t, renderer)) for t in ax.texts]


def test_quality_vs_latency_labels_never_overlap_with_twelve_strategies(tmp_path):
    from lab.analysis.plots import quality_vs_latency

    df = _twelve()
    for frame in (df, df.iloc[[1, 11, 8, 6]], df.iloc[[3, 4]]):  # all twelve, the dense cluster, the rerankers
        fig = quality_vs_latency(frame, "ndcg@10", label="label")
        fig.savefig(tmp_path / "q.png", dpi=120)
        ax, renderer, boxes = _text_boxes(fig)
        assert len(boxes) == len(frame)
        axbox = ax.get_window_extent(renderer)
        for i, (name, a) in enumerate(boxes):
            assert a.x0 >= axbox.x0 - 1 and a.x1 <= axbox.x1 + 1 and a.y0 >= axbox.y0 - 1 and a.y1 <= axbox.y1 + 1, name
            for other, b in boxes[i + 1:]:
                assert not a.overlaps(b), f"{name!r} overlaps {other!r}"
        legend = ax.get_legend().get_window_extent(renderer)
        assert not any(a.overlaps(legend) for _, a in boxes)
    names = sorted(t for t, _ in boxes)  # the last frame: the two rerankers, short and wrapped
    assert names == ["hybrid_rerank", "rerank"], names  # only the strategy varies between these two
    fig = quality_vs_latency(df, "ndcg@10", label="label")
    assert all("=" not in t.get_text() and max(map(len, t.get_text().split("\n"))) <= 28 for t in fig.axes[0].texts)


def test_the_overlap_check_can_fail():
    """Negative control: the old placement (every label at the same offset) overlaps (qna next to raptor)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.5))
    ax = fig.subplots()
    df = _twelve()
    ax.set_xscale("log")
    ax.scatter(df["latency_p50_ms"], df["ndcg@10"])
    for name, x, y in zip(df["label"], df["latency_p50_ms"], df["ndcg@10"], strict=False):
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize="small")
    _, _, boxes = _text_boxes(fig)
    assert any(a.overlaps(b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])


def test_leaderboard_bars_use_short_labels_with_twelve_strategies(tmp_path):
    from lab.analysis.plots import leaderboard_bars

    fig = leaderboard_bars(_twelve(), "ndcg@10", label="label")
    fig.savefig(tmp_path / "b.png", dpi=100)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(ticks) == 12 and not any("=" in t for t in ticks)
    assert "rerank · biencoder MiniLM · α 0.5\n· top 50" not in ticks  # wrapped between parts, not inside them
    assert any(t.startswith("rerank · biencoder MiniLM") for t in ticks)
