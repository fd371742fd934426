"""lab.cli.run (`lab evaluate`, `lab run`) as users and outside checks call it: `lab evaluate ... --json`,
`lab run ... --json`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ORDQA

from lab.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "metrics"
DEFAULT_KEYS = {f"{m}@{k}" for m in ("ndcg", "recall", "precision", "mrr", "map", "hit_rate", "f1")
                for k in (1, 3, 5, 10, 100)}


def test_evaluate_json_has_every_default_metric_and_matches_pytrec_eval(tmp_path, capsys):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    assert main(["evaluate", str(FIX / "qrels.txt"), str(FIX / "run.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert DEFAULT_KEYS <= set(out)
    assert all(isinstance(out[k], float) for k in DEFAULT_KEYS)
    assert out["_meta"]["metrics_version"]

    # independent check of a few means through trec_eval's C code
    from lab.data.trec import read_qrels, read_trec_run

    qrels, run = read_qrels(FIX / "qrels.txt"), read_trec_run(FIX / "run.txt")
    judged = {q: d for q, d in qrels.qrels.items() if any(g >= 1 for g in d.values())}
    ev = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "P.5", "recall.100"})
    res = ev.evaluate({q: run.scores.get(q, {}) for q in judged})
    # trec_eval skips queries absent from the run; raglab scores them 0, so add them back as zeros
    n = len(judged)
    assert out["ndcg@10"] == pytest.approx(sum(r["ndcg_cut_10"] for r in res.values()) / n, abs=1e-12)
    assert out["precision@5"] == pytest.approx(sum(r["P_5"] for r in res.values()) / n, abs=1e-12)
    assert out["recall@100"] == pytest.approx(sum(r["recall_100"] for r in res.values()) / n, abs=1e-12)


def test_evaluate_table_ci_and_per_query(tmp_path, capsys):
    pq = tmp_path / "pq.csv"
    assert main(["evaluate", str(FIX / "qrels.txt"), str(FIX / "run.txt"), "--metrics", "ndcg@10,mrr@10",
                 "--ci", "--per-query", str(pq)]) == 0
    text = capsys.readouterr().out
    assert "ndcg@10" in text and "[" in text
    lines = pq.read_text().splitlines()
    assert lines[0].split(",") == ["query_id", "ndcg@10", "mrr@10"] and len(lines) == 4


def test_bad_input_is_one_clear_line_not_a_traceback(tmp_path):
    bad = tmp_path / "run.trec"
    bad.write_text("q1 Q0 d1 1 not-a-number tag\n")
    proc = subprocess.run([sys.executable, "-m", "lab", "evaluate", str(FIX / "qrels.txt"), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "line 1" in proc.stderr


def test_run_bm25_json_on_ord_qa(tmp_path):
    out_run = tmp_path / "bm25.trec"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--dataset", str(ROOT / "data" / "ord-qa"),
                           "--strategy", "bm25", "--out", str(out_run), "--json",
                           "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    for key in ("ndcg@10", "recall@100", "mrr@10", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
                "index_seconds"):
        assert key in res
    assert 0.5 < res["ndcg@10"] < 0.8  # SOURCE.md: plain BM25 got 0.603 on ord-qa
    # the written run is plain TREC and evaluates to the same figures
    proc2 = subprocess.run([sys.executable, "-m", "lab", "evaluate", str(ROOT / "data/ord-qa/qrels/test.tsv"),
                            str(out_run),
                            "--json"], capture_output=True, text=True)
    assert proc2.returncode == 0, proc2.stderr
    assert json.loads(proc2.stdout)["ndcg@10"] == pytest.approx(res["ndcg@10"], abs=1e-9)


# ---------------------------------------------------------------------------------- bad parameters


@pytest.mark.parametrize("argv, expect", [
    # 1. unknown strategy params
    (["--strategy", "bm25", "--set", "k1x=1"], "strategy bm25: unknown param 'k1x'; bm25 accepts: b, backend, delta"),
    (["--strategy", "dense", "--set", "modelx=1"], "strategy dense: unknown param 'modelx'; dense accepts: M,"),
    (["--strategy", "rerank", "--set", "foo=1"], "strategy rerank: unknown param 'foo'; rerank accepts:"),
    (["--strategy", "hybrid", "--set", "foo=1"], "strategy hybrid: unknown param 'foo'; hybrid accepts"),
    # 2. wrong types
    (["--strategy", "bm25", "--set", "k1=abc"], "param k1='abc' is not valid; k1 takes a number >= 0"),
    (["--strategy", "dense", "--set", "batch_size=abc"], "batch_size='abc' is not valid; batch_size takes an integer"),
    (["--strategy", "rerank", "--set", "alpha=abc"],
     "alpha='abc' is not valid; alpha takes a number between 0 and 1, or null"),
    (["--strategy", "hybrid", "--set", "rrf_k=abc"], "rrf_k='abc' is not valid; rrf_k takes an integer >= 0"),
    # 3. split and metrics
    (["--strategy", "bm25", "--split", "nosuch"], "no qrels for split 'nosuch'; available: ['test']"),
    (["--strategy", "bm25", "--metrics", "ndcg@abc"], "--metrics metric 'ndcg@abc': the cut-off after '@' must be"),
    # 4. and 5. counts
    (["--strategy", "bm25", "--k", "0"], "lab run: argument --k: expected an integer >= 1, got 0"),
    (["--strategy", "dense", "--k", "-1"], "lab run: argument --k: expected an integer >= 1, got -1"),
    (["--strategy", "hybrid", "--k", "0"], "argument --k: expected an integer >= 1, got 0"),
    (["--strategy", "rerank", "--k", "-1"], "argument --k: expected an integer >= 1, got -1"),
    (["--strategy", "bm25", "--max-queries", "0"], "argument --max-queries: expected an integer >= 1, got 0"),
    (["--strategy", "bm25", "--max-queries", "-5"], "argument --max-queries: expected an integer >= 1, got -5"),
    (["--strategy", "bm25", "--set", "k1=["], "--set 'k1=[': the value is not a valid YAML scalar or list"),
    # chunking keys (--set chunking.*) are checked the same way
    (["--strategy", "bm25", "--set", "chunking.foo=1"], "chunking: unknown key 'foo'; chunking accepts: chunker,"),
    (["--strategy", "bm25", "--set", "chunking.size=0"], "chunking: size=0 is not valid; size takes an integer >= 1"),
])
def test_bad_run_parameters_are_one_line_exit_2(argv, expect, capsys):
    try:
        rc = main(["run", "--dataset", ORDQA, "--no-progress", *argv])
    except SystemExit as exc:  # argparse's own checks exit from parse_args
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and expect in err, err
    assert "Traceback" not in err


def test_params_are_checked_before_the_dataset_is_read(tmp_path, capsys):
    rc = main(["run", "--dataset", str(tmp_path / "missing"), "--strategy", "bm25", "--set", "k1x=1"])
    assert rc == 2 and "unknown param 'k1x'" in capsys.readouterr().err


def test_evaluate_reports_judged_at_k_and_condensed(tmp_path, capsys):
    (tmp_path / "q.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t0\nq\tr\t1\n", encoding="utf-8")
    (tmp_path / "r.trec").write_text("q Q0 u1 1 9 t\nq Q0 a 2 8 t\nq Q0 u2 3 7 t\nq Q0 r 4 6 t\n", encoding="utf-8")
    assert main(["evaluate", str(tmp_path / "q.tsv"), str(tmp_path / "r.trec"), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["judged@10"] == pytest.approx(2 / 10) and plain["mrr@10"] == pytest.approx(1 / 4)
    assert plain["_meta"]["condensed"] is False
    assert main(["evaluate", str(tmp_path / "q.tsv"), str(tmp_path / "r.trec"), "--json", "--condensed"]) == 0
    cond = json.loads(capsys.readouterr().out)
    assert cond["mrr@10"] == pytest.approx(1 / 2) and cond["_meta"]["condensed"] is True
    assert main(["evaluate", str(tmp_path / "q.tsv"), str(tmp_path / "r.trec"), "--condensed",
                 "--metrics", "ndcg@10"]) == 0
    assert "condensed lists" in capsys.readouterr().out


def test_run_condensed_is_recorded(capsys):
    argv = ["run", "--dataset", "data/ord-qa", "--strategy", "bm25", "--max-queries", "5", "--metrics", "ndcg@10",
            "judged@10", "--json", "--no-progress"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(argv + ["--condensed"]) == 0
    cond = json.loads(capsys.readouterr().out)
    assert cond["_meta"]["config"]["condensed"] is True and "condensed" not in plain["_meta"]["config"]
    assert cond["ndcg@10"] >= plain["ndcg@10"] and plain["judged@10"] < cond["judged@10"] <= 1.0
