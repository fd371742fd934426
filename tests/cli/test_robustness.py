"""lab.cli.robustness (`lab robustness`): variants that are missing are made, then the table printed (the table
itself: tests/analysis/test_robustness.py)."""
from __future__ import annotations

import shutil

from conftest import ORDQA

from lab.cli.main import build_parser


def test_cli_robustness_makes_missing_variants(tmp_path, capsys):
    args = build_parser().parse_args(["robustness", "--dataset", ORDQA, "--strategies", "bm25", "--make",
                                      "distractor", "--max-queries", "15", "--resamples", "200", "--out",
                                      str(tmp_path), "--no-log", "--no-progress"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| bm25 | distractor |" in out and (tmp_path / "variants" / "ord-qa-distractor").is_dir()
    shutil.rmtree(tmp_path)
