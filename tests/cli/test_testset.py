"""`lab testset ...`: the subcommands are wired, errors print one line naming file, line and field (exit 2)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.cli.main import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def test_subcommands_are_registered(capsys):
    with pytest.raises(SystemExit):
        main(["testset", "--help"])
    out = capsys.readouterr().out
    for name in ("generate", "export-review", "import-review", "import-logs", "export-annotation",
                 "import-annotation", "judge", "perturb"):
        assert name in out
    args = build_parser().parse_args(["testset", "generate", "--dataset", "data/ord-qa", "--out", "x", "--n", "5",
                                      "--stratify", "doc", "--chunking", "recursive,size=128"])
    assert (args.n, args.stratify, args.chunking, args.llm, args.json_mode) == (5, "doc", "recursive,size=128",
                                                                                "local", "schema")


def test_export_review_from_the_command_line(tmp_path, capsys):
    shutil.copytree(REPO / "data" / "ord-qa", tmp_path / "set")
    assert main(["testset", "export-review", str(tmp_path / "set"), "--sample", "3", "--out",
                 str(tmp_path / "r.csv")]) == 0
    assert "3 of 90 questions" in capsys.readouterr().out and (tmp_path / "r.csv").is_file()


def test_bad_log_row_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "faq.csv"
    bad.write_text("question,answer\nHow do I zoom?,gui::zoom_to\n,no question here\n", encoding="utf-8")
    code = main(["testset", "import-logs", str(bad), "--dataset", str(REPO / "data" / "ord-qa"), "--out",
                 str(tmp_path / "out"), "--no-mlflow"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "line 3, field 'question'" in err and str(bad) in err


def test_corpus_only_folder(tmp_path, capsys):
    """A folder with only corpus.jsonl (what `lab ingest` writes): import-logs links to it; export-annotation, which
    needs questions, says so in one line (exit 2)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    src = (REPO / "data" / "ord-qa" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "corpus.jsonl").write_text("\n".join(src[:40]) + "\n", encoding="utf-8")
    code = main(["testset", "export-annotation", "--dataset", str(folder), "--out", str(tmp_path / "p.csv"),
                 "--no-mlflow", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "lab testset generate" in err and len(err.splitlines()) == 1
    faq = tmp_path / "faq.csv"
    faq.write_text("question,reference\nHow do I install OpenROAD?,install_0\n", encoding="utf-8")
    assert main(["testset", "import-logs", str(faq), "--dataset", str(folder), "--out", str(tmp_path / "faq-set"),
                 "--no-mlflow", "--no-progress"]) == 0
    assert "install_0" in (tmp_path / "faq-set" / "qrels" / "test.tsv").read_text()


def test_bad_generation_option_is_one_line_error_before_any_work(tmp_path, capsys):
    code = main(["testset", "generate", "--dataset", str(tmp_path / "missing"), "--out", str(tmp_path / "o"),
                 "--max-passage-chars", "50", "--no-mlflow"])
    err = capsys.readouterr().err
    assert code == 2 and "max_passage_chars=50" in err and len(err.strip().splitlines()) == 1


def test_generate_into_a_folder_that_holds_a_set_is_one_line_error(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "queries.jsonl").write_text('{"_id": "q", "text": "zoom"}\n', encoding="utf-8")
    code = main(["testset", "generate", "--dataset", str(tmp_path / "missing"), "--out", str(out), "--no-mlflow"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {out}: holds a test set (queries.jsonl)") and "--force" in err
    assert len(err.strip().splitlines()) == 1
    code = main(["testset", "generate", "--dataset", str(tmp_path / "missing"), "--out", str(out), "--resume",
                 "--no-mlflow"])
    err = capsys.readouterr().err
    assert code == 2 and "no generation.json, so there is nothing to resume" in err and "--force" in err


def test_generate_dry_run_prints_only_the_estimate(tmp_path, capsys):
    """`--dry-run`: the first batch is a timed sample (two real SmolLM2 calls here), one estimate line is printed
    and nothing is written."""
    from builders import mini_dataset

    out = tmp_path / "gen"
    code = main(["testset", "generate", "--dataset", str(mini_dataset(tmp_path, corpus_only=True)), "--out", str(out),
                 "--n", "5", "--max-attempts", "2", "--min-passage-words", "5", "--dry-run", "--no-mlflow",
                 "--no-progress", "--cache-dir", str(tmp_path / "cache")])
    printed = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(printed) == 1 and printed[0].startswith("estimate: about 2 candidates, ")
    assert not out.exists()
