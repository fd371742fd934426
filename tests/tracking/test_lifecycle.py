"""lab.tracking.lifecycle.tracked_run on a real MLflow store in tmp_path: how a run ends on a normal exit, an
exception, an interrupt, a status set by the caller, a nested run, a resumed run; and that the trainers' logging
steps leave no run RUNNING when they fail."""
from __future__ import annotations

import pytest
from conftest import blank_store

from lab.core.errors import ConfigError
from lab.tracking.lifecycle import TAG_ERROR, tracked_run
from lab.tracking.store import client


@pytest.fixture
def store(tmp_path, pytestconfig):
    return blank_store(tmp_path, pytestconfig)


def runs_of(root, experiment: str) -> list:
    cl = client(root)
    exp = cl.get_experiment_by_name(experiment)
    return cl.search_runs([exp.experiment_id], max_results=100) if exp else []


def test_normal_exit_ends_finished_with_the_tags_asked_for(store):
    with tracked_run("life", run_name="plain", tracking_root=store, tags={"kind": "x", "dropped": None}) as run:
        run.log_params({"a": 1})
        run.log_metrics({"ndcg@10": 0.5})
        run.log_metric("train_loss", 0.25, step=3)
        assert client(store).get_run(run.run_id).info.status == "RUNNING"
    r = client(store).get_run(run.run_id)
    assert r.info.status == "FINISHED" == run.final_status and r.info.run_name == "plain"
    assert r.data.tags["mlflow.source.type"] == "LOCAL" and r.data.tags["kind"] == "x"
    assert "dropped" not in r.data.tags and TAG_ERROR not in r.data.tags and "git_commit" not in r.data.tags
    assert r.data.params == {"a": "1"} and r.data.metrics == {"ndcg_at_10": 0.5, "train_loss": 0.25}


def test_environment_tags_and_no_source_type(store):
    with tracked_run("life", tracking_root=store, environment=True, source_type=None) as run:
        pass
    tags = client(store).get_run(run.run_id).data.tags
    assert tags["git_commit"] and tags["metrics_version"] and "version.mlflow" in tags
    assert "mlflow.source.type" not in tags


def test_an_exception_ends_failed_with_the_error_tag_and_propagates(store):
    with pytest.raises(ValueError, match="broken on purpose"):
        with tracked_run("life", run_name="boom", tracking_root=store) as run:
            run.log_params({"a": 1})
            raise ValueError("broken on purpose")
    r = client(store).get_run(run.run_id)
    assert r.info.status == "FAILED" == run.final_status
    assert r.data.tags[TAG_ERROR] == "ValueError: broken on purpose" and r.data.params == {"a": "1"}


def test_keyboard_interrupt_ends_killed(store):
    with pytest.raises(KeyboardInterrupt):
        with tracked_run("life", tracking_root=store) as run:
            raise KeyboardInterrupt
    r = client(store).get_run(run.run_id)
    assert r.info.status == "KILLED" and r.data.tags[TAG_ERROR] == "KeyboardInterrupt"


def test_the_caller_chooses_the_final_status_or_records_a_handled_failure(store):
    with tracked_run("life", tracking_root=store) as parent:
        parent.status = "FAILED"  # e.g. a sweep where some config failed
    assert client(store).get_run(parent.run_id).info.status == "FAILED"
    assert TAG_ERROR not in client(store).get_run(parent.run_id).data.tags
    with tracked_run("life", tracking_root=store) as run:
        run.fail("NotebookError: cell 3 raised")
    r = client(store).get_run(run.run_id)
    assert (r.info.status, r.data.tags[TAG_ERROR]) == ("FAILED", "NotebookError: cell 3 raised")
    with pytest.raises(ConfigError, match="FINISHED, FAILED, KILLED"):
        with tracked_run("life", tracking_root=store) as bad:
            bad.status = "DONE"
    assert client(store).get_run(bad.run_id).info.status == "FAILED"  # the ConfigError ended it


def test_nested_runs_and_a_failing_child_fails_its_parent(store):
    with pytest.raises(RuntimeError):
        with tracked_run("life", run_name="parent", tracking_root=store) as parent:
            with tracked_run(experiment_id=parent.experiment_id, run_name="ok", parent_run_id=parent.run_id,
                             cl=parent.cl) as ok:
                pass
            with tracked_run(experiment_id=parent.experiment_id, run_name="bad", parent_run_id=parent.run_id,
                             cl=parent.cl) as bad:
                raise RuntimeError("child broke")
    cl = client(store)
    for child in (ok, bad):
        assert cl.get_run(child.run_id).data.tags["mlflow.parentRunId"] == parent.run_id
    assert [cl.get_run(r.run_id).info.status for r in (ok, bad, parent)] == ["FINISHED", "FAILED", "FAILED"]
    assert cl.get_run(parent.run_id).data.tags[TAG_ERROR] == "RuntimeError: child broke"


