"""lab.cli.demo (`lab demo`): bad arguments as one line, exit 2 (the demo itself runs in
tests/workbench/test_notebooks.py and its pieces in tests/workbench and tests/analysis)."""
from __future__ import annotations

import pytest

from lab.cli.main import main


def test_jobs_below_1_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--jobs", "0"])
    assert exc.value.code == 2 and "argument --jobs: expected an integer >= 1, got 0" in capsys.readouterr().err
