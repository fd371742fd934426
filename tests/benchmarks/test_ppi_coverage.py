"""benchmarks/ppi_coverage.py on a small input: its tables, its JSON and coverage values that make sense.

One run of the script on the smallest committed population (ORD-QA, the queries the offline judges labelled), a few
subsets of 10 human-graded queries, every simulated judge; one run with bad input.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "ppi_coverage.py"
DATA = REPO / "benchmarks" / "data" / "ppi"
SET = "ord-qa-judged"


def _run(*args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppi") / "ppi.json"
    proc = _run("--data", str(DATA), "--sets", SET, "--subsets", "8", "--sizes", "10", "--seed", "3",
                "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text(encoding="utf-8"))


def test_prints_the_three_tables(small_run):
    stdout, _ = small_run
    for heading in ("## Real judges", "## Simulated judges", "## PPI++ coverage, lowest"):
        assert heading in stdout
    assert "| ord-qa-judged | smollm2 |" in stdout
    assert "| ord-qa-judged | 0.10 | 0.10 |" in stdout


def test_json_holds_every_judge_run_and_size_with_sane_figures(small_run):
    _, res = small_run
    assert {r["judge"] for r in res["real"]} >= {"smollm2"}
    assert len(res["simulated"]) == 7
    for r in res["real"] + res["simulated"]:
        rows = r["sizes"]["10"]
        assert set(rows) == {"bm25", "dense", "bm25 - dense"}
        for run, c in rows.items():
            assert c["n_subsets"] == 8
            assert (-1.0 if run == "bm25 - dense" else 0.0) <= c["truth"] <= 1.0
            for key in ("ppi", "human_only", "judge_only"):
                assert 0.0 <= c[key]["coverage"] <= 1.0
                assert c[key]["mean_width"] >= 0.0
            # nominal 95%: 8 subsets all missing (or most) would mean a broken interval, not bad luck
            assert c["ppi"]["coverage"] >= 0.5
            assert c["human_only"]["coverage"] >= 0.5


def test_a_near_perfect_simulated_judge_narrows_the_interval(small_run):
    _, res = small_run
    best = next(r for r in res["simulated"] if r["fn"] == 0.05 and r["fp"] == 0.05)
    worst = next(r for r in res["simulated"] if r["fn"] == 0.5 and r["fp"] == 0.5)
    assert best["agreement"] > worst["agreement"]
    assert best["sizes"]["10"]["bm25"]["queries_ratio"] > worst["sizes"]["10"]["bm25"]["queries_ratio"]


def test_too_few_human_queries_is_refused_in_one_line():
    proc = _run("--data", str(DATA), "--sets", SET, "--sizes", "5")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "ppi_coverage: --sizes '5': each size must be >= 10 (the fewest human-graded queries PPI accepts)"]


def test_combine_pools_the_cells_of_several_seeds(small_run, tmp_path):
    _, res = small_run
    one = tmp_path / "seed.json"
    one.write_text(json.dumps(res), encoding="utf-8")
    out = tmp_path / "combined.json"
    proc = _run("--combine", f"{one},{one}", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "## PPI++ coverage over seeds 3, 3" in proc.stdout
    c = json.loads(out.read_text(encoding="utf-8"))
    # 8 subsets: a true 0.95 cell reads under 0.93 unless all 8 cover, 1 - 0.95^8 of the time
    assert c["p_cell_below_low"] == pytest.approx(1 - 0.95**8)
    (row,) = c["sets"]
    cells = [v["ppi"]["coverage"] for r in res["simulated"] for v in r["sizes"]["10"].values()]
    assert row["cells"] == 2 * len(cells) == 2 * 7 * 3
    assert row["ppi_pooled"] == pytest.approx(sum(cells) / len(cells))
    assert row["ppi_lowest"] == min(cells) and row["ppi_cells_below_low"] == 2 * sum(v < 0.93 for v in cells)
    ninety = next(r for r in res["simulated"] if (r["fn"], r["fp"]) == (0.1, 0.1))["sizes"]["10"]
    assert row["ratio_90pct_judge_mean"] == pytest.approx([v["queries_ratio"] for v in ninety.values()])
    proc = _run("--combine", str(tmp_path / "none.json"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "none.json" in proc.stderr
