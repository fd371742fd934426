"""lab.cli.ingest (`lab ingest SRC --out DIR`): the summary, --strict and --exclude, --json's report keys, and bad
arguments as one `error:` line with exit 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from docwriters import write_folder, write_site

from lab.cli.main import main


def test_cli_prints_summary_exit_0_and_strict_exit_1(tmp_path, capsys):
    src = write_folder(tmp_path)
    assert main(["ingest", str(src), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ingested 7 documents" in out and "skipped 6 files" in out
    assert main(["ingest", str(src), "--out", str(tmp_path / "o"), "--no-progress", "--strict"]) == 1
    assert "--strict: 6 files were skipped" in capsys.readouterr().out
    assert main(["ingest", str(src), "--out", str(tmp_path / "o2"), "--exclude", "*.png", "--exclude", "locked.pdf",
                 "--exclude", "blob.txt", "--exclude", "latin1.txt", "--exclude", "broken.pdf",
                 "--exclude", "empty.md", "--strict", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["excluded"] == 6


def test_cli_dedupe_min_words_and_json_report_keys(tmp_path, capsys):
    src = write_site(tmp_path)
    assert main(["ingest", str(src), "--out", str(tmp_path / "o"), "--no-progress", "--dedupe", "--min-words",
                 "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("documents", "by_format", "skipped", "rerun", "dropped", "hidden_ignored", "excluded", "seconds",
                "limits", "id_collisions", "ids_rewritten", "encoding_guesses", "boilerplate",
                "titles_from_page_title", "near_duplicates", "short_documents", "min_words", "dedupe"):
        assert key in report, key
    assert report["documents"] == 10 and report["dedupe"] is True and report["min_words"] == 20
    assert report["limits"]["max_zip_ratio"] == 100


@pytest.mark.parametrize("case", ["missing_src", "no_out", "out_is_file", "foreign_corpus", "out_is_src", "limit",
                                  "share", "min_words"])
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, case):
    src = tmp_path / "docs"
    src.mkdir()
    (src / "a.md").write_text("# A\n")
    out = tmp_path / "out"
    args = [str(src), "--out", str(out)]
    if case == "missing_src":
        args = [str(tmp_path / "nope"), "--out", str(out)]
    elif case == "no_out":
        args = [str(src)]
    elif case == "out_is_file":
        out.write_text("x")
    elif case == "foreign_corpus":
        out.mkdir()
        (out / "corpus.jsonl").write_text('{"_id": "1", "text": "someone else\'s"}\n')
    elif case == "out_is_src":
        args = [str(src), "--out", str(src)]
    elif case == "limit":
        args += ["--max-zip-ratio", "0"]
    elif case == "share":
        args += ["--boilerplate-share", "1.5"]
    elif case == "min_words":
        args += ["--min-words", "-1"]
    proc = subprocess.run([sys.executable, "-m", "lab", "ingest", *args, "--no-progress"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if case == "foreign_corpus":
        assert (out / "corpus.jsonl").read_text().startswith('{"_id": "1"')  # untouched
