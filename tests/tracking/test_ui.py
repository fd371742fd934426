"""lab.tracking.ui: links that land on an experiment's runs table; and, in a real browser, `lab ui` after a sweep.

The browser test runs a real two-config sweep of notebooks/03 on ORD-QA (bm25, and kg over bm25; 10 queries),
starts `lab ui` on a free port, follows the link it prints and checks that the runs table shows the sweep's run
with both configs under it (expanded), each with its strategy and its ndcg_at_10 as logged, in "Model training"
mode. It saves a screenshot (docs/img/mlflow_runs.png when RAGLAB_SCREENSHOTS_DIR=docs/img).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from playwright_chromium import chromium, free_port, screenshot, server, wait_for

from lab.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, client, get_or_create_experiment
from lab.tracking.ui import VIEW_KEY, VIEW_TAG_PREFIX, base_url, column_id, runs_url, set_runs_view, view_columns

REPO = Path(__file__).resolve().parents[2]


def test_column_ids_use_mlflow_names():
    assert column_id("params", "strategy") == "params.`strategy`"
    assert view_columns(["strategy", "params.alpha"], ["ndcg@10", "ndcg@10", "latency_p50_ms"]) == [
        "params.`strategy`", "params.`params.alpha`", "metrics.`ndcg_at_10`", "metrics.`latency_p50_ms`"]
    with pytest.raises(ValueError, match="column kind"):
        column_id("metric", "x")


def test_experiments_are_tagged_and_views_widen(blank_tracking_root):
    root = blank_tracking_root
    cl = client(root)
    exp = get_or_create_experiment("kind", root, cl)
    assert cl.get_experiment(exp).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    old = cl.create_experiment("made-elsewhere")  # an experiment raglab did not create gets the tag when reused
    assert EXPERIMENT_KIND_TAG not in cl.get_experiment(old).tags
    assert get_or_create_experiment("made-elsewhere", root, cl) == old
    assert cl.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND

    assert runs_url(exp, cl=cl) == f"http://127.0.0.1:5000/#/experiments/{exp}/runs?workflowType=machine_learning"
    set_runs_view(cl, exp, ["strategy"], ["ndcg@10"])
    cols = set_runs_view(cl, exp, ["strategy", "params.alpha"], ["recall@10"])
    assert cols == ["params.`strategy`", "metrics.`ndcg_at_10`", "params.`params.alpha`", "metrics.`recall_at_10`"]
    state = json.loads(cl.get_experiment(exp).tags[VIEW_TAG_PREFIX + VIEW_KEY])
    assert state == {"selectedColumns": cols, "columnOrder": [cols[1], cols[3], cols[0], cols[2]]}  # metrics first
    assert runs_url(exp, "::1", 5001, cl) == (f"http://[::1]:5001/#/experiments/{exp}/runs?workflowType="
                                               f"machine_learning&viewStateShareKey={VIEW_KEY}")
    assert base_url() == "http://127.0.0.1:5000"


def test_lab_ui_lists_each_experiment_and_refuses_an_unknown_one(blank_tracking_root, capsys):
    from lab.cli.main import main
    from lab.tracking.ui import ui_links

    cl = client(blank_tracking_root)
    a = get_or_create_experiment("a", blank_tracking_root, cl)
    cl.create_run(a)
    links = ui_links(blank_tracking_root, port=5099)
    assert links == [f"  a: http://127.0.0.1:5099/#/experiments/{a}/runs?workflowType=machine_learning"]
    assert main(["ui", "--root", str(blank_tracking_root), "--experiment", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--experiment 'nope'" in err and "it has:" in err and "Traceback" not in err


def test_make_demo_prints_the_runs_link(blank_tracking_root):
    """`make demo` ends with ui_hint: the link is the runs view the browser test below follows."""
    from lab.workbench.demo import ui_hint

    cl = client(blank_tracking_root)
    exp = get_or_create_experiment("strategy_comparison", blank_tracking_root, cl)
    set_runs_view(cl, exp, ["strategy"])
    hint = ui_hint(blank_tracking_root, exp)
    assert hint.endswith(f"then open http://127.0.0.1:5000/#/experiments/{exp}/runs?workflowType=machine_learning"
                         f"&viewStateShareKey={VIEW_KEY}")
    assert "mlflow ui --backend-store-uri sqlite:///" in hint


SPEC = """\
notebook: {notebook}
dataset: data/ord-qa
experiment: ui-check
seed: 0
fixed: {{split: test, k: 100, max_queries: 10}}
zip:
  strategy: [bm25, kg]
  params: [{{}}, {{base: bm25}}]
