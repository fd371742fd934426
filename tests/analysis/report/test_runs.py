"""lab.analysis.report.runs: result files that share a name before their suffixes are one run."""
from __future__ import annotations

from lab.analysis.report import file_group


def test_file_group_names_a_run_by_what_its_files_share():
    assert file_group("x/bm25.per_query.csv") == file_group("bm25.json") == file_group("bm25.trec") == "bm25"
    assert file_group("hybrid.v2.json") == "hybrid.v2"
