"""`lab testset ...`: the subcommands are wired, errors print one line naming file, line and field (exit 2)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]


def test_subcommands_are_registered(capsys):
    with pytest.raises(SystemExit):
        main(["testset", "--help"])
    out = capsys.readouterr().out
    for name in ("generate", "export-review", "import-review", "import-logs", "export-annotation",
                 "import-annotation"):
        assert name in out
    args = build_parser().parse_args(["testset", "generate", "--dataset", "data/ord-qa", "--out", "x", "--n", "5",
                                      "--stratify", "doc", "--chunking", "recursive,size=128"])
    assert (args.n, args.stratify, args.chunking, args.llm, args.json_mode) == (5, "doc", "recursive,size=128",
                                                                                "local", "schema")


def test_perturb_is_added_when_lab_perturb_provides_it():
    import importlib
    import importlib.util

    has = hasattr(importlib.import_module("lab.perturb"), "add_parser") if importlib.util.find_spec(
        "lab.perturb") else False
    sub = build_parser()._subparsers._group_actions[0].choices["testset"]
    choices = sub._subparsers._group_actions[0].choices
    assert ("perturb" in choices) == has


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
