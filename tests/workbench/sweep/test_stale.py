"""lab.workbench.sweep.stale: runs a dead sweep left RUNNING are marked KILLED (children with the reason, so their
configs run again); the lock refuses a second live sweep of the same name; an unfinished parent is found again."""
from __future__ import annotations

import pytest
from conftest import blank_store

from lab.core.errors import ConfigError
from lab.tracking.lifecycle import TAG_ERROR
from lab.tracking.store import TAG_ROLE, client
from lab.workbench.sweep import TAG_NAME, TAG_SPEC_HASH, mark_stale
from lab.workbench.sweep.stale import reusable_parent, sweep_lock


@pytest.fixture
def store(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    cl = client(root)
    return root, cl, cl.create_experiment("stale")


def test_mark_stale_ends_this_sweeps_running_runs_only(store):
    _, cl, exp = store
    child = cl.create_run(exp, tags={TAG_NAME: "grid"}).info.run_id
    parent = cl.create_run(exp, tags={TAG_NAME: "grid", TAG_ROLE: "parent", TAG_SPEC_HASH: "s1"}).info.run_id
    other = cl.create_run(exp, tags={TAG_NAME: "another"}).info.run_id
    done = cl.create_run(exp, tags={TAG_NAME: "grid"}).info.run_id
    cl.set_terminated(done, "FINISHED")
    assert mark_stale(cl, exp, "grid") == [child]
    assert cl.get_run(child).info.status == "KILLED" and "run again" in cl.get_run(child).data.tags[TAG_ERROR]
    assert cl.get_run(parent).info.status == "KILLED" and TAG_ERROR not in cl.get_run(parent).data.tags
    assert cl.get_run(other).info.status == "RUNNING" and cl.get_run(done).info.status == "FINISHED"
    assert reusable_parent(cl, exp, "grid", "s1") == parent  # a parent that did not finish is reused
    assert reusable_parent(cl, exp, "grid", "s2") is None  # another set of configs: a new parent


def test_the_lock_refuses_a_second_sweep_of_the_same_name_and_experiment(store, tmp_path):
    root, _, _ = store
    lock = sweep_lock(root, tmp_path / "out", "grid", "stale")
    try:
        with pytest.raises(ConfigError, match="sweep 'grid' of experiment 'stale' is already running"):
            sweep_lock(root, tmp_path / "out", "grid", "stale")
        sweep_lock(root, tmp_path / "out", "grid", "other experiment").release()  # another key: free
    finally:
        lock.release()
    sweep_lock(root, tmp_path / "out", "grid", "stale").release()  # released: free again
