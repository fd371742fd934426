"""Storage faults, each through the real `lab` command on a real MLflow store: a corrupt (truncated)
mlflow.db gives one `error:` line naming the file for every command that opens it; a read-only store serves
`lab compare` and `lab report`; a full disk (a 2 MB tmpfs, root only) gives one line and leaves no 0-byte or half
file; a sweep whose artifacts cannot be stored marks each config FAILED and goes on (atomic writes themselves:
tests/core/test_atomic.py; the fault messages: tests/tracking/test_store.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import blank_store

from lab.cli.main import main
from lab.tracking.store import client, get_or_create_experiment

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "tests" / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
ENV = {**os.environ, "LAB_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
SPEC = ("notebook: {notebook}\ndataset: data/ord-qa\nexperiment: faults\n"
        "fixed: {{strategy: bm25, k: 10, max_queries: 3}}\ngrid:\n  params.k1: [0.9, 1.2]\n")


def lab(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *map(str, args)], env={**ENV, **(env or {})}, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def store_with_a_run(tmp_path, pytestconfig) -> Path:
    root = blank_store(tmp_path, pytestconfig)
    cl = client(root)
    exp = get_or_create_experiment("faults", root, cl)
    run = cl.create_run(exp, tags={"config_hash": "h1", "metrics_version": "2"}, run_name="only")
    cl.log_metric(run.info.run_id, "ndcg_at_10", 0.5)
    cl.set_terminated(run.info.run_id, "FINISHED")
    return root


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root (mount); not root here")


@contextmanager
def mounted(*args: str, target: Path):
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} failed here: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_a_truncated_store_gives_one_line_naming_it_for_every_command(tmp_path, pytestconfig):
    root = store_with_a_run(tmp_path, pytestconfig)
    db = root / "mlflow.db"
    os.truncate(db, db.stat().st_size // 2)
    spec = tmp_path / "faults.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK))
    for args in (["compare", "--experiment", "faults", "--root", root],
                 ["report", "--experiment", "faults", "--tracking-root", root, "--out", tmp_path / "r.html"],
                 ["sweep", spec, "--root", root, "--dry-run"],
                 ["sweep", spec, "--root", root, "--no-progress", "--output-dir", tmp_path / "out"]):
        proc = lab(*args)
        line = one_error_line(proc)
        assert proc.returncode == 1 and str(db) in line and "corrupt" in line and "move it aside" in line, line
    assert not (tmp_path / "r.html").exists()


def test_a_read_only_store_serves_compare_and_report(tmp_path, pytestconfig):
    need_root("a read-only bind mount")
    root = store_with_a_run(tmp_path, pytestconfig)
    with mounted("--bind", str(root), target=tmp_path / "ro") as ro:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("remounting read-only failed here")
        compare = lab("compare", "--experiment", "faults", "--root", ro)
        assert compare.returncode == 0 and "1 finished runs" in compare.stdout, compare.stderr[-2000:]
        report = lab("report", "--experiment", "faults", "--tracking-root", ro, "--out", tmp_path / "r.html")
        assert report.returncode == 0, report.stderr[-2000:]
        assert "not logged (the store is read-only)" in report.stdout and (tmp_path / "r.html").stat().st_size
        spec = tmp_path / "faults.yaml"
        spec.write_text(SPEC.format(notebook=NOTEBOOK))
        sweep = lab("sweep", spec, "--root", ro, "--no-progress", "--output-dir", tmp_path / "out")
        assert sweep.returncode != 0 and "read-only" in one_error_line(sweep)


def fill(folder: Path) -> None:
    """Take every free block of ``folder``'s file system (it may be full already)."""
    try:
        with open(folder / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass


def test_a_full_disk_gives_one_line_and_leaves_no_empty_file(tmp_path, pytestconfig):
    """`lab run` logging to a store on a full disk, its fallback (results/unlogged) on the same
    disk; and `--out` there."""
    need_root("a 2 MB tmpfs")
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=tmp_path / "full") as full:
        repo = full / "repo"
        (repo / "lab").mkdir(parents=True)
        (repo / "pyproject.toml").write_text("")
        (repo / "mlruns").mkdir()
        shutil.copy(blank_store(tmp_path / "blank", pytestconfig) / "mlflow.db", repo / "mlruns")
        fill(full)
        env = {"LAB_REPO_ROOT": str(repo), "LAB_CACHE_DIR": str(tmp_path / "cache")}
        base = ["run", "--dataset", REPO / "data" / "ord-qa", "--strategy", "bm25", "--max-queries", "3"]
        logged = lab(*base, "--mlflow", "--root", repo / "mlruns", env=env)
        line = one_error_line(logged)
        assert logged.returncode == 1 and "the disk holding the store is full" in line, line
        assert "no space left on the device" in line, line
        out = lab(*base, "--out", repo / "run.trec", env=env)
        line = one_error_line(out)
        assert out.returncode != 0 and f"{repo / 'run.trec'}: no space left" in line, line
        files = [p for p in full.rglob("*") if p.is_file() and p.name not in ("filler", "pyproject.toml")]
        assert not [p for p in files if p.stat().st_size == 0 and not p.name.endswith(".lock")], files
        assert not list((repo / "results").rglob("*.parquet")) and not (repo / "run.trec").exists()


