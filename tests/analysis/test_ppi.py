"""Prediction-powered leaderboards end to end: a judged copy of ORD-QA (people's qrels with flips), real BM25 runs
and a `lab run --from-trec` run in a tmp MLflow store, a human sample drawn by `lab testset export-annotation
--queries N --seed S`, graded from ORD-QA's qrels and imported; `lab compare --human-qrels` and its bad inputs."""
from __future__ import annotations

import csv
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import blank_store

from lab.analysis.ppi import HumanLabels, ppi_block, results_ppi
from lab.cli.main import main
from lab.core.paths import resolve_repo_path
from lab.data.trec import read_qrels, read_trec_run
from lab.data.types import Run
from lab.experiment.run import run_experiment
from lab.metrics.ppi import human_mean, per_query_under, ppi_mean
from lab.retrievers.base import Context

ORDQA = "data/ord-qa"


def _judged_copy(folder: Path, seed: int = 5) -> dict[str, dict[str, int]]:
    """ORD-QA with a judge's labels: 30 % of relevant rows graded 0 (missed), a random unit called relevant in 30 %
    of queries. Returns people's qrels (ORD-QA's own)."""
    src = resolve_repo_path(ORDQA)
    folder.mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(src / name, folder / name)
    human = {q: dict(d) for q, d in read_qrels(src / "qrels" / "test.tsv").qrels.items()}
    docs = [json.loads(line)["_id"] for line in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    rng = random.Random(seed)
    rows = ["query-id\tcorpus-id\tscore\n"]
    for q, d in human.items():
        for doc, g in d.items():
            rows.append(f"{q}\t{doc}\t{0 if g >= 1 and rng.random() < 0.3 else g}\n")
        if rng.random() < 0.3:
            extra = rng.choice(docs)
            if extra not in d:
                rows.append(f"{q}\t{extra}\t1\n")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("".join(rows), encoding="utf-8")
    return human


def _worse_trec(src: Path, dst: Path) -> None:
    """A run made elsewhere: BM25's lists with the top hit of every other query moved to rank 6."""
    run = read_trec_run(src)
    lines = []
    for i, q in enumerate(sorted(run)):
        ranked = [d for d, _ in run.ranked(q, 100)]
        if i % 2 == 0 and len(ranked) > 6:
            ranked = ranked[1:6] + ranked[:1] + ranked[6:]
        lines += [f"{q} Q0 {d} {r + 1} {100 - r} worse\n" for r, d in enumerate(ranked)]
    dst.write_text("".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def judged(tmp_path_factory, pytestconfig):
    base = tmp_path_factory.mktemp("ppi")
    root = blank_store(base, pytestconfig)
    ds = base / "judged"
    human = _judged_copy(ds)
    common = ["--dataset", str(ds), "--experiment", "ppi", "--root", str(root), "--no-progress"]
    assert main(["run", "--strategy", "bm25", "--out", str(base / "bm25.trec"), *common]) == 0
    assert main(["run", "--strategy", "bm25", "--set", "k1=0.2", "--set", "b=0.1", *common]) == 0
    _worse_trec(base / "bm25.trec", base / "worse.trec")
    assert main(["run", "--from-trec", str(base / "worse.trec"), *common]) == 0
    # people grade a uniform random sample of 30 queries: every pooled unit of each, from ORD-QA's own qrels
    sheet = base / "sheet.csv"
    assert main(["testset", "export-annotation", "--dataset", str(ds), "--strategies", "bm25", "--depth", "10",
                 "--queries", "30", "--seed", "3", "--out", str(sheet), "--no-mlflow", "--no-progress"]) == 0
    with open(sheet, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["grade"] = str(human.get(r["qid"], {}).get(r["unit_id"], 0))
    _write_sheet(sheet, rows)
    assert main(["testset", "import-annotation", str(sheet), "--out", str(base / "people"), "--no-mlflow"]) == 0
    return {"root": root, "base": base, "ds": ds, "human": human, "sheet": sheet, "rows": rows}


def _write_sheet(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_the_sample_is_uniform_seeded_and_recorded_in_provenance(judged):
    meta = json.loads(Path(str(judged["sheet"]) + ".meta.json").read_text(encoding="utf-8"))
    assert meta["sample"] == "uniform" and meta["seed"] == 3 and len(meta["sampled_queries"]) == 30
    assert {r["qid"] for r in judged["rows"]} == set(meta["sampled_queries"])
    all_q = sorted(read_qrels(judged["ds"] / "qrels" / "test.tsv"))
    assert meta["sampled_queries"] == sorted(random.Random(3).sample(sorted(all_q), 30))
    prov = json.loads((judged["base"] / "people" / "provenance.json").read_text(encoding="utf-8"))
    hg = prov["human_grades"]
    assert sorted(hg["graded_queries"]) == sorted(meta["sampled_queries"])
    assert hg["sample"] == "uniform" and hg["sample_seed"] == 3 and hg["not_graded"] == []


def test_compare_json_carries_trust_ppi(judged, capsys):
    root = judged["root"]
    assert main(["compare", "--experiment", "ppi", "--root", str(root), "--human-qrels",
                 str(judged["base"] / "people"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ppi = out["trust"]["ppi"]
    assert {"metric", "method", "n_human", "n_judged", "runs", "diffs", "effective_human_queries"} <= set(ppi)
    assert ppi["metric"] == "ndcg@10" and ppi["n_human"] == 30 and ppi["n_human"] + ppi["n_judged"] == len(
        read_qrels(judged["ds"] / "qrels" / "test.tsv"))
    assert len(ppi["runs"]) == 3 and len(ppi["diffs"]) == 2
    for r in ppi["runs"]:
        assert set(r) >= {"run", "label", "judge_only", "human_only", "ppi", "judge_bias"}
        assert set(r["ppi"]) == {"mean", "ci", "lambda"} and 0.0 <= r["ppi"]["lambda"] <= 1.0
        assert len(r["human_only"]["ci"]) == 2 and len(r["judge_bias"]["ci"]) == 2
        assert r["ppi"]["ci"][0] <= r["ppi"]["mean"] <= r["ppi"]["ci"][1]
    means = [r["ppi"]["mean"] for r in ppi["runs"]]
    assert means == sorted(means, reverse=True)
    for d in ppi["diffs"]:
        assert d["reference"] == ppi["runs"][0]["run"]
        assert set(d["ppi"]) == {"mean", "ci", "p_value", "p_adjusted"}
        assert d["ppi"]["p_adjusted"] >= d["ppi"]["p_value"]
    assert ppi["effective_human_queries"] == ppi["runs"][0]["effective_human_queries"] > 0
    # the judge misses 30 % of relevant units: it underrates every run, and the trust warnings say so by name
    assert all(r["judge_only"]["mean"] < r["human_only"]["mean"] + 0.05 for r in ppi["runs"])
    assert any("biased on ndcg@10" in w for w in out["trust"]["warnings"]) == any(
        r["judge_bias"]["ci"][1] < 0 or r["judge_bias"]["ci"][0] > 0 for r in ppi["runs"])
    # the same figures from the library, recomputed here from the logged ranked lists
    assert main(["compare", "--experiment", "ppi", "--root", str(root), "--human-qrels",
                 str(judged["base"] / "people")]) == 0
    text = capsys.readouterr().out
    assert "prediction-powered ndcg@10 (30 queries graded by people" in text
    assert "human-graded queries for a half-width of 0.02" in text


def test_ppi_block_matches_the_estimators_on_the_same_lists(judged):
    ds, human = judged["ds"], judged["human"]
    judge = {q: dict(d) for q, d in read_qrels(ds / "qrels" / "test.tsv").qrels.items()}
    run = read_trec_run(judged["base"] / "bm25.trec")
    rng = np.random.default_rng(0)
    sample = sorted(rng.choice(sorted(judge), 20, replace=False).tolist())
    hl = HumanLabels({q: human.get(q, {}) for q in sample}, "people.tsv", "uniform", 0)
    block = ppi_block([("a", "bm25", run), ("b", "bm25 again", run)], judge, hl)
    rest = [q for q in judge if q not in set(sample)]
    graded = [q for q in judge if q in set(sample)]
    y = per_query_under(run, hl.qrels, "ndcg@10", graded)
    est = ppi_mean(y, per_query_under(run, judge, "ndcg@10", graded), per_query_under(run, judge, "ndcg@10", rest))
    assert block["runs"][0]["ppi"]["mean"] == pytest.approx(est.mean)
    assert block["runs"][0]["human_only"]["mean"] == pytest.approx(human_mean(y).mean)
    assert block["diffs"][0]["ppi"]["mean"] == 0.0 and block["diffs"][0]["ppi"]["p_value"] == 1.0


def _people_file(path: Path, human: dict, qids: list[str], grade_of=None) -> Path:
    lines = ["query-id\tcorpus-id\tscore\n"]
    for q in qids:
        for d, g in human[q].items():
            lines.append(f"{q}\t{d}\t{g if grade_of is None else grade_of}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_bad_human_input_is_one_line_and_exit_2(judged, tmp_path, capsys):
    root, human = judged["root"], judged["human"]
    qids = sorted(human)
    cases = {
        "few": (_people_file(tmp_path / "few.tsv", human, qids[:5]), "5 human-graded queries; at least 10"),
        "unknown": (_people_file(tmp_path / "unknown.tsv", {**human, "nope": {"x": 1}}, [*qids[:12], "nope"]),
                    "query 'nope' is not a query of"),
        "grade": (_people_file(tmp_path / "grade.tsv", human, qids[:12], grade_of=5), "grade 5 is outside 0-3"),
    }
    for path, message in cases.values():
        assert main(["compare", "--experiment", "ppi", "--root", str(root), "--human-qrels", str(path),
                     "--json"]) == 2
        captured = capsys.readouterr()
        err = [ln for ln in captured.err.splitlines() if ln.startswith("error:")]
        assert len(err) == 1 and message in err[0], captured.err
        assert captured.out == ""
    assert main(["compare", "--experiment", "ppi", "--root", str(root), "--human-qrels",
                 str(tmp_path / "few.tsv"), "--target-halfwidth", "0"]) == 2
    assert "--target-halfwidth 0" in capsys.readouterr().err
    # lab sweep and lab report refuse the same file before running anything
    spec = str(resolve_repo_path("params/strategy_comparison.yaml"))
    assert main(["sweep", spec, "--root", str(tmp_path / "none"), "--human-qrels", str(tmp_path / "few.tsv")]) == 2
    assert "5 human-graded queries; at least 10" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    assert main(["report", "--experiment", "ppi", "--root", str(root), "--human-qrels", str(tmp_path / "grade.tsv"),
                 "--out", str(tmp_path / "r.html"), "--no-log"]) == 2
    assert "grade 5 is outside 0-3" in capsys.readouterr().err and not (tmp_path / "r.html").exists()


def test_bad_sample_input_is_one_line_and_exit_2(judged, tmp_path, capsys):
    ds = judged["ds"]
    n = len(read_qrels(ds / "qrels" / "test.tsv"))
    assert main(["testset", "export-annotation", "--dataset", str(ds), "--strategies", "bm25", "--queries",
                 str(n + 1), "--out", str(tmp_path / "s.csv"), "--no-mlflow", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--queries {n + 1}: split 'test'" in err and f"has {n} queries" in err
    assert not (tmp_path / "s.csv").exists()
    # a sampled query graded in part: refused at its first ungraded row
    rows = [dict(r) for r in judged["rows"]]
    first_q = rows[0]["qid"]
    idx = [i for i, r in enumerate(rows) if r["qid"] == first_q]
    rows[idx[-1]]["grade"] = ""
    sheet = tmp_path / "partial.csv"
    _write_sheet(sheet, rows)
    shutil.copy(str(judged["sheet"]) + ".meta.json", str(sheet) + ".meta.json")
    assert main(["testset", "import-annotation", str(sheet), "--out", str(tmp_path / "p"), "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert f"query {first_q!r} is in the sheet's random sample" in err and "1 of its" in err
    assert ", line " in err and "field 'grade'" in err and len(err.strip().splitlines()) == 1


def test_auto_sample_from_a_pilot_draws_new_queries_only(judged, tmp_path, capsys):
    ds, human = judged["ds"], judged["human"]
    pilot_q = sorted(json.loads(Path(str(judged["sheet"]) + ".meta.json").read_text())["sampled_queries"])[:15]
    pilot = _people_file(tmp_path / "pilot.tsv", human, [q for q in pilot_q if q in human])
    out = tmp_path / "more.csv"
    assert main(["testset", "export-annotation", "--dataset", str(ds), "--strategies", "bm25,dense",
                 "--queries", "auto", "--pilot", str(pilot), "--out", str(out), "--no-mlflow", "--no-progress",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    drawn = set(meta["sampled_queries"])
    assert not drawn & set(pilot_q)
    p = rep["pilot"]
    assert p["n_pilot"] == len(read_qrels(pilot)) and len(p["top_two"]) == 2
    assert len(drawn) == (len(read_qrels(ds / "qrels" / "test.tsv")) - p["n_pilot"] if p["more"] is None
                          else p["more"])
    assert main(["testset", "export-annotation", "--dataset", str(ds), "--queries", "auto", "--out",
                 str(tmp_path / "x.csv"), "--no-mlflow"]) == 2
    assert "--queries auto and --pilot FILE go together" in capsys.readouterr().err


def test_report_html_shows_the_prediction_powered_leaderboard(judged, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "--experiment", "ppi", "--root", str(judged["root"]), "--human-qrels",
                 str(judged["base"] / "people"), "--out", str(out), "--no-log"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "prediction-powered ndcg@10 (30 queries graded by people" in page and "minus the best" in page
    capsys.readouterr()
    assert main(["report", "--experiment", "ppi", "--root", str(judged["root"]), "--human-qrels",
                 str(tmp_path / "none.tsv"), "--out", str(tmp_path / "x.html"), "--no-log"]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "x.html").exists()


def test_grades_kept_in_the_judged_set_are_read_from_its_provenance(judged, tmp_path, capsys):
    """import-annotation --record-in keeps people's grades in the judged set; `lab compare --dataset SET` and
    `lab report --dataset SET` then correct the leaderboard without --human-qrels, with the same figures."""
    kept = tmp_path / "judged-kept"
    shutil.copytree(judged["ds"], kept)
    root = str(judged["root"])
    # a set that keeps no grades: the plain leaderboard, no trust.ppi
    assert main(["compare", "--experiment", "ppi", "--root", root, "--dataset", str(kept), "--json"]) == 0
    assert "ppi" not in (json.loads(capsys.readouterr().out)["trust"] or {})
    assert main(["testset", "import-annotation", str(judged["sheet"]), "--out", str(tmp_path / "people"),
                 "--record-in", str(kept), "--no-mlflow"]) == 0
    capsys.readouterr()
    prov = json.loads((kept / "provenance.json").read_text(encoding="utf-8"))
    hg = prov["human_grades"]
    assert hg["qrels"] == "human-qrels/test.tsv" and hg["sample"] == "uniform" and len(hg["graded_queries"]) == 30
    assert read_qrels(kept / "human-qrels" / "test.tsv").qrels == read_qrels(
        tmp_path / "people" / "qrels" / "test.tsv").qrels  # every graded row, as the annotation set holds them
    assert read_qrels(kept / "qrels" / "test.tsv").qrels == read_qrels(judged["ds"] / "qrels" / "test.tsv").qrels
    assert main(["compare", "--experiment", "ppi", "--root", root, "--dataset", str(kept), "--json"]) == 0
    from_set = json.loads(capsys.readouterr().out)["trust"]["ppi"]
    assert main(["compare", "--experiment", "ppi", "--root", root, "--human-qrels", str(judged["base"] / "people"),
                 "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)["trust"]["ppi"]
    assert from_set["human_source"] == "provenance" and from_file["human_source"] == "file"
    assert from_set["n_human"] == 30
    assert from_set["runs"] == from_file["runs"] and from_set["diffs"] == from_file["diffs"]
    assert main(["compare", "--experiment", "ppi", "--root", root, "--dataset", str(kept)]) == 0
    assert "30 queries graded by people (their grades kept in the set)" in capsys.readouterr().out
    out = tmp_path / "r.html"
    assert main(["report", "--experiment", "ppi", "--root", root, "--dataset", str(kept), "--out", str(out),
                 "--no-log"]) == 0
    assert "30 queries graded by people (their grades kept in the set)" in out.read_text(encoding="utf-8")
    # a set whose provenance names a grades file that is gone: one line, exit 2, before any work
    (kept / "human-qrels" / "test.tsv").unlink()
    capsys.readouterr()
    assert main(["compare", "--experiment", "ppi", "--root", root, "--dataset", str(kept), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "provenance.json" in err and "human-qrels/test.tsv" in err and len(err.splitlines()) == 1
    # recording into a set that lacks a graded query is refused before anything is written
    other = tmp_path / "other"
    shutil.copytree(judged["ds"], other)
    lines = (other / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (other / "qrels" / "test.tsv").write_text("".join(ln for ln in lines if ln.split("\t")[0] not in
                                                      hg["graded_queries"][:1]), encoding="utf-8")
    assert main(["testset", "import-annotation", str(judged["sheet"]), "--out", str(tmp_path / "p2"),
                 "--record-in", str(other), "--no-mlflow"]) == 2
    assert "--record-in" in capsys.readouterr().err and not (tmp_path / "p2").exists()
    assert not (other / "human-qrels").exists()


def test_results_in_memory_get_the_same_block_as_logged_runs(judged):
    """Notebook 03's path: Result objects in memory, scored on the judged set."""
    res = run_experiment(judged["ds"], "bm25", {}, k=100, metrics=["ndcg@10"], ctx=Context(progress=False))
    judge = {q: dict(d) for q, d in read_qrels(judged["ds"] / "qrels" / "test.tsv").qrels.items()}
    block = results_ppi({"bm25": res, "bm25 copy": res}, judge, judged["base"] / "people")
    assert block["n_human"] == 30 and [r["label"] for r in block["runs"]] == ["bm25", "bm25 copy"]
    assert block["runs"][0]["ppi"] == block["runs"][1]["ppi"]
    assert block["diffs"][0]["ppi"]["mean"] == 0.0


def test_warnings_name_a_biased_judge_and_a_reversed_ranking():
    """A judge that knows only the first relevant document of each query: people prefer run b (which ranks the
    second one first), the judge prefers run a; PPI follows people, and the warnings say both things."""
    rng = np.random.default_rng(4)
    qids = [f"q{i}" for i in range(120)]
    people = {q: {f"{q}-1": 1, f"{q}-2": 1} for q in qids}
    judge = {q: {f"{q}-1": 1} for q in qids}
    a = Run({q: {f"{q}-1": 3.0, f"{q}-x": 2.0, f"{q}-2": 1.0} for q in qids})
    # b misses the second document on 6 queries of 120: whatever 40 people grade, b's mean stays above a's
    b = Run({q: ({f"{q}-2": 3.0, f"{q}-1": 2.0} if i % 20 else {f"{q}-1": 3.0}) for i, q in enumerate(qids)})
    sample = sorted(rng.choice(qids, 40, replace=False).tolist())
    block = ppi_block([("ra", "strategy=a", a), ("rb", "strategy=b", b)], judge,
                      HumanLabels({q: people[q] for q in sample}, "p.tsv", "uniform", 1), judge="gguf:judge@1")
    by = {r["run"]: r for r in block["runs"]}
    assert by["ra"]["judge_only"]["mean"] > by["rb"]["judge_only"]["mean"]
    assert [r["run"] for r in block["runs"]] == ["rb", "ra"]
    text = " ".join(block["warnings"])
    assert "gguf:judge@1 is biased on ndcg@10: judge minus people" in text
    assert "PPI reverses the judge-only ranking of 1 pair(s)" in text and "b ahead of a" in text
    plain = ppi_block([("ra", "a", a), ("rb", "b", b)], judge, HumanLabels({q: people[q] for q in sample}, "p.tsv"))
    assert any("not recorded as a uniform random sample" in w for w in plain["warnings"])
