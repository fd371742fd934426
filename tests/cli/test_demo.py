"""lab.cli.demo (`lab demo`): the options reach lab.workbench.demo.run_demo and the exit status says whether every
config finished with a leaderboard (the demo itself: `make demo`, and its pieces in tests/workbench and
tests/analysis)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

import lab.cli.demo
from lab.cli.main import main
from lab.workbench.demo import DEFAULT_OUT, DEFAULT_SPEC, DemoResult


def _fake_run_demo(calls: list, ok: bool, rows: int):
    def run_demo(spec, **kwargs):
        calls.append((spec, kwargs))
        return DemoResult(SimpleNamespace(ok=ok), pd.DataFrame({"ndcg@10": [0.5] * rows}))
    return run_demo


@pytest.mark.parametrize("ok, rows, status", [(True, 2, 0), (False, 2, 1), (True, 0, 1)])
def test_exit_status_is_0_only_when_every_config_finished_with_a_leaderboard(ok, rows, status, monkeypatch):
    calls: list = []
    monkeypatch.setattr(lab.cli.demo, "run_demo", _fake_run_demo(calls, ok, rows))
    assert main(["demo"]) == status
    assert calls == [(DEFAULT_SPEC, {"root": "mlruns", "out_dir": DEFAULT_OUT, "metric": "ndcg@10", "jobs": 1,
                                     "progress": True})]


def test_options_reach_run_demo(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(lab.cli.demo, "run_demo", _fake_run_demo(calls, True, 1))
    assert main(["demo", "--spec", "params/x.yaml", "--tracking-root", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--metric", "recall@10", "--jobs", "2", "--no-progress"]) == 0
    assert calls == [("params/x.yaml", {"root": str(tmp_path), "out_dir": str(tmp_path / "o"), "metric": "recall@10",
                                        "jobs": 2, "progress": False})]


def test_jobs_below_1_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--jobs", "0"])
    assert exc.value.code == 2 and "argument --jobs: expected an integer >= 1, got 0" in capsys.readouterr().err