def test_a_sweep_whose_artifacts_cannot_be_stored_fails_each_config_and_goes_on(tmp_path, pytestconfig):
    """The artifact folder on a full tmpfs (the store itself writable): every config is tried, each ends FAILED
    with the reason, the sweep ends with its summary; once there is room a rerun runs them."""
    need_root("a 2 MB tmpfs")
    root = blank_store(tmp_path, pytestconfig)
    spec = tmp_path / "faults.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK))
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=root / "artifacts") as arts:
        fill(arts)
        proc = lab("sweep", spec, "--root", root, "--no-progress", "--output-dir", tmp_path / "out")
        assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr[-3000:]
        assert "2 configs, 0 finished, 2 failed" in proc.stdout, proc.stdout[-2000:]
        (arts / "filler").unlink()
        again = lab("sweep", spec, "--root", root, "--no-progress", "--output-dir", tmp_path / "out")
        assert again.returncode == 0 and "2 configs, 2 finished" in again.stdout, again.stderr[-2000:]


@pytest.mark.parametrize("command", [["compare", "--experiment", "faults"],
                                     ["report", "--experiment", "faults", "--out", "r.html"]])
def test_a_tracking_root_that_does_not_exist_is_said_and_nothing_is_created(command, tmp_path, capsys):
    typo = tmp_path / "mlrnus"
    code = main([*[str(tmp_path / a) if a == "r.html" else a for a in command], "--tracking-root", str(typo)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"no MLflow store at {typo}" in err and "typo" in err
    assert list(tmp_path.iterdir()) == []


def leave_free(folder: Path, kib: int) -> None:
    """Take the free blocks of ``folder``'s file system but ``kib`` KiB."""
    st = os.statvfs(folder)
    with open(folder / "filler", "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - kib * 1024))


def test_a_disk_that_fills_during_lab_run_leaves_no_running_run_and_names_the_cause(tmp_path, pytestconfig):
    """The store on a 2 MB tmpfs with room to create the run but not for its artifacts: the run ends FAILED with
    the cause (never RUNNING), its partial artifacts are gone, the line says "the disk holding the store is full",
    and nothing is written into the checkout (LAB_REPO_ROOT)."""
    need_root("a 2 MB tmpfs")
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=tmp_path / "full") as full:
        store = full / "store"
        store.mkdir()
        shutil.copy(blank_store(tmp_path / "blank", pytestconfig) / "mlflow.db", store)
        leave_free(full, 110)
        repo = tmp_path / "checkout"
        (repo / "lab").mkdir(parents=True)
        (repo / "pyproject.toml").write_text("")
        proc = lab("run", "--dataset", REPO / "data" / "ord-qa", "--strategy", "bm25", "--max-queries", "3",
                   "--experiment", "E", "--tracking-root", store,
                   env={"LAB_REPO_ROOT": str(repo), "LAB_CACHE_DIR": str(tmp_path / "cache")})
        (full / "filler").unlink()
        runs = [r for e in client(store).search_experiments() for r in client(store).search_runs([e.experiment_id])]
        assert all(r.info.status == "FAILED" and r.data.tags["error"] == "the disk holding the store is full"
                   for r in runs), [(r.info.status, r.data.tags.get("error")) for r in runs]
        line = one_error_line(proc)
        assert proc.returncode == 1 and "the disk holding the store is full" in line, line
        assert not [p for p in (store / "artifacts").rglob("*") if p.is_file()]
        assert [p.name for p in repo.iterdir()] == ["lab", "pyproject.toml"] or not (repo / "results").exists()


def test_a_result_that_cannot_be_logged_is_saved_under_the_tracking_root_not_the_checkout(tmp_path, pytestconfig):
    """Artifacts cannot be stored (the store's artifacts folder on a full tmpfs): the result goes to
    <root>/unlogged/, the run ends FAILED with the cause, the checkout gets nothing."""
    need_root("a 2 MB tmpfs")
    root = blank_store(tmp_path, pytestconfig)
    repo = tmp_path / "checkout"
    (repo / "lab").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("")
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=root / "artifacts") as arts:
        fill(arts)
        proc = lab("run", "--dataset", REPO / "data" / "ord-qa", "--strategy", "bm25", "--max-queries", "3",
                   "--experiment", "E", "--tracking-root", root,
                   env={"LAB_REPO_ROOT": str(repo), "LAB_CACHE_DIR": str(tmp_path / "cache")})
    line = one_error_line(proc)
    saved = sorted((root / "unlogged" / "E").glob("*/result.json"))
    assert proc.returncode == 1 and len(saved) == 1 and f"saved to {saved[0].parent}" in line, line
    assert not (repo / "results").exists()
    (run,) = client(root).search_runs([client(root).get_experiment_by_name("E").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["error"], run.data.tags
