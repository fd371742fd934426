"""lab.analysis.leaderboard: the one leaderboard function, and that compare, report and plots build their tables with
it (same columns, same numbers as before where they overlap, the correction applied and named)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import blank_store

from lab.analysis.leaderboard import TEST_COLUMNS, leaderboard

GOLDEN = Path(__file__).with_name("leaderboard_golden.json")
CORE = ("label", "ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high", *TEST_COLUMNS)


def golden_results():
    """Fixed per-query data: six systems on 60 queries ('short' on the first 50), the relevant document of each
    query at a seeded random rank, scored by lab.metrics.evaluate."""
    from lab.data.types import Qrels, Run
    from lab.experiment.run import Result
    from lab.metrics import evaluate, latency_summary

    rng = np.random.default_rng(16)
    spec = {"a": (0.8, 60), "b": (0.75, 60), "c": (0.6, 60), "d": (0.45, 60), "e": (0.78, 60), "short": (0.7, 50)}
    results = {}
    for name, (p_top, n) in spec.items():
        qids = [f"q{i:02d}" for i in range(n)]
        qrels = Qrels({q: {f"{q}-rel": 1} for q in qids})
        hits = {}
        for q in qids:
            docs = {f"{q}-d{j}": 1.0 - j / 100 for j in range(20)}
            u = rng.random()
            pos = 1 if u < p_top else (int(rng.integers(2, 15)) if u < 0.95 else None)
            if pos is not None:
                docs[f"{q}-rel"] = 1.0 - (pos - 1.5) / 100
            hits[q] = docs
        run = Run(hits, name=name, latency={q: (1.0 + len(name)) / 1000 for q in qids})
        ev = evaluate(qrels, run, ["ndcg@10", "recall@10", "mrr@10"])
        results[name] = Result({"strategy": name}, run, ev, latency_summary(run.latency), 2.0, 0.1,
                               {"n_units": 100, "relevance_mode": "doc"})
    return results


def golden_runs(results):
    """The same systems as lab.analysis.report RunData: 'e' carries logged CIs of ndcg@10, 'short' other queries."""
    from lab.analysis.report import RunData

    runs = []
    for name, res in results.items():
        figures = {k: float(v) for k, v in res.summary().items()}
        if name == "e":
            figures.update({"ndcg@10_ci_low": 0.5, "ndcg@10_ci_high": 0.9})
        runs.append(RunData(label=name, figures=figures, per_query=res.evaluation.per_query[["ndcg@10", "recall@10"]]
                            .copy(), source=name, strategy=name))
    return runs


@pytest.fixture(scope="module")
def results():
    return golden_results()


def _same(new: pd.Series, old: list) -> None:
    got = [None if isinstance(v, float) and math.isnan(v) else v for v in new.tolist()]
    assert len(got) == len(old)
    for g, o in zip(got, old, strict=False):
        assert (g is None) == (o is None) and (o is None or g == pytest.approx(o, rel=1e-12, abs=1e-15)), (got, old)


# ---------------------------------------------------------------------------------------------------------------
# same numbers as before (commit e26636f) where old and new overlap
# ---------------------------------------------------------------------------------------------------------------
def test_plots_table_keeps_its_numbers(results):
    from lab.analysis import plots

    old = json.loads(GOLDEN.read_text())["plots"]
    t = plots.results_leaderboard(results, "ndcg@10", ["recall@10"], seed=3, n_resamples=3000)
    assert list(t["label"]) == old["label"]
    for c in ("ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high", "recall@10", "recall@10_ci_low", "diff", "diff_ci_low",
              "diff_ci_high", "p_value"):
        _same(t[c], old[c])
    # the rule changed on purpose: significant is now the Holm-adjusted p < alpha (5 comparisons here)
    assert t.attrs["correction"] == "holm" and t.attrs["n_comparisons"] == 5
    assert t["significant"].tolist() == (t["p_adjusted"].fillna(1) < 0.05).tolist()
    assert t["p_adjusted"].iloc[1:].ge(t["p_value"].iloc[1:]).all()


def test_report_table_keeps_its_numbers(results):
    from lab.analysis.report import report_leaderboard

    golden = json.loads(GOLDEN.read_text())
    old = golden["report"]
    notes: list[str] = []
    b = report_leaderboard(golden_runs(results), ["ndcg@10", "recall@10"], reference=1, n_resamples=3000, seed=3,
                          notes=notes)
    assert list(b["label"]) == old["label"]
    for c, values in old.items():
        if c != "label" and not c.endswith("_significant"):
            _same(b[c], values)
    assert b.loc[b["label"] == "e", "ndcg@10_ci_low"].item() == 0.5  # a logged CI is kept as given
    assert len(notes) == 1 and "short" in notes[0] and "other queries" in notes[0]
    # the unprefixed columns are those of the first metric
    for c in ("diff", "diff_ci_low", "diff_ci_high", "p_adjusted", "significant", "wins", "ties", "losses"):
        prefixed = "ndcg@10_" + c
        assert b[c].equals(b[prefixed].rename(c)), c
    _same(b["p_value"], old["ndcg@10_p"])
    assert b.attrs["corrections"] == {"ndcg@10": "p adjusted: Holm over 4 comparisons",
                                      "recall@10": "p adjusted: Holm over 4 comparisons"}


# ---------------------------------------------------------------------------------------------------------------
# the function itself
# ---------------------------------------------------------------------------------------------------------------
def _scores(n=40, seed=0):
    rng = np.random.default_rng(seed)
    q = [f"q{i}" for i in range(n)]
    base = rng.random(n)
    return {
        "best": pd.Series(np.clip(base + 0.3, 0, 1), index=q),
        "close": pd.Series(np.clip(base + 0.28, 0, 1), index=q),
        "mid": pd.Series(base, index=q),
        "low": pd.Series(base * 0.3, index=q),
        "part": pd.Series(base[: n // 2], index=q[: n // 2]),  # half the queries
    }


def test_columns_order_reference_and_correction():
    s = _scores()
    board = leaderboard(list(s.values()), "ndcg@10", labels=list(s), extra=[{"x": i} for i in range(len(s))],
                        n_resamples=500)
    assert list(board.columns) == ["label", "ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high", "x", *TEST_COLUMNS]
    assert board.loc[0, "label"] == "best" and board.attrs["reference"] == "best"
    assert list(board["ndcg@10"]) == sorted(board["ndcg@10"], reverse=True)
    ref = board.iloc[0]
    assert ref["diff"] == 0 and math.isnan(ref["p_value"]) and math.isnan(ref["p_adjusted"]) and not ref["significant"]
    assert (ref["wins"], ref["ties"], ref["losses"]) == (0, 40, 0)
    # 'part' scored other queries: no test, a note, but wins/ties/losses on the 20 queries both scored
    part = board.set_index("label").loc["part"]
    assert math.isnan(part["p_value"]) and not part["significant"]
    assert part["wins"] + part["ties"] + part["losses"] == 20
    assert any("part scored other queries" in n for n in board.attrs["notes"])
    # three rows tested against the best: Holm over 3, named
    assert board.attrs["n_comparisons"] == 3 and set(board["correction"]) == {"holm"}
    assert board.attrs["correction_note"] == "p adjusted: Holm over 3 comparisons"
    tested = board[board["p_value"].notna()]
    from lab.metrics.stats import adjust_pvalues

    np.testing.assert_allclose(tested["p_adjusted"], adjust_pvalues(tested["p_value"].to_numpy(), "holm"))
    assert board["significant"].tolist() == (board["p_adjusted"].fillna(1.0) < 0.05).tolist()
    assert board["wins"].dtype == "Int64"


def test_paired_test_and_ci_are_the_stats_functions():
    from lab.metrics import bootstrap_ci, paired_test

    s = _scores()
    board = leaderboard([s["best"], s["mid"]], "m", labels=["best", "mid"], n_resamples=700, seed=4)
    t = paired_test(s["mid"].to_numpy(), s["best"].to_numpy(), n_resamples=700, seed=4)
    row = board.iloc[1]
    assert (row["diff"], row["diff_ci_low"], row["diff_ci_high"], row["p_value"]) == \
        (t["diff"], t["ci_low"], t["ci_high"], t["p_permutation"])
    ci = bootstrap_ci(s["mid"], n_resamples=1000, seed=4).iloc[0]
    assert (row["m_ci_low"], row["m_ci_high"]) == (ci.ci_low, ci.ci_high)
    # one comparison: nothing to adjust, and the output says so
    assert row["p_adjusted"] == row["p_value"] and board.attrs["correction"] == "none"
    assert board.attrs["correction_note"] == "p not adjusted for multiple comparisons (1 comparison)"
    # a 0/1 metric gets Wilson's interval (as lab.metrics.stats.bootstrap_ci gives it)
    hits = pd.Series([1.0] * 12, index=[f"q{i}" for i in range(12)])
    wb = leaderboard([hits], "hit_rate@3")
    assert wb.loc[0, "hit_rate@3_ci_high"] == 1.0 and 0.7 < wb.loc[0, "hit_rate@3_ci_low"] < 0.8


def test_wins_ties_losses_count_the_common_queries():
    ref = pd.Series([0.5, 0.5, 0.2, 0.9, 1.0], index=list("abcde"))
    row = pd.Series([0.6, 0.5, 0.1, 0.9 + 1e-15, 0.0, 0.7], index=list("abcdef"))  # f: not scored by ref
    board = leaderboard([ref, row], "m", labels=["ref", "row"], reference=0, n_resamples=50)
    r = board.set_index("label").loc["row"]
    assert (r["wins"], r["ties"], r["losses"]) == (1, 2, 2)
    assert r["wins"] + r["ties"] + r["losses"] == 5  # the queries both scored
    # NaN is a query not scored; a row without per-query values gets <NA>
    board = leaderboard([ref, row.where(row.index != "a"), None], "m", labels=["ref", "row", "none"],
                        extra=[{}, {}, {"m": 0.1}], reference=0, n_resamples=50)
    r = board.set_index("label")
    assert r.loc["row", "wins"] + r.loc["row", "ties"] + r.loc["row", "losses"] == 4
    assert pd.isna(r.loc["none", "wins"]) and math.isnan(r.loc["none", "p_value"]) and r.loc["none", "m"] == 0.1


def test_fill_missing_pairs_on_the_union_as_lab_metrics_compare():
    from lab.metrics.stats import compare

    s = _scores()

    class Ev:
        metrics_version, rel_threshold = "x", 1

        def __init__(self, series):
            self.per_query = series.to_frame("m")

    board = leaderboard([s["best"], s["part"]], "m", labels=["best", "part"], fill_missing=0.0, n_resamples=300)
    c = compare(Ev(s["part"]), Ev(s["best"]), "m", n_resamples=300)
    assert board.loc[1, "p_value"] == c["p_permutation"] and board.loc[1, "diff"] == c["diff"]


def test_chosen_reference_and_sign_agnostic_significance():
    s = _scores()
    board = leaderboard([s["best"], s["low"], s["mid"]], "m", labels=["best", "low", "mid"], reference=1,
                        n_resamples=2000)
    by = board.set_index("label")
    assert board.attrs["reference"] == "low" and by.loc["low", "diff"] == 0
    assert by.loc["best", "diff"] > 0 and by.loc["best", "significant"]  # above the reference, significant too


@pytest.mark.parametrize("method,name", [("none", "p not adjusted for multiple comparisons (3 comparisons)"),
                                         ("holm", "p adjusted: Holm over 3 comparisons"),
                                         ("bh", "p adjusted: Benjamini-Hochberg over 3 comparisons"),
                                         ("BH", "p adjusted: Benjamini-Hochberg over 3 comparisons")])
def test_every_correction_is_applied_and_named(method, name):
    from lab.metrics.stats import adjust_pvalues

    s = _scores()
    board = leaderboard(list(s.values())[:4], "m", labels=list(s)[:4], correction=method, n_resamples=300)
    assert board.attrs["correction_note"] == name and set(board["correction"]) == {method.lower()}
    tested = board["p_value"].notna()
    np.testing.assert_allclose(board.loc[tested, "p_adjusted"],
                               adjust_pvalues(board.loc[tested, "p_value"].to_numpy(), method.lower()))


def test_bad_arguments_name_what_they_accept():
    s = _scores()
    with pytest.raises(ValueError, match=r"none\|holm\|bh"):
        leaderboard([s["best"]], "m", correction="bonferroni")
    with pytest.raises(ValueError, match="alpha"):
        leaderboard([s["best"]], "m", alpha=1.5)
    with pytest.raises(ValueError, match="labels"):
        leaderboard([s["best"]], "m", labels=["a", "b"])
    with pytest.raises(ValueError, match="reference"):
        leaderboard([s["best"]], "m", reference=3)


# ---------------------------------------------------------------------------------------------------------------
# compare (MLflow), report and plots: one set of columns, one set of numbers
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(results, tmp_path_factory, pytestconfig):
    from lab.tracking.results import log_result

    root = blank_store(tmp_path_factory.mktemp("board"), pytestconfig)
    ids = {name: log_result(results[name], experiment="board", tracking_root=root, n_resamples=200)
           for name in ("a", "b", "c", "d")}
    return {"root": root, "ids": ids}


def lab(*argv) -> tuple[int, str, str]:
    from lab.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse refuses an option before the command runs
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_compare_report_and_plots_share_columns_and_numbers(results, store):
    from lab.analysis import plots
    from lab.analysis.compare import experiment_leaderboard as compare_board
    from lab.analysis.report import pick_reference, report_leaderboard, runs_from_mlflow

    four = {k: results[k] for k in ("a", "b", "c", "d")}
    cmp = compare_board("board", tracking_root=store["root"], n_resamples=1000, seed=2)
    plot = plots.results_leaderboard(four, "ndcg@10", seed=2, n_resamples=1000)
    runs = runs_from_mlflow("board", store["root"], "ndcg@10")
    rep = report_leaderboard(runs, ["ndcg@10"], pick_reference(runs, "ndcg@10"), n_resamples=1000, seed=2)
    for df in (cmp, plot, rep):
        assert set(CORE) <= set(df.columns), sorted(set(CORE) - set(df.columns))
        assert df.attrs["correction_note"] == "p adjusted: Holm over 3 comparisons"
    name_of = {rid: n for n, rid in store["ids"].items()}
    assert [name_of[r] for r in cmp["run_id"]] == list(plot["label"])
    for c in ("diff", "diff_ci_low", "diff_ci_high", "p_value", "p_adjusted", "significant", "wins", "ties", "losses",
              "correction"):
        for other in (plot, rep):
            pd.testing.assert_series_equal(cmp[c].reset_index(drop=True), other[c].reset_index(drop=True),
                                           check_exact=True, obj=c)
    assert cmp["ndcg@10"].tolist() == pytest.approx(plot["ndcg@10"].tolist(), rel=1e-12)
    assert (cmp["wins"] + cmp["ties"] + cmp["losses"] == 60).all()


def test_compare_cli_names_the_correction_in_text_json_and_csv(store, tmp_path):
    root = store["root"]
    code, out, _ = lab("compare", "--experiment", "board", "--tracking-root", root)
    assert code == 0 and "p adjusted: Holm over 3 comparisons" in out and "p adj" in out and "W/T/L" in out
    assert "0/60/0" not in out  # the text table leaves the reference's W/T/L against itself blank
    assert sum(1 for ln in out.splitlines() if re.search(r"\b\d+/\d+/\d+\b", ln)) == 3  # the 3 tested rows
    code, out, _ = lab("compare", "--experiment", "board", "--tracking-root", root, "--correction", "bh", "--json",
                       "--csv", tmp_path / "b.csv")
    doc = json.loads(out)  # stdout holds the JSON alone
    assert code == 0 and doc["correction"] == "bh" and doc["n_comparisons"] == 3
    assert doc["correction_note"] == "p adjusted: Benjamini-Hochberg over 3 comparisons"
    row = doc["rows"][1]
    assert {"p_value", "p_adjusted", "significant", "wins", "ties", "losses", "correction", "run_id"} <= set(row)
    assert row["wins"] + row["ties"] + row["losses"] == 60 and row["p_adjusted"] >= row["p_value"]
    assert doc["rows"][0]["p_value"] is None
    csv = pd.read_csv(tmp_path / "b.csv")
    assert list(csv.columns[:4]) == ["label", "ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high"]
    assert set(csv["correction"]) == {"bh"} and csv["wins"].dtype.kind == "i"
    code, out, _ = lab("compare", "--experiment", "board", "--tracking-root", root, "--correction", "none")
    assert code == 0 and "p not adjusted for multiple comparisons (3 comparisons)" in out


@pytest.mark.parametrize("command", ["compare", "report"])
def test_bad_correction_exits_2_listing_the_choices(command):
    code, _, err = lab(command, "--correction", "bonferroni")
    assert code == 2 and "--correction" in err and "none|holm|bh" in err and "bonferroni" in err


def test_cli_choices_are_the_stats_choices():
    from lab.cli.options import CORRECTION_CHOICES
    from lab.metrics.stats import CORRECTIONS

    assert CORRECTION_CHOICES == CORRECTIONS


def test_report_html_shows_adjusted_p_and_wins(results, tmp_path):
    from lab.analysis.report import build_report

    runs = golden_runs({k: results[k] for k in ("a", "b", "c")})
    res = build_report(runs, tmp_path / "r.html", ["ndcg@10", "recall@10"], n_resamples=300, correction="bh")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    board = html.split('id="leaderboard"')[1].split("</section>")[0]
    assert "<th>p adj</th>" in board and "<th>W/T/L</th>" in board
    assert "ndcg@10: p adjusted: Benjamini-Hochberg over 2 comparisons" in board
    assert "0/60/0" in board  # the reference ties with itself
    assert res.leaderboard.attrs["correction"] == "bh" and set(res.leaderboard["correction"]) == {"bh"}


def test_demo_sweep_leaderboard_tests_the_sweeps_runs(store):
    """lab demo's table: compare's leaderboard of the sweep's runs, the correction counting the rows shown; when
    the experiment's best run is not one of the sweep's, no tests (and a warning)."""
    import warnings
    from types import SimpleNamespace

    from lab.analysis.compare import CompareWarning
    from lab.analysis.compare import experiment_leaderboard as compare_board
    from lab.workbench.demo import sweep_leaderboard

    ids = store["ids"]

    def report(*names):
        return SimpleNamespace(experiment="board", outcomes=[SimpleNamespace(run_id=ids[n], status="SKIPPED")
                                                             for n in names])

    df = sweep_leaderboard(report("a", "c", "d"), tracking_root=store["root"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        want = compare_board("board", tracking_root=store["root"], run_ids=[ids[n] for n in ("a", "c", "d")])
    pd.testing.assert_frame_equal(df, want)
    assert df.attrs["correction_note"] == "p adjusted: Holm over 2 comparisons" and df["p_value"].notna().sum() == 2
    assert df.loc[0, "run_id"] == ids["a"]  # the experiment's best
    without_best = sweep_leaderboard(report("b", "c"), tracking_root=store["root"])
    assert without_best["p_value"].isna().all() and not without_best["significant"].any()
    assert without_best["wins"].isna().all() and without_best.attrs["n_comparisons"] == 0
    assert any("not one of this sweep's" in w for w in without_best.attrs["warnings"])
