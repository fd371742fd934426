"""lab.testset.grading and lab.testset.graders on a real annotation sheet (exported from an ord-qa slice, BM25 pool):
grades written at once and read back, resume at the first ungraded row, blind grader copies, arbitration of the
disagreements, the text the page shows (marks, best window), the pace."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from ordqa_slices import mini_ordqa

from lab.core.errors import ConfigError, DataError
from lab.testset.annotate import export_annotation
from lab.testset.graders import merge, read_graders
from lab.testset.grading import (
    best_window,
    grader_path,
    open_grading,
    pace,
    read_sheet,
    term_spans,
    write_sheet,
)
from lab.testset.io import write_csv
from lab.testset.spotcheck import REVIEW_COLUMNS


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    ds = mini_ordqa(base / "mini", n_queries=4, n_other=20)
    export_annotation(ds, base / "sheet.csv", strategies=["bm25"], depth=3, seed=0, cache_dir=base / "cache",
                      progress=False, tracking_root=None)
    return base / "sheet.csv", ds


@pytest.fixture
def sheet(exported, tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_bytes(exported[0].read_bytes())
    return path


def rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def test_grades_are_written_at_once_and_resume_at_the_first_ungraded_row(sheet):
    before = rows(sheet)
    g = open_grading(sheet)
    assert g.mode == "annotation" and g.total == len(before) == 12 and g.first_ungraded() == 0
    for pos, value in enumerate("203"):
        g.grade(pos, value, now=100.0 + pos)
    g.note(1, "  off topic:\n the wrong tool ")
    after = rows(sheet)  # read from disk: each call rewrote the file
    assert [r["grade"] for r in after[:4]] == ["2", "0", "3", ""] and after[1]["note"] == "off topic: the wrong tool"
    assert [(r["qid"], r["unit_id"], r["passage"]) for r in after] == [(r["qid"], r["unit_id"], r["passage"])
                                                                       for r in before]  # order and text kept
    assert sheet.read_bytes()[:3] == b"\xef\xbb\xbf" and list(after[0]) == list(before[0])
    again = open_grading(sheet)
    assert again.first_ungraded() == 3 and again.graded_count() == 3
    whole = again.sheet
    whole.path, whole.lines = sheet.with_name("whole.csv"), None
    write_sheet(whole)  # rewriting only the graded row each time gives the file a full rewrite gives
    assert whole.path.read_bytes() == sheet.read_bytes()
    again = open_grading(sheet)
    with pytest.raises(ConfigError, match="one of 0, 1, 2, 3"):
        again.grade(3, "4", now=0.0)
    with pytest.raises(ConfigError, match="rows 1 to 12"):
        again.view(12)
    assert not list(sheet.parent.glob(".sheet.csv.*.tmp"))  # the atomic writer left no temporary file


def test_the_page_sees_only_the_query_the_passage_and_its_own_grade(sheet):
    data = rows(sheet)
    data[0]["judge_grade"] = "3"
    write_csv(sheet, [*data[0]], data)
    view = open_grading(sheet).view(0)
    assert set(view) == {"position", "qid", "query", "passage", "marks", "window", "grade", "note"}
    assert view["query"] == data[0]["query"] and view["passage"] == data[0]["passage"]
    assert "3" not in json.dumps({k: view[k] for k in ("grade", "note")})


def test_grader_copies_are_blind_and_arbitration_shows_only_disagreements(sheet):
    data = rows(sheet)
    data[0]["grade"] = "3"  # a grade already in the shared sheet is not copied to a grader
    write_csv(sheet, [*data[0]], data)
    alice, bob = open_grading(sheet, grader="alice"), open_grading(sheet, grader="bob")
    assert grader_path(sheet, "alice").is_file() and alice.first_ungraded() == 0 and alice.view(0)["grade"] == ""
    for pos, (a, b) in enumerate(zip("2103", "2013", strict=True)):
        alice.grade(pos, a, now=float(pos))
        bob.grade(pos, b, now=float(pos))
    alice.grade(4, "1", now=9.0)  # bob leaves row 4 ungraded: not a disagreement
    assert rows(sheet)[1]["grade"] == ""  # the shared sheet is untouched
    arb = open_grading(sheet, arbitrate=True)
    assert arb.mode == "arbitrate" and arb.order == [1, 2]
    assert arb.view(0)["others"] == {"alice": 1, "bob": 0} and arb.view(1)["others"] == {"alice": 0, "bob": 1}
    arb.grade(0, "1", now=0.0)
    assert open_grading(sheet, arbitrate=True).first_ungraded() == 1
    a, b, arbiter, names = read_graders(sheet, "alice,bob")
    merged, rep = merge(a, b, arbiter, names)
    assert [r["grade"] for r in merged[:5]] == [2, 1, "", 3, ""]
    assert (rep["agreed"], rep["arbitrated"], rep["unsettled"], rep["one_grader"], rep["pairs"]) == (2, 1, 1, 1, 4)
    assert [d["arbiter"] for d in rep["disagreements"]] == [1, None]
    with pytest.raises(ConfigError, match="--grader 'a b'"):
        open_grading(sheet, grader="a b")


def test_arbitration_refuses_graders_with_other_rows(sheet):
    open_grading(sheet, grader="alice")
    other = rows(grader_path(sheet, "alice"))[:-1]
    write_csv(grader_path(sheet, "bob"), [*other[0]], other)
    with pytest.raises(DataError, match="does not hold the same rows") as e:
        open_grading(sheet, arbitrate=True)
    assert "\n" not in str(e.value)
    grader_path(sheet, "bob").unlink()
    with pytest.raises(ConfigError, match="two graders.*found 1"):
        open_grading(sheet, arbitrate=True)


def test_review_sheets_take_verdicts(tmp_path):
    path = write_csv(tmp_path / "review.csv", REVIEW_COLUMNS, [
        {"qid": "q1", "unit_id": "d1", "passage": "Yosys reads Verilog and writes a netlist.", "question":
         "What does Yosys read?", "answer": "Verilog", "grade": 1},
        {"qid": "q2", "unit_id": "d2", "passage": "OpenROAD places cells.", "question": "Who routes?", "grade": 1}])
    g = open_grading(path)
    assert g.mode == "review" and set(g.status()["scale"]) == {"keep", "fix", "drop"}
    assert g.view(0)["answer"] == "Verilog" and g.view(0)["marks"] == [[0, 5], [6, 11]]  # Yosys, reads
    with pytest.raises(ConfigError, match="corrected question"):
        g.grade(1, "fix", now=0.0)
    g.grade(0, "keep", now=0.0)
    g.grade(1, "fix", now=1.0, fixed_question=" Which tool  places cells? ")
    got = rows(path)
    assert [(r["verdict"], r["fixed_question"]) for r in got] == [("keep", ""), ("fix", "Which tool places cells?")]
    assert open_grading(path).first_ungraded() is None
    with pytest.raises(ConfigError, match="annotation sheets"):
        open_grading(path, grader="alice")


def test_a_csv_that_is_no_sheet_is_refused(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("question,answer\nwhat,that\n", encoding="utf-8")
    with pytest.raises(DataError, match="not an annotation sheet .* nor a review sheet") as e:
        read_sheet(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no such file"):
        read_sheet(tmp_path / "missing.csv")


def test_marks_and_the_best_window_of_a_long_passage():
    text = ("Filler about unrelated matters. " * 60 + "The placement density of the global placer is set by "
            "the density parameter; placing cells densely helps routing. " + "More filler text here. " * 60)
    spans = term_spans(text, "How is the placement density set?")
    marked = [text[a:b] for a, b in spans]
    assert marked == ["placement", "density", "set", "density"]  # by stem; "placing" is not "placement"
    lo, hi = best_window(text, spans)
    assert hi - lo <= 1300 and all(lo <= a and b <= hi for a, b in spans)
    assert best_window("short text", []) == (0, 10)
    zh = term_spans("全局布局的密度由参数设置。", "布局密度")
    assert zh == [(2, 4), (5, 7)]


def test_pace_leaves_out_pauses():
    assert pace([], 10)["per_hour"] is None and pace([5.0], 10)["seconds_left"] is None
    p = pace([0, 4, 8, 1000, 1006, 1010], 50)
    assert p["seconds_per_grade"] == 4 and p["per_hour"] == 900 and p["seconds_left"] == 200
