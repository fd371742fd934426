"""Sweeps on real Ray clusters, bound to 127.0.0.1 (left to itself Ray takes the machine's network address, and only
loopback traffic is allowed in CI): two nodes (configs land on both; notebook and dataset reach the workers through
the job's runtime_env, not a shared path), a worker killed mid-sweep, and `lab sweep --ray-address` from the command
line to a cluster started by `ray start --head`, logging over HTTP to the team's MLflow server (PostgreSQL behind
`mlflow server --serve-artifacts`) with its artifacts read back through it. Token authentication is on everywhere,
as Ray ships it: each test makes a token in a HOME of its own (``ray get-auth-token --generate``, into
~/.ray/auth_token), where the cluster and `lab sweep` find it; no Ray variable is set for the driver.

Every cluster and every driver runs in a process of its own, never in this one: Ray keeps process-wide state (the
node it started or joined, the auth mode it first read, RAY_* variables set by raglab's driver code), and in the
full suite an in-process cluster's driver, started after ~1,500 other tests, waited on its GCS without end."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import blank_store

# Under a loaded 2-core CI machine one node takes up to a minute to start and a config ~30 s; a cluster that cannot
# start or a driver that cannot reach its cluster (it retries without end) fails its test instead of holding the run.
pytestmark = pytest.mark.timeout(900, method="signal")

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'raglab[ray]'")

from lab.tracking.lifecycle import TAG_ERROR  # noqa: E402
from lab.tracking.server import start_server  # noqa: E402
from lab.tracking.store import TAG_ROLE, client  # noqa: E402
from lab.workbench.sweep import NOTEBOOK_ARTIFACT_DIR  # noqa: E402
from lab.workbench.sweep.ray_executor import TAG_RAY_NODE, TAG_RAY_NODE_IP, TAG_STAGED  # noqa: E402

NOTEBOOK = Path(__file__).parents[2] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
REPO = Path(__file__).resolve().parents[3]
RAY_BIN = str(Path(sys.executable).parent / "ray")
TWO_NODES = REPO / "scripts" / "ray_two_nodes.py"


def _spec(folder: Path, experiment: str, k1s: str) -> Path:
    spec = folder / f"{experiment}.yaml"
    spec.write_text(f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: {experiment}\n"
                    f"fixed: {{strategy: bm25, k: 10, max_queries: 5}}\ngrid:\n  params.k1: {k1s}\n")
    return spec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _home_with_token(home: Path) -> dict[str, str]:
    """A user's environment with HOME at ``home``, no RAY_* variable, and a Ray token in ``home/.ray/auth_token``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    subprocess.run([RAY_BIN, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=300)
    assert (home / ".ray" / "auth_token").is_file()
    return env


def _kill_ray_processes(marker: str) -> None:
    """End the Ray processes left under a cluster's own temp dir (never `ray stop`: it ends every Ray here)."""
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in (p.info["cmdline"] or [])):
            try:
                p.kill()
            except psutil.Error:
                pass


def _lab_sweep(spec: Path, address: str, root: Path, out: Path, jobs: int = 2) -> list[str]:
    """The `lab sweep` command line a user types for a cluster at ``address``."""
    return [sys.executable, "-m", "lab", "sweep", str(spec), "--executor", "ray", "--jobs", str(jobs),
            "--ray-address", address, "--tracking-root", str(root), "--output-dir", str(out), "--no-progress"]


