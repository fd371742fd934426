"""lab.data.trec: qrels (BEIR TSV or TREC, detected) and TREC runs; bad lines give one DataError."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from builders import assert_bad_file

from lab.core.errors import DataError
from lab.data import DataWarning, Qrels, Run, read_qrels, read_trec_run, write_trec_qrels, write_trec_run
from lab.data.trec import detect_qrels_format

BAD = Path(__file__).parents[1] / "fixtures" / "data" / "bad"
TINY = Path(__file__).parents[1] / "fixtures" / "data" / "tiny"


# --- qrels -----------------------------------------------------------------------------------------------------
def test_beir_and_trec_qrels_are_detected_per_file():
    assert read_qrels(TINY / "qrels" / "test.tsv").qrels == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 0}}
    trec = read_qrels(TINY / "qrels" / "dev.txt")
    assert trec.name == "dev" and trec.qrels == {"q3": {"d3": 1, "4": -1}}


@pytest.mark.parametrize("line, expected", [
    ("query-id\tcorpus-id\tscore", ("beir", True)),
    ("q1\td1\t1", ("beir", False)),  # BEIR without its header line
    ("q1 d1 1.0", ("beir", False)),  # a data line (its grade is then rejected), not a header
    ("301 0 FBIS3-10082 1", ("trec", False)),
])
def test_detect_qrels_format(line, expected):
    assert detect_qrels_format("x", line) == expected


def test_headerless_beir_and_crlf(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_bytes(b"1\t31715818\t1\r\n3\t14717500\t2\r\n")
    assert read_qrels(p).qrels == {"1": {"31715818": 1}, "3": {"14717500": 2}}


@pytest.mark.parametrize("name, line, field, message", [
    ("qrels_float_grade.tsv", 3, "score", "not an integer: '1.0'"),
    ("qrels_columns.tsv", 3, None, "expected 3 columns (query-id<TAB>corpus-id<TAB>score), got 2"),
    ("qrels_duplicate.tsv", 4, "corpus-id", "judgement for query 'q1' and document 'd1' given twice (first on line 2)"),
    ("qrels_trec_columns.txt", 2, None, "expected 4 columns (qid 0 docid rel), got 5"),
    ("qrels_header_only.tsv", None, None, "qrels file has a header but no judgements"),
    ("empty.jsonl", None, None, "qrels file is empty"),
])
def test_bad_qrels(name, line, field, message):
    assert_bad_file(read_qrels, BAD / name, line, field, message)


def test_float_grade_hint_says_what_to_write():
    with pytest.raises(DataError, match=r"write 1, not 1.0"):
        read_qrels(BAD / "qrels_float_grade.tsv")


def test_missing_qrels_file(tmp_path):
    with pytest.raises(DataError, match="qrels file not found"):
        read_qrels(tmp_path / "test.tsv")


def test_trec_qrels_round_trip(tmp_path):
    qrels = read_qrels(TINY / "qrels" / "test.tsv")
    path = write_trec_qrels(qrels, tmp_path / "q.txt")
    assert path.read_text() == "q1 0 d1 2\nq1 0 d2 1\nq2 0 d3 0\n"
    assert read_qrels(path).qrels == qrels.qrels


# --- runs ------------------------------------------------------------------------------------------------------
def test_run_order_comes_from_score_with_trec_eval_ties(tmp_path):
    p = tmp_path / "r.trec"
    # ranks disagree with scores on purpose; d2 and d9 tie: doc id descending puts d9 first
    p.write_text("q1 Q0 d1 1 0.5 sys\nq1 Q0 d2 2 2.0 sys\nq1 Q0 d9 3 2.0 sys\nq2 Q0 x 1 -1e-3 sys\n")
    run = read_trec_run(p)
    assert run.name == "sys" and run.ranked("q1") == [("d9", 2.0), ("d2", 2.0), ("d1", 0.5)]
    assert run.scores["q2"] == {"x": -0.001}


def test_run_name_defaults_to_the_stem_when_tags_differ(tmp_path):
    p = tmp_path / "mixed.run.txt"
    p.write_text("q1 Q0 d1 1 1 a\nq1 Q0 d2 2 0 b\n")
    assert read_trec_run(p).name == "mixed" and read_trec_run(p, name="x").name == "x"


def test_repeated_documents_keep_the_first_and_warn_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = read_trec_run(BAD / "run_repeats.trec")
    assert run.scores == {"q1": {"d1": 2.5, "d2": 1.5}, "q2": {"d3": 1.0}}
    (w,) = [w for w in caught if issubclass(w.category, DataWarning)]
    assert str(w.message) == (f"{BAD / 'run_repeats.trec'}: 2 repeated (query, document) line(s), first on line 3; "
                              "kept the first occurrence of each")


@pytest.mark.parametrize("name, line, field, message", [
    ("run_bad_score.trec", 2, "score", "score is not a number: 'high'"),
    ("run_columns.trec", 1, None, "expected 6 columns (qid Q0 docid rank score tag), got 5"),
    ("empty.jsonl", None, None, "run file is empty"),
])
def test_bad_runs(name, line, field, message):
    assert_bad_file(read_trec_run, BAD / name, line, field, message)


def test_nan_score_and_bad_rank_are_errors(tmp_path):
    p = tmp_path / "r.trec"
    p.write_text("q1 Q0 d1 1 nan x\n")
    with pytest.raises(DataError, match="line 1, field 'score': score is not a number: 'nan'"):
        read_trec_run(p)
    p.write_text("q1 Q0 d1 first 1.0 x\n")
    with pytest.raises(DataError, match="line 1, field 'rank': not an integer"):
        read_trec_run(p)


def test_write_run_ranks_k_tag_and_exact_round_trip(tmp_path):
    run = Run({"q2": {"a": 0.1, "b": 0.30000000000000004, "c": 0.1}, "q1": {"z": 1e-12}, "q3": {}}, name="bm25")
    path = write_trec_run(run, tmp_path / "out" / "run.trec")
    assert path.read_text().splitlines() == [
        "q2 Q0 b 1 0.30000000000000004 bm25", "q2 Q0 c 2 0.1 bm25", "q2 Q0 a 3 0.1 bm25", "q1 Q0 z 1 1e-12 bm25"]
    back = read_trec_run(path)
    assert back.scores == {"q2": run.scores["q2"], "q1": run.scores["q1"]} and back.name == "bm25"
    top = write_trec_run(run, tmp_path / "top.trec", tag="cut", k=1).read_text().splitlines()
    assert top == ["q2 Q0 b 1 0.30000000000000004 cut", "q1 Q0 z 1 1e-12 cut"]


def test_write_run_rejects_what_trec_cannot_hold(tmp_path):
    with pytest.raises(DataError, match="doc id 'a b' is empty or contains whitespace"):
        write_trec_run(Run({"q": {"a b": 1.0}}), tmp_path / "r.trec")
    with pytest.raises(DataError, match="is NaN"):
        write_trec_run(Run({"q": {"a": float("nan")}}), tmp_path / "r.trec")
    with pytest.raises(DataError, match="tag 'my run'"):
        write_trec_run(Run({"q": {"a": 1.0}}), tmp_path / "r.trec", tag="my run")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_written_files_are_read_the_same_by_trec_eval(tmp_path):
    """Parity with trec_eval's own parser and tie rule (pytrec_eval wraps the trec_eval C code)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run = Run({"q1": {"d1": 3.0, "d2": 1.5, "d3": 1.5}, "q2": {"d4": -2.0, "d5": 0.25}}, name="sys")
    qrels = Qrels({"q1": {"d2": 1}, "q2": {"d5": 1}})
    with open(write_trec_run(run, tmp_path / "run.trec")) as fh:
        parsed_run = pytrec_eval.parse_run(fh)
    with open(write_trec_qrels(qrels, tmp_path / "qrels.txt")) as fh:
        parsed_qrels = pytrec_eval.parse_qrel(fh)
    assert parsed_run == run.scores and parsed_qrels == qrels.qrels
    rr = pytrec_eval.RelevanceEvaluator(parsed_qrels, {"recip_rank"}).evaluate(parsed_run)
    # trec_eval breaks the d2/d3 tie by doc id descending, as Run.ranked and the written ranks do
    assert [d for d, _ in run.ranked("q1")] == ["d1", "d3", "d2"] and rr["q1"]["recip_rank"] == pytest.approx(1 / 3)
    assert rr["q2"]["recip_rank"] == 1.0
