"""lab.tracking.claims on a real MLflow store in tmp_path: the create-then-check election between two claimants,
a FINISHED run standing for its key, stale claims (dead pid, old heartbeat) taken over, yielding and waiting."""
from __future__ import annotations

import subprocess
import threading
import time

import pytest
from conftest import blank_store

from lab.tracking import claims
from lab.tracking.lifecycle import TAG_ERROR
from lab.tracking.store import client, get_or_create_experiment


@pytest.fixture
def store(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    cl = client(root)
    return cl, get_or_create_experiment("claims", root, cl)


def claimant(cl, exp_id: str, key: str, **tag_overrides) -> str:
    """A claimant's run, created RUNNING with the claim tags (as lab.workbench.sweep creates it)."""
    tags = {**claims.claim_tags(key), **tag_overrides}
    return cl.create_run(exp_id, tags=tags).info.run_id


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_two_claimants_agree_the_earlier_one_works(store):
    cl, exp = store
    a = claimant(cl, exp, "k1")
    time.sleep(0.01)
    b = claimant(cl, exp, "k1")
    other = claimant(cl, exp, "k2")  # another key is no rival
    va, vb = claims.elect(cl, exp, "k1", a), claims.elect(cl, exp, "k1", b)
    assert va.won and not vb.won
    assert va.winner_run_id == vb.winner_run_id == a and vb.winner_status == "RUNNING"
    assert claims.elect(cl, exp, "k2", other).won
    # the loser yields: its run is ended and deleted, the winner is what remains
    claims.yield_to(cl, b, a)
    gone = cl.get_run(b)
    assert gone.info.lifecycle_stage == "deleted" and gone.info.status == "KILLED"
    assert gone.data.tags[claims.TAG_YIELDED_TO] == a
    assert [r.info.run_id for r in claims.claims_of(cl, exp, "k1")] == [a]


def test_claims_created_in_the_same_millisecond_still_elect_one(store):
    cl, exp = store
    now = int(time.time() * 1000)
    ids = [cl.create_run(exp, start_time=now, tags=claims.claim_tags("same")).info.run_id for _ in range(3)]
    verdicts = [claims.elect(cl, exp, "same", r) for r in ids]
    assert sum(v.won for v in verdicts) == 1
    assert {v.winner_run_id for v in verdicts} == {min(ids)}  # ties broken by run id


def test_a_finished_run_stands_for_its_key_even_when_newer(store):
    cl, exp = store
    old = claimant(cl, exp, "k")
    time.sleep(0.01)
    done = claimant(cl, exp, "k")
    cl.set_terminated(done, "FINISHED")
    late = claimant(cl, exp, "k")
    v_old, v_late = claims.elect(cl, exp, "k", old), claims.elect(cl, exp, "k", late)
    assert not v_old.won and not v_late.won
    assert v_old.winner_run_id == v_late.winner_run_id == done and v_late.winner_status == "FINISHED"


def test_a_failed_run_claims_nothing(store):
    cl, exp = store
    failed = claimant(cl, exp, "k")
    cl.set_terminated(failed, "FAILED")
    me = claimant(cl, exp, "k")
    assert claims.elect(cl, exp, "k", me).won


def test_a_claim_whose_process_is_gone_is_taken_over(store):
    cl, exp = store
    dead = claimant(cl, exp, "k", **{claims.TAG_PID: str(dead_pid())})
    time.sleep(0.01)
    me = claimant(cl, exp, "k")
    v = claims.elect(cl, exp, "k", me)
    assert v.won and v.taken_over == (dead,)
    r = cl.get_run(dead)
    assert r.info.status == "KILLED" and "claim taken over: its process" in r.data.tags[TAG_ERROR]


def test_a_claim_without_a_recent_heartbeat_is_taken_over_and_a_live_one_is_not(store):
    cl, exp = store
    elsewhere = {claims.TAG_HOST: "another-host", claims.TAG_PID: "1"}
    silent = claimant(cl, exp, "k", **elsewhere, **{claims.TAG_HEARTBEAT: str(int(time.time()) - 1000)})
    live = claimant(cl, exp, "k2", **elsewhere)
    time.sleep(0.01)
    me, me2 = claimant(cl, exp, "k"), claimant(cl, exp, "k2")
    assert claims.elect(cl, exp, "k", me).won
    assert "no heartbeat for" in cl.get_run(silent).data.tags[TAG_ERROR]
    v = claims.elect(cl, exp, "k2", me2)
    assert not v.won and v.winner_run_id == live and cl.get_run(live).info.status == "RUNNING"


def test_heartbeat_refreshes_the_tag_until_stopped(store):
    cl, exp = store
    run = claimant(cl, exp, "k", **{claims.TAG_HEARTBEAT: "0"})
    beat = claims.Heartbeat(cl, run, every=0.05).start()
    deadline = time.time() + 10
    while cl.get_run(run).data.tags[claims.TAG_HEARTBEAT] == "0" and time.time() < deadline:
        time.sleep(0.05)
    beat.stop()
    assert abs(int(cl.get_run(run).data.tags[claims.TAG_HEARTBEAT]) - time.time()) < 10


def test_wait_for_returns_when_the_winner_finishes_or_goes_stale(store):
    cl, exp = store
    winner = claimant(cl, exp, "k")
    threading.Timer(0.3, cl.set_terminated, (winner, "FINISHED")).start()
    assert claims.wait_for(cl, winner, poll=0.05) == ("FINISHED", "")
    dead = claimant(cl, exp, "k2", **{claims.TAG_PID: str(dead_pid())})
    status, why = claims.wait_for(cl, dead, poll=0.05)
    assert status == "STALE" and "is gone" in why and cl.get_run(dead).info.status == "KILLED"


@pytest.fixture(scope="module")
def http_store(tmp_path_factory, pytestconfig):
    """A real `mlflow server` on 127.0.0.1 (sqlite behind it): claims go through its REST API only."""
    import os
    import sys
    import urllib.request
    from pathlib import Path

    from mlflow import MlflowClient
    from playwright_chromium import free_port

    base = tmp_path_factory.mktemp("http")
    db = blank_store(base, pytestconfig) / "mlflow.db"
    port = free_port()
    exe = Path(sys.executable).with_name("mlflow")
    log = open(base / "server.log", "wb")
    proc = subprocess.Popen([str(exe), "server", "--backend-store-uri", f"sqlite:///{db}", "--default-artifact-root",
                             (base / "artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                break
        except OSError:
            assert proc.poll() is None and time.time() < deadline, (base / "server.log").read_text()[-2000:]
            time.sleep(0.5)
    cl = MlflowClient(tracking_uri=url)
    try:
        yield cl, cl.create_experiment("claims-http")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


def test_the_election_works_the_same_over_http(http_store):
    cl, exp = http_store
    a = claimant(cl, exp, "h")
    time.sleep(0.01)
    b = claimant(cl, exp, "h")
    va, vb = claims.elect(cl, exp, "h", a), claims.elect(cl, exp, "h", b)
    assert va.won and not vb.won and vb.winner_run_id == a
    claims.yield_to(cl, b, a)
    assert cl.get_run(b).info.lifecycle_stage == "deleted"
    cl.set_terminated(a, "FINISHED")
    assert claims.wait_for(cl, a, poll=0.05) == ("FINISHED", "")
    late = claimant(cl, exp, "h")
    v = claims.elect(cl, exp, "h", late)
    assert not v.won and v.winner_run_id == a and v.winner_status == "FINISHED"
    dead = claimant(cl, exp, "h2", **{claims.TAG_PID: str(dead_pid())})
    me = claimant(cl, exp, "h2")
    assert claims.elect(cl, exp, "h2", me).taken_over == (dead,)
