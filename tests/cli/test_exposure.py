"""Exposure: a non-loopback --host on `lab ui`, `lab notebook` and `python -m lab.experiment.serve` warns
naming what is exposed; serve refuses a non-loopback host without --token-env; JupyterLab's token reaches it by
environment, never on a command line (read from /proc/<pid>/cmdline of every process `lab notebook` starts)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright_chromium import free_port, server, wait_for

from lab.cli.main import main

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def process_group(pgid: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                pids.append(int(d.name))
    return pids


def test_lab_notebook_passes_the_token_by_environment_not_argv(tmp_path):
    port, token = free_port(), "tok-" + os.urandom(8).hex()
    env = {**ENV, "JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    cmd = [sys.executable, "-m", "lab", "notebook", "--port", str(port)]
    with server(cmd, env, tmp_path / "lab.log") as proc:
        wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", proc, timeout=180)
        group = process_group(proc.pid)
        cmdlines = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in group}
        assert any("jupyter" in c for c in cmdlines.values()), cmdlines
        assert not [c for c in cmdlines.values() if token in c], cmdlines
        with pytest.raises(urllib.error.HTTPError) as denied:  # and the token is needed
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents", timeout=30)
        assert denied.value.code == 403
    assert f"?token={token}" in (tmp_path / "lab.log").read_text()  # the URL printed for the user carries it


def test_ui_and_notebook_warn_on_a_non_loopback_host(monkeypatch, capsys, tmp_path):
    """The warning comes before the server starts (the server itself is not started here)."""
    started = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, env=None: started.append(cmd) or 0)
    assert main(["ui", "--host", "0.0.0.0", "--port", str(free_port()), "--root", str(tmp_path / "mlruns")]) == 0
    err = capsys.readouterr().err
    assert "warning: --host 0.0.0.0 is not a loopback address: the MLflow UI and its REST API" in err
    assert main(["notebook", "--host", "0.0.0.0", "--port", str(free_port())]) == 0
    err = capsys.readouterr().err
    assert "warning: --host 0.0.0.0 is not a loopback address: JupyterLab" in err and "run any code" in err
    assert main(["ui", "--port", str(free_port()), "--root", str(tmp_path / "mlruns")]) == 0
    assert "warning" not in capsys.readouterr().err and len(started) == 3


def test_serve_refuses_an_open_non_loopback_host_and_warns_with_a_token():
    base = [sys.executable, "-m", "lab.experiment.serve", "--dataset", str(REPO / "data" / "ord-qa"), "--host",
            "0.0.0.0"]
    t0 = time.time()
    refused = subprocess.run([*base, "--port", str(free_port())], env=ENV, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and time.time() - t0 < 60
    assert refused.stderr.startswith("error: --host 0.0.0.0 is not a loopback address and --token-env is not given")
    unset = subprocess.run([*base, "--token-env", "LAB_TEST_NO_SUCH_VAR"], env=ENV, capture_output=True, text=True,
                           timeout=120)
    assert unset.returncode == 2 and "LAB_TEST_NO_SUCH_VAR" in unset.stderr
    port = free_port()
    proc = subprocess.Popen([*base, "--port", str(port), "--token-env", "LAB_TEST_TOKEN"],
                            env={**ENV, "LAB_TEST_TOKEN": "s3cret"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()  # "serving bm25 over ..." once it listens
        assert "serving" in line, proc.stderr.read() if proc.poll() is not None else line
        req = urllib.request.Request(f"http://127.0.0.1:{port}/retrieve", data=b'{"query": "x", "k": 1}',
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(req, timeout=30)
        assert denied.value.code in (401, 403)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning: --host 0.0.0.0 is not a loopback address: the retrieval service (bm25" in err
