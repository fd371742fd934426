"""lab.testset.spotcheck on a copy of the real ord-qa set: export a seeded sample, fill verdicts as a reviewer
would, import them (keep / fix / drop / grade), acceptance rate, a bm25 recall@10 CI, errors naming line and field,
and the MLflow record."""
from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from lab.core.errors import DataError
from lab.data.beir import load_dataset
from lab.testset.io import read_provenance
from lab.testset.spotcheck import REVIEW_COLUMNS, export_review, import_review, read_review, wilson_interval

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def review_set(tmp_path):
    folder = tmp_path / "set"
    shutil.copytree(REPO / "data" / "ord-qa", folder)
    return folder


def _fill(path: Path, verdicts: dict[int, dict], bom: bool = True) -> Path:
    """Rewrite the sheet with the reviewer's cells for rows 0, 1, ... (as a spreadsheet saves it)."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, cells in verdicts.items():
        rows[i].update(cells)
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(REVIEW_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    return path


def _record_start_lines(path: Path) -> list[int]:
    """Physical line (1-based) where each data record starts (passages span several lines)."""
    text = path.read_text(encoding="utf-8-sig")
    reader = csv.reader(text.splitlines(keepends=True))
    next(reader)
    starts, line = [], reader.line_num + 1
    for _ in reader:
        starts.append(line)
        line = reader.line_num + 1
    return starts


def test_export_is_a_seeded_sample_excel_can_open(review_set, tmp_path):
    out = export_review(review_set, tmp_path / "review.csv", sample=10, seed=0)
    raw = (tmp_path / "review.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and out["rows"] == 10 and out["of"] == 90
    with open(tmp_path / "review.csv", encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(REVIEW_COLUMNS) and [r["qid"] for r in rows] == out["qids"]
    ds = load_dataset(review_set, progress=False)
    first = rows[0]
    assert first["question"] == ds.queries[first["qid"]]
    assert first["answer"] == ds.queries.metadata[first["qid"]]["answer"]
    assert first["passage"] == ds.corpus[first["unit_id"]].text and first["grade"] == "1" and first["verdict"] == ""
    assert export_review(review_set, tmp_path / "again.csv", sample=10, seed=0)["qids"] == out["qids"]
    assert export_review(review_set, tmp_path / "other.csv", sample=10, seed=1)["qids"] != out["qids"]


def test_import_applies_verdicts_and_reports_acceptance_and_ci(review_set, tmp_path):
    out = export_review(review_set, tmp_path / "review.csv", sample=10, seed=0)
    q = out["qids"]
    _fill(tmp_path / "review.csv", {0: {"verdict": "keep"},
                                    1: {"verdict": "FIX", "fixed_question": "Which command sets the routing alpha?"},
                                    2: {"verdict": "drop", "note": "answer not in the passage"},
                                    3: {"verdict": "keep", "grade": "2"}}, bom=False)
    before = load_dataset(review_set, progress=False)
    rep = import_review(review_set, tmp_path / "review.csv", out=tmp_path / "set2", cache_dir=tmp_path / "cache",
                        tracking_root=None)
    assert (rep["reviewed"], rep["keep"], rep["fix"], rep["drop"], rep["unreviewed"]) == (4, 2, 1, 1, 6)
    assert rep["acceptance_rate"] == 0.75 and rep["grade_changes"] == 1
    lo, hi = rep["acceptance_ci95"]
    assert lo < 0.75 < hi and (lo, hi) == wilson_interval(3, 4)
    after = load_dataset(tmp_path / "set2", progress=False)
    assert q[2] not in after.queries and q[2] not in after.qrels["test"]
    assert after.queries[q[1]] == "Which command sets the routing alpha?"
    assert after.queries.metadata[q[1]]["original_question"] == before.queries[q[1]]
    assert after.queries.metadata[q[0]]["review"] == "keep" and 2 in after.qrels["test"][q[3]].values()
    assert len(after.qrels["test"]) == 89
    assert load_dataset(review_set, progress=False).queries[q[1]] == before.queries[q[1]]
    ci = rep["ci"]
    assert ci["strategy"] == "bm25" and ci["metric"] == "recall@10" and ci["n_queries"] == 89
    assert ci["ci_low"] < ci["mean"] < ci["ci_high"] and 0.02 < ci["half_width"] < 0.2
    assert ci["half_width_at_2000"] == pytest.approx(ci["half_width"] * math.sqrt(89 / 2000))
    review = read_provenance(tmp_path / "set2")["reviews"][0]
    assert review["drop"] == 1 and not review["review_file"].startswith("/")  # no machine path in provenance


@pytest.mark.parametrize("cells,field,message", [
    ({"verdict": "maybe"}, "verdict", "not one of keep, fix, drop"),
    ({"verdict": "fix"}, "fixed_question", "without a fixed_question"),
    ({"verdict": "keep", "grade": "5"}, "grade", "integer from 0 to 3"),
    ({"verdict": "keep", "grade": "high"}, "grade", "integer from 0 to 3"),
    ({"qid": "no-such-question"}, "qid", "not a query of the set"),
])
def test_bad_rows_name_file_line_field_and_change_nothing(review_set, tmp_path, cells, field, message):
    export_review(review_set, tmp_path / "review.csv", sample=5, seed=0)
    _fill(tmp_path / "review.csv", {0: {"verdict": "drop"}, 2: cells})
    with pytest.raises(DataError) as e:
        import_review(review_set, tmp_path / "review.csv", out=tmp_path / "set2", tracking_root=None, ci_strategy=None)
    assert e.value.line == _record_start_lines(tmp_path / "review.csv")[2]
    assert e.value.field == field and message in str(e.value)
    assert str(tmp_path / "review.csv") in str(e.value) and not (tmp_path / "set2").exists()


def test_duplicate_qid_is_an_error(tmp_path):
    sheet = tmp_path / "r.csv"
    sheet.write_text("qid,verdict\n1,keep\n1,drop\n", encoding="utf-8")
    with pytest.raises(DataError, match="appears twice") as e:
        read_review(sheet, {"1": {"d": 1}})
    assert e.value.line == 3


def test_import_review_logs_to_mlflow(review_set, tmp_path):
    from lab.tracking.store import client

    export_review(review_set, tmp_path / "review.csv", sample=4, seed=0)
    _fill(tmp_path / "review.csv", {0: {"verdict": "keep"}, 1: {"verdict": "drop"}})
    root = tmp_path / "mlruns"
    rep = import_review(review_set, tmp_path / "review.csv", cache_dir=tmp_path / "cache", tracking_root=root)
    run = client(root).get_run(rep["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["testset.kind"] == "review"
    assert run.data.metrics["acceptance_rate"] == 0.5 and run.data.metrics["recall_at_10_ci_half_width"] > 0
    assert read_provenance(review_set)["reviews"][-1]["mlflow_run_id"] == rep["mlflow_run_id"]  # in place


def test_committed_reviewed_ord_qa_set_matches_its_sheet():
    """data/ord-qa-generated-reviewed is data/ord-qa-generated with its review.csv applied: drops gone, fixes
    reworded with the original kept, and the review recorded in provenance.json."""
    import csv

    from lab.data.beir import load_dataset

    src, rev = REPO / "data" / "ord-qa-generated", REPO / "data" / "ord-qa-generated-reviewed"
    if not rev.is_dir():
        pytest.skip("data/ord-qa-generated-reviewed not built (lab testset import-review)")
    with open(src / "review.csv", encoding="utf-8-sig", newline="") as fh:
        sheet = {r["qid"]: r for r in csv.DictReader(fh)}
    before, after = load_dataset(src, progress=False), load_dataset(rev, progress=False)
    q0, _ = before.split("test")
    q1, r1 = after.split("test")
    drops = {q for q, r in sheet.items() if r["verdict"] == "drop"}
    assert set(r1) == set(q0) - drops and len(r1) == len(q0) - len(drops)
    for q, r in sheet.items():
        if r["verdict"] == "fix":
            assert q1[q] == r["fixed_question"] and q1.metadata[q]["original_question"] == q0[q]
        elif r["verdict"] == "keep":
            assert q1[q] == q0[q] and q1.metadata[q]["review"] == "keep"
    review = json.loads((rev / "provenance.json").read_text(encoding="utf-8"))["reviews"][-1]
    assert (review["keep"], review["fix"], review["drop"]) == tuple(
        sum(r["verdict"] == v for r in sheet.values()) for v in ("keep", "fix", "drop"))


def test_small_all_hit_set_gets_a_wilson_interval_and_questions_needed(tmp_path):
    """The import-review of 12 questions that bm25 all finds printed 1.0000 [1.0000, 1.0000]; now Wilson."""
    import json as _json

    from lab.testset.spotcheck import ci_halfwidth, format_report

    src = REPO / "data" / "ord-qa"
    folder = tmp_path / "small"
    (folder / "qrels").mkdir(parents=True)
    docs = [_json.loads(ln) for ln in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()][:12]
    (folder / "corpus.jsonl").write_text("".join(_json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    # each question is its document's own first line: bm25 finds every one in its top 10
    (folder / "queries.jsonl").write_text("".join(_json.dumps({"_id": f"q{i}", "text": d["text"][:200]}) + "\n"
                                                  for i, d in enumerate(docs)), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\t{d['_id']}\t1\n" for i, d in enumerate(docs)), encoding="utf-8")
    ci = ci_halfwidth(folder, "bm25", cache_dir=tmp_path / "cache")
    assert ci["mean"] == 1.0 and ci["interval"] == "wilson" and ci["ci_low"] == pytest.approx(0.7575, abs=1e-4)
    assert ci["half_width"] > 0.1 and 0 < ci["half_width_at_2000"] < 0.01 and ci["questions_needed"] > 2000
    text = format_report({"reviewed": 12, "keep": 12, "fix": 0, "drop": 0, "unreviewed": 0, "grade_changes": 0,
                          "acceptance_rate": 1.0, "acceptance_ci95": list(wilson_interval(12, 12)),
                          "queries_after": 12, "folder": str(folder), "ci": ci})
    assert "[0.7575, 1.0000] (Wilson 95%) over 12 questions" in text and "seed 000" not in text
    assert "75.8%-100.0%" in text
