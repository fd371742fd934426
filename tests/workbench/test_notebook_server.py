"""lab.workbench.notebook_server: the JupyterLab command line, and notebook 03 run in JupyterLab in a real browser.

The browser test starts JupyterLab as `lab notebook` does (127.0.0.1, a token, the raglab kernel) on a copy of
notebooks/03 (so nothing is saved into the repository's notebook), sets a small slice in the parameters cell
(ORD-QA, bm25 and kg over bm25, 10 queries, a fresh MLflow store), runs all cells from the Run menu, and checks
that the leaderboard table and the three plots render, that no cell shows an error or a warning on stderr, and
that progress bars are widgets (no "IProgress not found"). It saves a screenshot (docs/img/jupyterlab.png when
RAGLAB_SCREENSHOTS_DIR=docs/img).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from playwright_chromium import chromium, free_port, screenshot, server, wait_for

from lab.cli.main import main
from lab.workbench.notebook_server import KERNEL_NAME, jupyterlab_command, jupyterlab_env, lab_url

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "03_strategy_comparison.ipynb"


def test_command_is_local_with_a_token_and_the_raglab_kernel(tmp_path):
    cmd = jupyterlab_command(tmp_path, port=8899)
    assert "--ServerApp.ip=127.0.0.1" in cmd and "--ServerApp.port=8899" in cmd and "--ServerApp.port_retries=0" in cmd
    assert f"--ServerApp.root_dir={tmp_path}" in cmd and not any("token" in a.lower() for a in cmd)  # not in argv
    assert jupyterlab_env("abc", {})["JUPYTER_TOKEN"] == "abc"
    assert f"--MultiKernelManager.default_kernel_name={KERNEL_NAME}" in cmd and "--no-browser" in cmd
    assert "--ServerApp.contents_manager_class=jupytext.AsyncTextFileContentsManager" in cmd
    assert lab_url("127.0.0.1", 8899, "abc", NOTEBOOK) == f"http://127.0.0.1:8899/lab/tree/{NOTEBOOK}?token=abc"


def test_cli_prints_the_command_and_refuses_a_busy_port(capsys):
    import socket

    assert main(["notebook", "--print", "--token", "t0"]) == 0
    out = capsys.readouterr().out
    assert str(REPO / "notebooks") in out and out.startswith("JUPYTER_TOKEN=t0 ") and "--IdentityProvider" not in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["notebook", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}" in err and "pass another" in err and "Traceback" not in err
    assert main(["notebook", "--port", "70000"]) == 2
    assert "between 1 and 65535" in capsys.readouterr().err


def test_raglab_kernel_and_notebook_metadata():
    from jupyter_client.kernelspec import KernelSpecManager

    assert KERNEL_NAME in KernelSpecManager().find_kernel_specs(), "run `make setup` (it installs the raglab kernel)"
    import json

    meta = json.loads((REPO / "notebooks" / NOTEBOOK).read_text())["metadata"]["kernelspec"]
    assert meta["name"] == KERNEL_NAME


def test_jupyterlab_keeps_the_ipynb_and_py_pair_in_sync(tmp_path):
    """JupyterLab as `lab notebook` starts it, on a copy of notebook 03's pair and notebooks/jupytext.toml, through
    its contents API (what the browser calls): saving the .ipynb rewrites the .py, and a .py edited on disk is what
    the notebook opens with, saved back into the .ipynb."""
    import json
    import urllib.request

    import jupytext

    folder = tmp_path / "notebooks"
    folder.mkdir()
    stem = Path(NOTEBOOK).stem
    for name in (NOTEBOOK, f"{stem}.py", "jupytext.toml"):
        shutil.copy(REPO / "notebooks" / name, folder / name)
    ipynb, py = folder / NOTEBOOK, folder / f"{stem}.py"
    port, token = free_port(), "raglab-test-token"

    def contents(method: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/{NOTEBOOK}?token={token}", method=method,
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    env = jupyterlab_env(token, {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")})
    with server(jupyterlab_command(folder, port=port), env, tmp_path / "jupyterlab.log") as proc:
        wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", proc, timeout=120)
        nb = contents("GET")["content"]
        assert [c["source"] for c in nb["cells"]] == [c.source for c in jupytext.read(ipynb).cells]
        # saved in JupyterLab: a default changed in the parameters cell
        nb["cells"][1]["source"] = nb["cells"][1]["source"].replace("max_queries = None ", "max_queries = 5    ")
        contents("PUT", {"type": "notebook", "format": "json", "content": nb})
        assert "max_queries = 5    " in py.read_text(encoding="utf-8")
        assert py.read_text(encoding="utf-8") == jupytext.writes(jupytext.read(ipynb), fmt="py:percent")
        # edited as a script (an editor, git): JupyterLab opens the notebook with the .py's cells
        time.sleep(1.1)  # a later modification time than the .ipynb's
        py.write_text(py.read_text(encoding="utf-8").replace("max_queries = 5    ", "max_queries = 7    "),
                      encoding="utf-8")
        nb = contents("GET")["content"]
        assert "max_queries = 7    " in nb["cells"][1]["source"]
        assert nb["cells"][1]["metadata"]["tags"] == ["parameters"]
        contents("PUT", {"type": "notebook", "format": "json", "content": nb})
    assert "max_queries = 7    " in jupytext.read(ipynb).cells[1].source
    assert py.read_text(encoding="utf-8") == jupytext.writes(jupytext.read(ipynb), fmt="py:percent")


def _parameters(store: Path) -> str:
    return "\n".join([
        'dataset = "data/ord-qa"',
        "strategy = None",
        'strategies = ["bm25", "kg"]',
        "params = {}",
        'strategy_params = {"kg": {"base": "bm25"}}',
        "chunking = None",
        'relevance = "auto"',
        "condensed = False",
        'split = "test"',
        "k = 100",
        'metric = "ndcg@10"',
        'report_metrics = ["recall@10", "mrr@10"]',
        "max_queries = 10",
        "seed = 0",
        "progress = True",
        f'tracking_root = "{store}"',
        'experiment = "jupyterlab-check"',
        "mlflow_run_id = None",
        "human_qrels = None",
    ])


def test_notebook_03_runs_all_cells_in_jupyterlab(tmp_path, blank_tracking_root):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK, folder / NOTEBOOK)
    port, token = free_port(), "raglab-test-token"
    env = jupyterlab_env(token, {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                                 "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
                                 "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings")})
    with server(jupyterlab_command(folder, port=port), env, tmp_path / "jupyterlab.log") as proc:
        wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", proc, timeout=120)
        with chromium(viewport=(1400, 1000)) as page:
            page.goto(lab_url("127.0.0.1", port, token, NOTEBOOK))
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            # the raglab kernel started (the notebook names it; "No Kernel" until then) and idle
            page.locator(".jp-NotebookPanel-toolbar", has_text="raglab (.venv)").wait_for(timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            params = page.locator(".jp-Notebook .jp-Cell").nth(1)
            assert "dataset =" in params.inner_text()  # the parameters cell
            params.locator(".cm-content").click()
            page.keyboard.press("Control+A")
            page.keyboard.insert_text(_parameters(blank_tracking_root))  # pasted: no auto-closed brackets
            prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt")
            stderr = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            for _ in range(3):  # Run > Run All Cells (again if a kernel still starting dropped the request)
                page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
                page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
                started = time.time() + 20
                while time.time() < started and prompts.first.inner_text().strip() == "[ ]:":
                    time.sleep(0.5)
                if prompts.first.inner_text().strip() != "[ ]:":
                    break
            deadline = time.time() + 300
            while True:
                texts = [t.strip() for t in prompts.all_inner_texts()]
                # JupyterLab renders only the cells near the view: an off-screen prompt reads "". Run All executes
                # in order, so the last code cell numbered [n] (n = code cells) with no "[*]:" means all ran.
                shown = [t for t in texts if t]
                if texts and shown and all(re.fullmatch(r"\[\d+\]:", t) for t in shown) \
                        and shown[-1] == texts[-1] == f"[{len(texts)}]:":
                    break
                failed = [t for t in stderr.all_inner_texts() if "Traceback" in t or "Error" in t]
                assert not failed, failed[0][-3000:]
                assert time.time() < deadline, f"cells still running after 300 s: {texts}"
                time.sleep(1)
            notebook_text = page.locator(".jp-Notebook").inner_text()
            stderr = stderr.all_inner_texts()
            images = page.locator(".jp-OutputArea-output img")
            sizes = images.evaluate_all("els => els.map(e => [e.naturalWidth, e.naturalHeight])")
            widgets = page.locator(".jp-OutputArea-output .jupyter-widgets").count()
            page.locator(".jp-OutputArea-output table.dataframe").first.evaluate(
                "e => e.closest('.jp-Cell').scrollIntoView({block: 'start'})")  # leaderboard, then the plots
            time.sleep(0.5)
            # read once in view: JupyterLab renders only the cells near the view (the notebook now runs on past
            # the leaderboard: trust, overlap and per-tier cells)
            table_text = page.locator(".jp-OutputArea-output table.dataframe").all_inner_texts()
            shot = screenshot(page, tmp_path, "jupyterlab.png")
    assert not [s for s in stderr if re.search(r"Traceback|Error|Warning", s)], stderr
    assert "IProgress not found" not in notebook_text
    assert table_text and "bm25" in table_text[0] and "kg" in table_text[0] and "p_value" in table_text[0], table_text
    assert len(sizes) >= 3 and all(w > 100 and h > 100 for w, h in sizes), sizes  # leaderboard, latency, per query
    assert widgets >= 1, "progress bars did not render as widgets"
    assert shot.stat().st_size > 20_000

