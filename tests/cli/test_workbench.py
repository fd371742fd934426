"""lab.cli.workbench (`lab sweep`, `lab compare`, `lab ui`): the sweep's dry run and a missing spec, and the
`mlflow ui` command `lab ui --print` gives. The sweeps and leaderboards these commands run are tested in
tests/workbench/test_sweep*.py and tests/analysis/test_compare.py."""
from __future__ import annotations

from lab.cli.main import main
from lab.tracking.store import client


def test_sweep_dry_run_lists_the_configs_and_runs_nothing(blank_tracking_root, capsys):
    assert main(["sweep", "params/smoke.yaml", "--dry-run", "--tracking-root", str(blank_tracking_root)]) == 0
    out = capsys.readouterr().out
    assert "dry run: sweep 'smoke' (smoke): 2 configs, 2 would run, 0 finished earlier (skipped)" in out
    assert "strategy=bm25" in out and "strategy=dense" in out and out.count("why: not run before") == 2
    exp = client(blank_tracking_root).get_experiment_by_name("smoke")
    assert exp is None or client(blank_tracking_root).search_runs([exp.experiment_id]) == []


def test_a_spec_that_does_not_exist_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", "params/no_such_spec.yaml", "--tracking-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "error: params/no_such_spec.yaml: no such sweep spec; specs live in params/*.yaml\n"


def test_ui_command_prints_a_single_worker_server_without_job_runner(tmp_path, capsys):
    assert main(["ui", "--root", str(tmp_path / "s"), "--port", "5099", "--print"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false ")
    assert f"--backend-store-uri sqlite:///{tmp_path / 's' / 'mlflow.db'}" in line
    assert f"--default-artifact-root {(tmp_path / 's' / 'artifacts').as_uri()}" in line
    assert "--host 127.0.0.1 --port 5099 --workers 1" in line