def _children(root: Path, experiment: str) -> list:
    cl = client(root)
    exp = cl.get_experiment_by_name(experiment)
    return [r for r in (cl.search_runs([exp.experiment_id]) if exp else []) if r.data.tags.get(TAG_ROLE) != "parent"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head and a second node on 127.0.0.1, one CPU each (two one-CPU tasks at once must use both), started by
    scripts/ray_two_nodes.py in a process of its own with token authentication on; yields its address, node
    ids and the user's environment (HOME holding the token)."""
    env = _home_with_token(tmp_path_factory.mktemp("home"))
    err = tmp_path_factory.mktemp("cluster") / "stderr.txt"
    with err.open("w") as err_f:
        proc = subprocess.Popen([sys.executable, str(TWO_NODES), "--nodes", "2", "--num-cpus", "1"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_f, text=True)
    info: dict = {}
    try:
        line = proc.stdout.readline()  # the module's timeout bounds a cluster that never starts
        assert line, f"the cluster did not start (exit {proc.wait()}): {err.read_text()[-3000:]}"
        info = json.loads(line)
        yield {**info, "env": env}
    finally:
        proc.stdin.close()  # the script shuts its nodes down when its stdin closes
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        if info.get("temp_dir"):
            _kill_ray_processes(info["temp_dir"])
            shutil.rmtree(info["temp_dir"], ignore_errors=True)


def test_configs_land_on_both_nodes_and_get_notebook_and_data_through_runtime_env(two_nodes, tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    spec = _spec(tmp_path, "two-nodes", "[0.9, 1.2]")
    proc = subprocess.run(_lab_sweep(spec, two_nodes["address"], root, tmp_path / "out"),
                          env=two_nodes["env"], capture_output=True, text=True, timeout=800, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = _children(root, "two-nodes")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags[TAG_RAY_NODE] for r in runs} == set(two_nodes["node_ids"])  # one config on each node
    assert {r.data.tags[TAG_RAY_NODE_IP] for r in runs} == {"127.0.0.1"}
    assert all(r.data.tags[TAG_STAGED] == "runtime_env" for r in runs)
    # the executed notebook came back as an artifact, and it read the dataset from the job's working_dir copy
    got = Path(client(root).download_artifacts(runs[0].info.run_id, NOTEBOOK_ARTIFACT_DIR, str(tmp_path / "dl")))
    text = next(got.glob("*.ipynb")).read_text()
    assert "runtime_resources" in text and str(REPO / "data" / "ord-qa") not in text


def test_a_worker_killed_mid_sweep_fails_its_config_and_a_rerun_resumes(two_nodes, tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    spec = _spec(tmp_path, "killed", "[0.9, 1.2]")
    cmd = _lab_sweep(spec, two_nodes["address"], root, tmp_path / "out", jobs=1)
    sweep = subprocess.Popen(cmd, env=two_nodes["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=REPO)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.append(sweep.stdout.read()), daemon=True)
    reader.start()
    killed = None
    while killed is None and sweep.poll() is None:
        running = [r for r in _children(root, "killed") if r.info.status == "RUNNING" and "sweep.pid" in r.data.tags]
        if running:
            killed = running[0]
            os.kill(int(killed.data.tags["sweep.pid"]), signal.SIGKILL)  # the Ray worker running that config
        time.sleep(0.2)
    sweep.wait(timeout=800)
    reader.join(timeout=60)
    first = "".join(output)
    assert killed is not None, first[-3000:]
    assert sweep.returncode == 1, first[-3000:]  # one config failed
    assert sorted(r.info.status for r in _children(root, "killed")) == ["FAILED", "FINISHED"], first[-3000:]
    dead = client(root).get_run(killed.info.run_id)
    assert dead.info.status == "FAILED" and "Ray worker died" in dead.data.tags[TAG_ERROR]
    again = subprocess.run(cmd, env=two_nodes["env"], capture_output=True, text=True, timeout=800, cwd=REPO)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "1 finished, 0 failed, 1 skipped" in again.stdout, again.stdout[-3000:]
    finished = [r for r in _children(root, "killed") if r.info.status == "FINISHED"]
    assert len(finished) == 2 and len({r.data.tags["config_hash"] for r in finished}) == 2  # none ran twice


def test_lab_sweep_ray_address_to_a_ray_start_head_cluster_with_token_auth_into_a_postgres_server(tmp_path):
    """As a user runs it: a token (`ray get-auth-token --generate`, in ~/.ray/auth_token), `ray start --head`
    (token authentication on: it finds the token), the team's MLflow server (PostgreSQL behind `mlflow server
    --serve-artifacts`, what `lab server` starts), then `lab sweep --executor ray --ray-address ... --tracking-root
    http://...` with no Ray variable set by hand: raglab turns token auth on for the driver and keeps it on
    127.0.0.1; the workers log to the server over HTTP and their executed notebooks are read back through it."""
    pytest.importorskip("psycopg2", reason="the postgres extra: pip install 'raglab[postgres]'")
    spec = _spec(tmp_path, "ray-start", "[0.9, 1.2]")
    lab_env = _home_with_token(tmp_path / "home")
    # the test's own loopback-only setting for `ray start` (on a real network the node takes its network address)
    ray_env = {**lab_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    port, temp = _free_port(), tempfile.mkdtemp(prefix="lab-ray-")  # short: Ray's socket paths live under it
    folder = Path(tempfile.mkdtemp(prefix="lab-pg-"))  # pytest's tmp_path is private to root: the database's
    folder.chmod(0o755)  # user (postgres, when the tests run as root) must reach it
    try:
        with start_server(folder, port=_free_port(), db_port=_free_port(), workers=1) as server:
            start = subprocess.run([RAY_BIN, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                                    "--num-cpus", "2", "--include-dashboard", "false", "--temp-dir", temp,
                                    "--disable-usage-stats"], env=ray_env, capture_output=True, text=True,
                                   timeout=300)
            assert start.returncode == 0, start.stdout + start.stderr
            proc = subprocess.run(_lab_sweep(spec, f"127.0.0.1:{port}", server.url, tmp_path / "out"),
                                  env=lab_env, capture_output=True, text=True, timeout=800, cwd=tmp_path)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            runs = _children(server.url, "ray-start")
            assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
            assert all(r.data.tags[TAG_RAY_NODE_IP] == "127.0.0.1" and r.data.tags[TAG_STAGED] == "runtime_env"
                       for r in runs)
            for r in runs:  # proxied by the server, not written beside the driver or the worker
                assert r.info.artifact_uri.startswith("mlflow-artifacts:"), r.info.artifact_uri
                got = client(server.url).download_artifacts(r.info.run_id, NOTEBOOK_ARTIFACT_DIR,
                                                            str(tmp_path / "dl" / r.info.run_id))
                assert any(p.suffix == ".ipynb" for p in Path(got).iterdir())
            assert list((folder / "artifacts").rglob("*.ipynb"))
    finally:
        _kill_ray_processes(temp)
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_staging_copies_notebook_and_each_dataset_once_with_paths_relative_to_the_working_dir(tmp_path):
    from lab.workbench.sweep import SweepTask
    from lab.workbench.sweep.ray_executor import stage_for_ray

    data = REPO / "data" / "ord-qa"
    tasks = [SweepTask(index=i, config={}, config_hash=f"h{i}", label="l", run_name="r", notebook=str(NOTEBOOK),
                       inject={"dataset": str(data), "experiment": "x"}, notebook_rel="nb", output_path="o",
                       tracking_uri="file:///nowhere", experiment_id="0", parent_run_id="p", sweep_name="s")
             for i in range(3)]
    staged = stage_for_ray(tasks, tmp_path)
    assert {t.notebook for t in staged} == {"notebook/00_tiny_experiment.ipynb"}
    assert {t.inject["dataset"] for t in staged} == {"data/00_ord-qa"}
    assert all(t.staged and t.inject["experiment"] == "x" for t in staged)
    assert (tmp_path / "notebook" / "00_tiny_experiment.ipynb").read_bytes() == NOTEBOOK.read_bytes()
    assert sorted(p.name for p in (tmp_path / "data" / "00_ord-qa").iterdir()) == sorted(p.name for p in data.iterdir())
    assert tasks[0].notebook == str(NOTEBOOK) and not tasks[0].staged  # the caller's tasks are left as they were


def test_driver_settings_for_a_loopback_cluster_with_a_token(tmp_path, monkeypatch):
    """What `lab sweep --ray-address 127.0.0.1:PORT` sets so the user sets no Ray variable by hand."""
    from lab.workbench.sweep.ray_executor import import_ray, ray_init_args

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.setenv(var, "")  # recorded, so the teardown restores what was there (the code sets it directly)
        monkeypatch.delenv(var)
    import_ray("127.0.0.1:6379")  # no token on this machine: auth left as Ray decides
    assert "RAY_AUTH_MODE" not in os.environ
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    import_ray("127.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert ray_init_args("127.0.0.1:6379") == {"address": "127.0.0.1:6379", "_node_ip_address": "127.0.0.1"}
    assert ray_init_args("head.example:6379") == {"address": "head.example:6379"}
    assert ray_init_args(None) == {"address": "local", "num_cpus": 2, "include_dashboard": False}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's own choice is kept
    import_ray("127.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
