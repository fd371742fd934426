"""lab.workbench.schedule: the README's example as a scheduled job. A copy of data/ord-qa, the bm25 sweep of notebook
03 run
with `lab sweep SPEC --scheduled` (real Papermill executions, real MLflow store): a baseline, an unchanged rerun
(reused, seconds), half the documents replaced by "obsolete page" (rerun, the drop from 0.5826 flagged with its
paired test, exit 1, Prometheus gauges), `lab compare --previous`, the trends, and sweeps that cannot finish."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from builders import ordqa_sweep_env

from lab.analysis.trends import TAG_SCHEDULE, TAG_SEQUENCE, schedule_history, scheduled_parents
from lab.cli.main import main
from lab.core.errors import ConfigError
from lab.tracking.store import client

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
notebook: notebooks/03_strategy_comparison.ipynb
dataset: {dataset}
experiment: nightly
seed: 0
fixed: {{split: test, k: 100, strategy: {strategy}{extra}}}
"""


def scheduled(env, *extra) -> int:
    return main(["sweep", str(env["spec"]), "--scheduled", "--root", str(env["root"]), "--no-progress",
                 "--prometheus", str(env["prom"]), "--report-dir", str(env["reports"]),
                 "--output-dir", str(env["base"] / "executed"), *extra])


def parents(root):
    cl = client(root)
    exp = cl.get_experiment_by_name("nightly")
    return scheduled_parents(cl, exp.experiment_id) if exp else []


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig):
    base = tmp_path_factory.mktemp("schedule")
    return {**ordqa_sweep_env(base, "nightly.yaml", SPEC, pytestconfig, strategy="bm25", extra=""),
            "prom": base / "textfile" / "raglab.prom", "reports": base / "reports"}


def test_the_worked_example_as_a_scheduled_job(env, capsys):
    assert scheduled(env) == 0  # the first scheduled sweep: the baseline
    out = capsys.readouterr().out
    assert "nothing to compare with yet" in out and "baseline recorded" in out
    first = json.loads((env["reports"] / "schedule.json").read_text())
    assert first["sequence"] == 1 and first["configs"][0]["status"] == "FINISHED"

    t0 = time.perf_counter()
    assert scheduled(env) == 0  # nothing changed: the finished run is reused
    seconds = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "same run" in out and "0 finished, 0 failed, 1 skipped" in out
    assert seconds < 30, seconds  # no notebook ran (8 s measured on two shared cores, most of it the report)

    corpus = env["kb"] / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for i, row in enumerate(rows):
        if i % 2 == 0:
            row["text"] = "obsolete page"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert scheduled(env) == 1  # retrieval got worse: non-zero exit
    cap = capsys.readouterr()
    run1 = first["configs"][0]["run_id"][:8]
    assert f"runs again: dataset changed since run {run1} (corpus.jsonl)" in cap.out
    assert "REGRESSION: 03_strategy_comparison ndcg@10 dropped from 0.5826 to 0.3825" in cap.out
    assert "retrieval got worse" in cap.err
    comp = json.loads((env["reports"] / "comparison.json").read_text())
    row = comp["configs"][0]["rows"][0]
    assert comp["regressed"] and comp["configs"][0]["paired"] and row["verdict"] == "FAIL"
    assert round(row["baseline"], 4) == 0.5826 and round(row["current"], 4) == 0.3825
    assert row["p_value"] < 0.001 and row["ci_high"] < 0 and row["n_paired"] == 90
    prom = env["prom"].read_text()
    assert 'raglab_scheduled_regression{experiment="nightly",schedule="nightly",config="03_strategy_comparison",' \
           'metric="ndcg@10"} 1.0' in prom
    assert 'raglab_scheduled_sequence{experiment="nightly",schedule="nightly"} 3.0' in prom
    executed = json.loads(next((env["base"] / "executed").glob("000_*.ipynb")).read_text())
    trend_cell = next(c for c in executed["cells"] if "schedule_history(" in "".join(c["source"]))
    assert any("image/png" in o.get("data", {}) for o in trend_cell["outputs"])  # notebook 03 plots the trends
    html = (env["reports"] / "report.html").read_text()
    assert 'id="scheduled-comparison"' in html and 'id="trends"' in html

    tags = [p.data.tags for p in parents(env["root"])]
    assert [(t[TAG_SCHEDULE], t[TAG_SEQUENCE], t["sweep.ok"]) for t in tags] == [
        ("nightly", "1", "true"), ("nightly", "2", "true"), ("nightly", "3", "true")]
    assert tags[2]["raglab.schedule.regression"] == "true"

    # by hand: the same comparison, the same verdict
    assert main(["compare", "--experiment", "nightly", "--previous", "--root", str(env["root"])]) == 1
    assert "REGRESSION" in capsys.readouterr().out

    # trends: the metric per scheduled sweep, the sweep where the dataset changed marked
    hist = schedule_history("nightly", tracking_root=env["root"])
    assert list(hist["sequence"]) == [1, 2, 3] and list(hist["reused"]) == [False, True, False]
    assert list(hist["dataset_changed"]) == [False, False, True] and not hist["model_changed"].any()
    assert main(["report", "--experiment", "nightly", "--mlflow-root", str(env["root"]),
                 "--out", str(env["base"] / "r.html"), "--no-log"]) == 0
    assert 'id="trends"' in (env["base"] / "r.html").read_text()


