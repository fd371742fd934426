"""One shared MLflow server: a real PostgreSQL (Debian's, started here into a temporary folder as the non-root
``postgres`` user when the tests run as root) behind a real ``mlflow server --serve-artifacts``
(lab.tracking.server, what `lab server` starts). A sweep and `lab compare` with ``--tracking-root http://...`` and with
MLFLOW_TRACKING_URI; two sweeps from two processes into the one server."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lab.tracking.server import postgres_bin, run_as_database_user, start_server
from lab.tracking.store import TAG_ROLE, client
from lab.workbench.sweep import NOTEBOOK_ARTIFACT_DIR, TAG_HASH, run_sweep

pytest.importorskip("psycopg2", reason="the postgres extra: pip install 'raglab[postgres]'")

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
REPO = Path(__file__).resolve().parents[2]
SPEC = ("notebook: {nb}\ndataset: data/ord-qa\nexperiment: {exp}\nfixed: {{strategy: bm25, k: 10, max_queries: 5}}\n"
        "grid:\n  params.k1: {grid}\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_server():
    """PostgreSQL + mlflow server in a temporary folder the ``postgres`` user can reach; stopped after the module."""
    folder = Path(tempfile.mkdtemp(prefix="lab-pg-"))
    folder.chmod(0o755)
    try:
        server = start_server(folder, port=_free_port(), db_port=_free_port(), workers=1)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _children(url: str, experiment: str) -> list:
    cl = client(url)
    exp = cl.get_experiment_by_name(experiment)
    return [r for r in cl.search_runs([exp.experiment_id], max_results=1000) if r.data.tags.get(TAG_ROLE) != "parent"]


def test_postgres_server_takes_a_sweep_its_artifacts_and_lab_compare(postgres_server, tmp_path):
    url = postgres_server.url
    assert postgres_server.backend_uri.startswith("postgresql+psycopg2://")
    spec = tmp_path / "shared.yaml"
    spec.write_text(SPEC.format(nb=NOTEBOOK, exp="shared", grid="[0.9, 1.2]"))
    rep = run_sweep(spec, tracking_root=url, output_dir=tmp_path / "out", progress=False, echo=None)
    assert rep.ok, rep.table().to_string()
    cl = client(url)
    for o in rep.outcomes:
        run = cl.get_run(o.run_id)
        assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri  # proxied by the server
        got = cl.download_artifacts(o.run_id, NOTEBOOK_ARTIFACT_DIR, str(tmp_path / "dl" / o.run_id))
        assert any(p.suffix == ".ipynb" for p in Path(got).iterdir())
    # no artifact written beside the driver: they all went through the server into its folder
    assert list((postgres_server.folder / "artifacts").rglob("*.ipynb"))
    env = {**os.environ, "MLFLOW_TRACKING_URI": url, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "lab", "compare", "--experiment", "shared", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {r["run_id"] for r in json.loads(proc.stdout)["rows"]} == {o.run_id for o in rep.outcomes}


def test_postgres_two_sweeps_from_two_processes_run_each_config_once(postgres_server, tmp_path):
    """Two machines, simulated: two `lab sweep` processes, each with its own output folder (so no shared lock file),
    on the same spec into the one server: every config runs once, and `lab compare` sees them all."""
    spec = tmp_path / "two.yaml"
    spec.write_text(SPEC.format(nb=NOTEBOOK, exp="two-machines", grid="[0.6, 0.9, 1.2, 1.5]"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "lab", "sweep", str(spec), "--tracking-root", postgres_server.url,
                               "--output-dir", str(tmp_path / f"out{i}"), "--no-progress"], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    finished = [r for r in _children(postgres_server.url, "two-machines") if r.info.status == "FINISHED"]
    hashes = [r.data.tags[TAG_HASH] for r in finished]
    assert len(hashes) == 4 and len(set(hashes)) == 4, hashes
    proc = subprocess.run([sys.executable, "-m", "lab", "compare", "--experiment", "two-machines", "--json",
                           "--tracking-root", postgres_server.url], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["rows"]) == 4, proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the database then runs as the postgres user")
def test_lab_server_refuses_a_folder_the_postgres_user_cannot_reach(tmp_path):
    """pytest's tmp folders are private to root: `lab server` says so in one line, exit 2, no server started."""
    proc = subprocess.run([sys.executable, "-m", "lab", "server", "--folder", str(tmp_path / "srv"),
                           "--port", str(_free_port()), "--db-port", str(_free_port())],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "postgres user cannot reach" in proc.stderr and not (tmp_path / "srv" / "pgdata" / "PG_VERSION").exists()


@pytest.fixture(scope="module")
def server_folder():
    """A folder the ``postgres`` user can reach, its cluster initialised by the first `lab server` started in it."""
    folder = Path(tempfile.mkdtemp(prefix="lab-srv-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _lab_server(folder: Path) -> tuple[subprocess.Popen, int, int]:
    """`lab server` in ``folder``, returned once it says it serves."""
    port, db_port = _free_port(), _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lab", "server", "--folder", str(folder), "--port", str(port),
                             "--db-port", str(db_port), "--workers", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    assert line.startswith("MLflow server: http://"), line + proc.stderr.read()[-3000:]
    return proc, port, db_port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_lab_server_stops_postgres_and_mlflow_on_a_signal(sig, server_folder):
    proc, port, db_port = _lab_server(server_folder)
    assert _listening(port) and _listening(db_port)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and f"{sig.name}: stopping" in out, out + err[-3000:]
    assert not _listening(port) and not _listening(db_port)
    assert not (server_folder / "pgdata" / "postmaster.pid").exists()


def test_lab_server_reports_a_database_that_dies_and_stops_the_mlflow_server(server_folder):
    proc, port, db_port = _lab_server(server_folder)
    subprocess.run([*run_as_database_user(), postgres_bin("pg_ctl"), "-D", str(server_folder / "pgdata"), "-m",
                    "immediate", "stop"], check=True, capture_output=True, timeout=120)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "error: PostgreSQL stopped accepting connections" in err, out + err[-3000:]
    assert not _listening(port) and not _listening(db_port)


def test_a_sweep_whose_server_stops_ends_within_two_minutes_and_the_rerun_redoes_the_rest(server_folder, tmp_path):
    """The team's server stops (as on Ctrl-C of `lab server`) once the first config finished: the sweep ends
    within 2 minutes with one line naming the server, what it was doing and what to do; with the server back,
    the same command keeps the finished config and runs exactly the others, each once."""
    port, db_port = _free_port(), _free_port()
    server = start_server(server_folder, port=port, db_port=db_port, workers=1)
    spec = tmp_path / "away.yaml"
    spec.write_text(SPEC.format(nb=NOTEBOOK, exp="server-away", grid="[0.6, 1.2]"))
    cmd = [sys.executable, "-m", "lab", "sweep", str(spec), "--tracking-root", server.url, "--output-dir",
           str(tmp_path / "out"), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAB_REPO_ROOT": str(REPO)}
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 600
        while not (client(server.url).get_experiment_by_name("server-away") and [
                r for r in _children(server.url, "server-away") if r.info.status == "FINISHED"]):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(1)
        finished = {r.info.run_id for r in _children(server.url, "server-away") if r.info.status == "FINISHED"}
        server.stop()
        stopped = time.monotonic()
        out, err = proc.communicate(timeout=300)
        took = time.monotonic() - stopped
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and took < 120 and "Traceback" not in err, (took, err[-3000:])
        assert len(errors) == 1 and f"tracking server {server.url} does not answer (while " in errors[0], errors
        assert "rerun the same command" in errors[0]
        server = start_server(server_folder, port=port, db_port=db_port, workers=1)
        again = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
        done = [r for r in _children(server.url, "server-away") if r.info.status == "FINISHED"]
        assert len(done) == 2 and len({r.data.tags[TAG_HASH] for r in done}) == 2
        assert finished <= {r.info.run_id for r in done}  # what finished before the server went away is kept
    finally:
        proc.kill()
        server.stop()
