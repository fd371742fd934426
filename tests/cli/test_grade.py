"""lab.cli.grade: `lab testset grade` and `lab testset import-annotation --graders` from the command line, on a real
sheet exported from an ord-qa slice: each bad input is one line and exit 2 (not a sheet, graders' sheets with other
rows, a busy port), a fully graded sheet says so and exits 0; two graders' sheets import with their agreement
(checked against scikit-learn) printed before the qrels are written, the qrels hold the agreed grades plus the
arbiter's, and the provenance and the trust block show the agreement."""
from __future__ import annotations

import csv
import json
import socket
from pathlib import Path

import pytest
from ordqa_slices import mini_ordqa

from lab.analysis.trust import combine_labels, trust_lines
from lab.cli.main import main
from lab.data.labels import label_provenance
from lab.testset.annotate import export_annotation
from lab.testset.grading import grader_path, open_grading
from lab.testset.io import write_csv
from lab.tracking.store import client


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("grade-cli")
    ds = mini_ordqa(base / "mini", n_queries=6, n_other=30)
    export_annotation(ds, base / "sheet.csv", strategies=["bm25"], depth=5, seed=0, cache_dir=base / "cache",
                      progress=False, tracking_root=None)
    return base / "sheet.csv", ds


@pytest.fixture
def sheet(exported, tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_bytes(exported[0].read_bytes())
    (tmp_path / "sheet.csv.meta.json").write_bytes(exported[0].with_name("sheet.csv.meta.json").read_bytes())
    return path


def rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def one_error_line(capsys, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_a_csv_that_is_no_sheet_is_one_line_and_exit_2(tmp_path, capsys):
    other = tmp_path / "questions.csv"
    other.write_text("question,answer\nWhat is OpenROAD?,a flow\n", encoding="utf-8")
    assert main(["testset", "grade", str(other), "--no-browser"]) == 2
    one_error_line(capsys, "questions.csv", "not an annotation sheet", "nor a review sheet")


def test_graders_sheets_with_other_rows_are_one_line_and_exit_2(sheet, tmp_path, capsys):
    open_grading(sheet, grader="alice")
    short = rows(grader_path(sheet, "alice"))[1:]
    write_csv(grader_path(sheet, "bob"), [*short[0]], short)
    assert main(["testset", "grade", str(sheet), "--arbitrate", "--no-browser"]) == 2
    one_error_line(capsys, "does not hold the same rows", "1 rows only in")
    assert main(["testset", "import-annotation", str(sheet), "--out", str(tmp_path / "set"), "--graders",
                 "alice,bob", "--no-mlflow"]) == 2
    one_error_line(capsys, "sheet.grader-bob.csv", "does not hold the same rows")
    assert not (tmp_path / "set").exists()


def test_a_busy_port_is_one_line_and_exit_2(sheet, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["testset", "grade", str(sheet), "--port", str(port), "--no-browser"]) == 2
    one_error_line(capsys, f"--port {port}", "pass another --port")


def test_a_fully_graded_sheet_says_so_and_exits_0(sheet, capsys):
    g = open_grading(sheet)
    for pos in range(g.total):
        g.grade(pos, str(pos % 4), now=float(pos))
    assert main(["testset", "grade", str(sheet), "--no-browser"]) == 0
    out = capsys.readouterr().out
    assert f"all {g.total} rows" in out and "are graded" in out


def test_two_graders_import_with_agreement_and_arbitration(sheet, exported, tmp_path, capsys):
    from sklearn.metrics import cohen_kappa_score

    qrels = {(q, d): g for q, d, g in (ln.split("\t") for ln in (exported[1] / "qrels" / "test.tsv")
                                         .read_text(encoding="utf-8").splitlines()[1:])}
    alice, bob = open_grading(sheet, grader="alice"), open_grading(sheet, grader="bob")
    keys = [(r["qid"], r["unit_id"]) for r in alice.sheet.rows]
    a = [3 if k in qrels else (1 if i % 3 == 0 else 0) for i, k in enumerate(keys)]
    b = [(g - 1 if i % 4 == 1 and g else g + (i % 5 == 2)) for i, g in enumerate(a)]
    for pos, (ga, gb) in enumerate(zip(a, b, strict=True)):
        alice.grade(pos, str(ga), now=float(pos))
        if pos != len(a) - 1:  # bob leaves the last row: a row one grader graded stays out of the qrels
            bob.grade(pos, str(min(gb, 3)), now=float(pos))
    b = [min(g, 3) for g in b[:-1]]
    pairs_a = a[:-1]
    arb = open_grading(sheet, arbitrate=True)
    assert arb.total == sum(x != y for x, y in zip(pairs_a, b, strict=True)) >= 3
    for pos in range(arb.total - 1):  # the last disagreement is left unsettled
        arb.grade(pos, "2", now=float(pos))
    assert main(["testset", "grade", str(sheet), "--arbitrate", "--port", "70000"]) == 2
    capsys.readouterr()

    out_dir = tmp_path / "gold"
    assert main(["testset", "import-annotation", str(sheet), "--out", str(out_dir), "--graders", "alice,bob",
                 "--tracking-root", str(tmp_path / "mlruns"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    first, *rest = out.splitlines()
    kappa = cohen_kappa_score(pairs_a, b)
    assert first.startswith(f"graders alice and bob: {len(pairs_a)} pairs graded by both; percent agreement ")
    assert f"Cohen's kappa {kappa:.2f} [" in first and f"(n {len(pairs_a)})" in first
    assert f"weighted kappa (linear) {cohen_kappa_score(pairs_a, b, weights='linear'):.2f} [" in first
    assert "unsettled 1" in out and "warning: 1 disagreements" in out
    assert out.index("graders alice and bob") < out.index("written to")  # agreement before the qrels

    prov = json.loads((out_dir / "provenance.json").read_text(encoding="utf-8"))
    agree = prov["agreement"]
    assert agree["kappa"]["value"] == pytest.approx(kappa) and agree["kappa"]["n"] == len(pairs_a)
    assert agree["weighted_kappa"]["value"] == pytest.approx(cohen_kappa_score(pairs_a, b, weights="linear"))
    assert agree["percent_agreement"]["value"] == pytest.approx(
        sum(x == y for x, y in zip(pairs_a, b, strict=True)) / len(b))
    assert (agree["arbitrated"], agree["unsettled"], agree["one_grader"]) == (arb.total - 1, 1, 1)
    written = {}
    for ln in (out_dir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        q, d, g = ln.split("\t")
        written[q, d] = int(g)
    disagreeing = [k for k, x, y in zip(keys, pairs_a, b, strict=False) if x != y]
    expected = {k: x for k, x, y in zip(keys, pairs_a, b, strict=False) if x == y}
    expected.update({k: 2 for k in disagreeing[:-1]})
    assert written == expected

    run = client(tmp_path / "mlruns").search_runs(
        [client(tmp_path / "mlruns").get_experiment_by_name("testset").experiment_id])[0]
    assert run.data.metrics["graders_kappa"] == pytest.approx(kappa) and run.data.tags["labels.graders"] == \
        agree["summary"] and run.data.metrics["graders_pairs"] == len(pairs_a)

    prov_labels = label_provenance(out_dir)
    assert prov_labels.source == "human" and prov_labels.graders == agree["summary"]
    assert agree["summary"].startswith(f"2 graders, kappa {kappa:.2f} [") and agree["summary"].endswith(
        f" on {len(pairs_a)} pairs")
    labels, _ = combine_labels([prov_labels])
    assert trust_lines({"n_queries": 6, "labels": labels})[0] == f"trust: 6 queries; labels human: {agree['summary']}"