"""


def test_lab_ui_link_lands_on_the_runs_table_with_strategy_and_ndcg(tmp_path, blank_tracking_root):
    from lab.workbench.sweep import run_sweep

    root = blank_tracking_root
    spec = tmp_path / "ui-check.yaml"
    spec.write_text(SPEC.format(notebook=REPO / "notebooks" / "03_strategy_comparison.ipynb"))
    report = run_sweep(spec, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None)
    assert report.ok, report.table()
    assert {"summary/leaderboard.png", "summary/quality_vs_latency.png", "summary/report.html"} <= set(
        report.summary_artifacts), report.summary_error
    cl = client(root)
    runs = {o.run_id: cl.get_run(o.run_id) for o in report.outcomes}
    parent_files = {a.path for a in cl.list_artifacts(report.parent_run_id, "summary")}
    assert {"summary/leaderboard.png", "summary/report.html"} <= parent_files

    port = free_port()
    cmd = [sys.executable, "-m", "lab", "ui", "--root", str(root), "--port", str(port)]
    log = tmp_path / "ui.log"
    with server(cmd, dict(os.environ), log) as proc:
        deadline = time.time() + 60
        while "ui-check: http" not in log.read_text() and time.time() < deadline:
            time.sleep(0.2)
        m = re.search(r"ui-check: (http\S+)", log.read_text())
        assert m, log.read_text()
        link = m.group(1)
        assert link == f"http://127.0.0.1:{port}/#/experiments/{report.experiment_id}/runs?workflowType=" \
                       f"machine_learning&viewStateShareKey={VIEW_KEY}"
        wait_for(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search", proc, timeout=240,
                 data={"max_results": 5})
        with chromium(viewport=(1400, 700)) as page:
            page.goto(link)
            for run in runs.values():  # child runs are shown (their sweep's row expanded)
                page.get_by_text(run.info.run_name, exact=True).first.wait_for(timeout=120_000)
            close = page.locator("button[data-component-id='mlflow.assistant.chat_panel.close']")
            if close.count():  # the assistant panel opens by itself on a first visit; a user would close it
                close.first.click()
            headers = " ".join(page.locator(".ag-header-cell").all_inner_texts())
            rows: dict[str, str] = {}
            for rid, text in page.locator(".ag-row").evaluate_all(
                    "els => els.map(e => [e.getAttribute('row-id'), e.innerText])"):
                rows[rid] = rows.get(rid, "") + "\n" + text
            body = page.locator("body").inner_text()
            time.sleep(1)
            shot = screenshot(page, tmp_path, "mlflow_runs.png")
            assert not page.errors, page.errors
    assert "ndcg_at_10" in headers and "strategy" in headers and "params.base" in headers, headers
    assert not re.search(r"\bparams\b(?!\.)", headers.replace("Parameters", "")), headers  # no empty "{}" column
    assert report.parent_run_id in rows and "sweep ui-check" in rows[report.parent_run_id]
    for rid, run in runs.items():
        text = rows.get(rid, "")
        cells = [c.strip() for c in text.split("\n") if c.strip()]
        assert run.info.run_name in cells and run.data.params["strategy"] in cells, (run.info.run_name, cells)
        assert repr(run.data.metrics["ndcg_at_10"])[:8] in text, (run.data.metrics["ndcg_at_10"], cells)
    assert "Observability" not in body and "Model registry" in body  # "Model training" mode, not GenAI
    assert shot.stat().st_size > 20_000


@pytest.mark.slow
def test_ui_serves_the_store(store):
    """Starts the real MLflow UI (30-75 s to answer on a loaded 2-core machine) and lists the experiments."""
    import json
    import os
    import socket
    import subprocess
    import time
    import urllib.request

    from lab.tracking.store import get_or_create_experiment
    from lab.tracking.ui import UI_ENV, ui_command

    get_or_create_experiment("ui-check", store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(ui_command(store, port=port), env={**os.environ, **UI_ENV}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, body = time.time() + 180, None
        while time.time() < deadline and body is None:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
                                             data=b'{"max_results": 10}', headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    body = json.load(r)
            except OSError:
                assert proc.poll() is None, "mlflow ui exited"
                time.sleep(0.5)
        assert body and "ui-check" in {e["name"] for e in body["experiments"]}
        children = subprocess.run(["ps", "-o", "args=", "--ppid", str(proc.pid)], capture_output=True, text=True).stdout
        assert "_job_runner" not in children  # no huey job runner beside the server
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
