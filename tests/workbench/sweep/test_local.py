"""lab.workbench.sweep.local: pool workers share the cores among local LLMs; the last configs warm no kernel."""
from __future__ import annotations

import os

from lab.workbench.sweep import SweepTask, local


def test_pool_workers_share_the_cores_among_local_llms(monkeypatch):
    """Each pool worker (and the kernels it starts) gets $LAB_LLM_THREADS = its share of the cores, so N workers
    that load a local LLM at once do not each take every idle core; a value the user set is kept."""
    monkeypatch.setattr(local, "die_with_parent", lambda: None)
    monkeypatch.delenv("LAB_LLM_THREADS", raising=False)
    local.init_worker(1)
    assert os.environ["LAB_LLM_THREADS"] == "1"
    monkeypatch.setenv("LAB_LLM_THREADS", "4")
    local.init_worker(1)
    assert os.environ["LAB_LLM_THREADS"] == "4"


def _task(i: int) -> SweepTask:
    return SweepTask(index=i, config={}, config_hash=f"h{i}", label=f"c{i}", run_name=f"c{i}", inject={},
                     notebook="nb.ipynb", notebook_rel="nb.ipynb", output_path=f"out{i}.ipynb", tracking_uri="file:x",
                     experiment_id="1", parent_run_id="p", sweep_name="s")


def test_the_last_config_of_each_worker_warms_no_kernel():
    """Handed out in order, the last ``jobs`` tasks are each the last their worker gets: warming after them is waste."""
    marked = local.mark_last([_task(i) for i in range(5)], jobs=2)
    assert [t.warm_next for t in marked] == [True, True, True, False, False]
    assert [t.warm_next for t in local.mark_last([_task(0)], jobs=1)] == [False]