def test_a_sweep_that_cannot_finish_fails_loudly_and_leaves_the_previous_results(env, capsys):
    if not parents(env["root"]):
        pytest.skip("needs the scheduled sweeps of the test above")
    before = env["prom"].read_text()
    n = len(parents(env["root"]))
    away = env["kb"].with_name("kb-away")
    env["kb"].rename(away)
    try:
        assert scheduled(env) == 2  # the dataset folder is gone: stopped before anything ran
    finally:
        away.rename(env["kb"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dataset folder not found" in err[0] and str(env["kb"]) in err[0]
    assert len(parents(env["root"])) == n and env["prom"].read_text() == before

    spec = env["base"] / "down.yaml"  # an endpoint that is down: the config fails
    spec.write_text(SPEC.format(dataset=env["kb"], strategy="http",
                                extra=", params: {url: 'http://127.0.0.1:9/retrieve', retries: 0, timeout: 2}"))
    rc = main(["sweep", str(spec), "--scheduled", "--schedule", "nightly", "--root", str(env["root"]),
               "--no-progress", "--output-dir", str(env["base"] / "executed"), "--prometheus", str(env["prom"]),
               "--report-dir", str(env["reports"])])
    assert rc == 1
    err = capsys.readouterr().err
    assert "did not finish" in err and "nothing compared or published" in err
    assert env["prom"].read_text() == before
    last = parents(env["root"])[-1]
    assert last.data.tags["sweep.ok"] == "false" and last.info.status == "FAILED"


@pytest.mark.parametrize("kwargs, message", [
    ({"metrics": ["NDCG@10"]}, "--metric: metric 'NDCG@10': write it as 'ndcg@10'"),
    ({"metrics": ["ndgc@10"]}, "--metric: metric 'ndgc@10': unknown name 'ndgc'"),
    ({"alpha": 1.0}, "--alpha 1.0: must lie strictly between 0 and 1"),
    ({"max_drop": 1.5, "relative": True}, "--max-drop 1.5: with --relative, a fraction below 1"),
])
def test_gate_settings_are_checked_before_the_spec_is_read(tmp_path, kwargs, message):
    """The checks of `lab gate` (lab.analysis.gate.gate_settings), before anything runs: the spec is not even read."""
    from lab.workbench.schedule import run_scheduled

    with pytest.raises(ConfigError) as err:
        run_scheduled(tmp_path / "no-such-spec.yaml", tracking_root=tmp_path / "mlruns", echo=None, **kwargs)
    assert str(err.value).startswith(message)
    assert not (tmp_path / "mlruns").exists()


def test_the_ci_schedule_and_the_cron_line_run_a_command_we_have():
    """.github/workflows/scheduled-sweep.yml: a `schedule:` trigger (and workflow_dispatch) that runs
    `lab sweep params/nightly.yaml --scheduled` with options `lab sweep` takes, keeps the store for the next run even
    when the job fails, and uploads the report; the README's cron line runs the same command."""
    import argparse
    import re

    import yaml

    from lab.cli.main import build_parser
    from lab.retrievers import available
    from lab.workbench.config import expand, load_spec

    doc = yaml.safe_load((REPO / ".github/workflows/scheduled-sweep.yml").read_text())
    on = doc.get("on", doc.get(True))
    assert on["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"] and "workflow_dispatch" in on
    steps = doc["jobs"]["sweep"]["steps"]
    script = " ".join(s["run"].replace("\\\n", " ") for s in steps if "run" in s)
    m = re.search(r"\.venv/bin/lab sweep (\S+) ([^\n]*)", script)
    assert m and m.group(1) == "params/nightly.yaml" and "--scheduled" in m.group(2)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    known = set(sub.choices["sweep"]._option_string_actions)
    assert set(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", m.group(2))) <= known
    assert any(s.get("uses", "").startswith("actions/cache/save@") and s.get("if") == "always()" for s in steps)
    assert any(s.get("uses", "").startswith("actions/cache/restore@") for s in steps)
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in steps)
    assert {c["strategy"] for c in expand(load_spec(REPO / "params" / "nightly.yaml"))} <= set(available())
    readme = (REPO / "README.md").read_text()
    cron = [ln for ln in readme.splitlines() if re.match(r"^\d+ \d+ \* \* \* ", ln)]
    assert cron and all("lab sweep params/nightly.yaml --scheduled" in ln for ln in cron)