def test_a_run_ended_elsewhere_is_not_revived_with_keep_ended(store):
    with tracked_run("life", tracking_root=store, keep_ended=True) as run:
        run.cl.set_terminated(run.run_id, "KILLED")  # as a resumed sweep marks a stale run
    assert client(store).get_run(run.run_id).info.status == "KILLED" == run.final_status
    with tracked_run("life", tracking_root=store) as plain:
        plain.cl.set_terminated(plain.run_id, "KILLED")
    assert client(store).get_run(plain.run_id).info.status == "FINISHED"  # without keep_ended the block decides


def test_resume_sets_running_again_and_drops_the_old_error(store):
    with pytest.raises(ValueError):
        with tracked_run("life", tracking_root=store) as first:
            raise ValueError("first try")
    with tracked_run(tracking_root=store, resume_run_id=first.run_id) as again:
        assert client(store).get_run(first.run_id).info.status == "RUNNING"
    r = client(store).get_run(first.run_id)
    assert again.run_id == first.run_id and r.info.status == "FINISHED" and TAG_ERROR not in r.data.tags


def test_the_store_failing_while_ending_does_not_hide_the_first_error(store, monkeypatch):
    with pytest.raises(ValueError, match="the real error"):
        with tracked_run("life", tracking_root=store) as run:
            def down(*a, **k):
                raise OSError("store down")
            monkeypatch.setattr(run.cl, "set_terminated", down)
            monkeypatch.setattr(run.cl, "log_batch", down)
            raise ValueError("the real error")


def test_no_experiment_is_refused(store):
    with pytest.raises(ConfigError, match="experiment"):
        with tracked_run(tracking_root=store):
            pass


# --- the trainers' logging steps -----------------------------------------------------------------------------

def _training_meta() -> dict:
    """The fields lab.training's MLflow logging reads, as a finished tiny training would hold them."""
    return {"params": {"loss": "listwise", "epochs": 1}, "base_model": "m", "dataset": "tiny", "split": "train",
            "eval_dataset": "tiny", "eval_split": "test", "forced": False, "n_groups": 2, "n_pairs": 2,
            "n_train_queries": 2, "n_val_queries": 1, "selected_epoch": 1, "stopped_early": False,
            "sources": [{"dataset": "tiny", "split": "train"}],
            "leakage": {"shared_query_ids": 0, "doc_overlap": "allow"},
            "loss_curve": [{"step": 1, "epoch": 1, "loss": 0.7}], "epochs": [{"epoch": 1, "train_loss": 0.7,
                                                                               "val_ndcg@10": 0.5}],
            "train_seconds": 1.0, "total_seconds": 2.0, "steps": 1, "chance_loss": 0.69, "recommended_alpha": 1.0,
            "val_first_stage_ndcg@10": 0.4, "val_rerank_ndcg@10": 0.5, "val_base_ndcg@10": 0.4,
            "val_best_ndcg@10": 0.5, "weights_sha256": "w", "metadata_sha256": "m", "model_sha256": "s",
            "content_key": "k", "dataset_fingerprint": "f", "seed": 0}


@pytest.mark.parametrize("trainer", ["reranker", "embedder"])
def test_a_training_logger_that_raises_leaves_no_running_run(store, tmp_path, monkeypatch, trainer):
    """Before the lifecycle, an error while logging a training (here: the metrics step) left its run RUNNING."""
    import lab.tracking.lifecycle as lifecycle_mod  # where a tracked run looks up log_metrics

    if trainer == "reranker":
        from lab.training.reranker import log_training
    else:
        from lab.training.embedder import log_training

    def broken(*a, **k):
        raise RuntimeError("metrics step failed on purpose")

    monkeypatch.setattr(lifecycle_mod, "log_metrics", broken)
    with pytest.raises(RuntimeError, match="on purpose"):
        log_training(_training_meta(), tmp_path / "model", store, "training")
    runs = runs_of(store, "training")
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert runs[0].data.tags[TAG_ERROR] == "RuntimeError: metrics step failed on purpose"
    assert runs[0].info.run_name.startswith(f"train-{trainer} ")
    monkeypatch.undo()
    rid = log_training(_training_meta(), tmp_path / "model", store, "training")  # the same meta logs fine
    assert client(store).get_run(rid).info.status == "FINISHED"
